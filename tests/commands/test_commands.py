"""Every command's flags, pinned: `--help` exits 0 and names exactly the flags each
command had before the CLI kit and the driver (google-research/bert's names for the ones
google's scripts have). Bad inputs are checked per command in its own test file."""

import importlib

import pytest

from tests import command_main

FLAGS = {
    "bert_tf.build_vocab": """
        character_coverage do_lower_case input_file max_unique_chars min_frequency output_file
        vocab_size""",
    "bert_tf.convert_checkpoint": """
        bert_config_file input input_format output output_format overwrite vocab_file""",
    "bert_tf.base.corpus": """
        max_bytes output_file source_dir""",
    "bert_tf.create_pretraining_data": """
        block_size_kb chinese_word_segmenter do_lower_case do_whole_word_mask
        dupe_factor gzip input_file input_tfds
        input_format jsonl_field masked_lm_prob masking max_ngram_size
        max_predictions_per_seq max_seq_length next_sentence num_shards num_workers
        output_file quiet random_seed runner short_seq_prob tfds_data_dir tfds_split
        tfds_text_field vocab_file""",
    "bert_tf.extract_features": """
        batch_size bert_config_file do_lower_case doc_stride init_checkpoint input_file
        layers max_seq_length output_file output_format runner vocab_file""",
    "bert_tf.quickstart": """
        corpus dupe_factor learning_rate max_predictions_per_seq max_seq_length
        mixed_precision num_train_steps preset steps_per_loop train_batch_size
        vocab_size work_dir""",
    "bert_tf.run_pretraining": """
        bert_config_file cpu_devices do_eval do_train do_whole_word_mask eval_batch_size
        eval_input_file gcp_project gradient_accumulation_steps init_checkpoint input_file
        jit_compile keep_checkpoints learning_rate length_batching masked_lm_prob masking
        max_eval_steps max_ngram_size max_predictions_per_seq max_seq_length
        mixed_precision next_sentence num_schedule_steps num_train_steps
        num_warmup_steps optimizer output_dir preset save_checkpoints_steps seed
        shuffle_buffer skip_corrupt_records start_step steps_per_loop strategy tpu tpu_zone
        train_batch_size vocab_file""",
    "export.saved_model": """
        checkpoint_dir do_lower_case dtype freeze_weights max_seq_length max_text_bytes
        output_dir task top_k vocab_file""",
    "export.batch_predict": """
        bad_lines input_file max_batch_size model_dir output_file overwrite runner
        shard_lines""",
    "tasks.glue": """
        bad_rows bert_config_file cpu_devices data_dir dev_file do_eval do_lower_case
        do_predict do_train doc_stride eval_batch_size has_header init_checkpoint
        jit_compile label_column labels learning_rate length_batching max_seq_length
        max_windows mixed_precision num_train_epochs output_dir predict_batch_size
        regression save_checkpoints_steps seed strategy task_name test_file text_a_column
        text_b_column tfds_data_dir tpu train_batch_size train_file vocab_file
        warmup_proportion weight_decay window_pooling""",
    "tasks.ner": """
        bert_config_file cache_features cpu_devices do_eval do_lower_case do_predict
        do_train doc_stride eval_batch_size eval_file extracted_features feature_based
        feature_head feature_layers
        feature_lstm_units init_checkpoint learning_rate length_batching line_unit
        max_seq_length mixed_precision num_train_epochs output_dir predict_batch_size predict_file
        save_checkpoints_steps seed strategy tpu train_batch_size train_file vocab_file
        warmup_proportion weight_decay""",
    "tasks.families.multilabel.__main__": """
        allow_empty_labels bert_config_file cpu_devices dev_file do_eval do_lower_case
        do_predict do_train doc_stride eval_batch_size has_header init_checkpoint
        jit_compile label_column label_delimiter label_file label_prior_bias learning_rate
        length_batching max_seq_length max_windows mixed_precision num_train_epochs output_dir
        predict_batch_size save_checkpoints_steps seed strategy test_file text_a_column
        text_b_column tpu train_batch_size train_file vocab_file warmup_proportion
        weight_decay window_pooling""",
    "tasks.squad": """
        bert_config_file cpu_devices do_eval do_lower_case do_predict do_train
        doc_stride eval_batch_size init_checkpoint learning_rate length_batching
        max_answer_length max_query_length max_seq_length mixed_precision n_best_size
        null_score_diff_threshold num_train_epochs output_dir predict_batch_size
        predict_file save_checkpoints_steps seed strategy tpu train_batch_size train_file
        version_2_with_negative vocab_file warmup_proportion weight_decay""",
    "tasks.search.__main__": """
        export_dir grid metric output_dir restarts task test_file""",
    "tasks.swag": """
        bad_rows bert_config_file cpu_devices data_dir dev_file do_eval do_lower_case
        do_predict do_train eval_batch_size init_checkpoint jit_compile learning_rate
        length_batching max_seq_length mixed_precision num_train_epochs output_dir
        predict_batch_size save_checkpoints_steps seed strategy test_file tpu
        train_batch_size train_file vocab_file warmup_proportion weight_decay""",
}


@pytest.mark.parametrize("command", sorted(FLAGS))
def test_help_exits_0_and_lists_the_same_flags(command, capsys):
    import re
    with pytest.raises(SystemExit) as exit_:
        command_main(command)(["--help"])
    assert exit_.value.code == 0
    shown = set(re.findall(r"(?<![\w-])--([a-z][a-z0-9_]*)", capsys.readouterr().out))
    assert shown - {"help"} == set(FLAGS[command].split()), command


# Run in a new process: each family command's --help, then whether TensorFlow was
# imported by then.
_HELP_CHILD = """
import contextlib, io, json, sys
from tests import command_main
main = command_main(sys.argv[1])
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(["--help"])
    except SystemExit as e:
        code = e.code
print(json.dumps([code, "--output_dir" in out.getvalue(), "tensorflow" in sys.modules]))
"""


@pytest.mark.parametrize("name", ["classification", "multilabel", "ner", "squad", "swag"])
def test_a_family_command_answers_help_and_refuses_before_tensorflow(name, tmp_path):
    """Each family's command imports its Task (and so TensorFlow and the model) only once
    the flags passed their checks: --help, and a command with nothing to do, are answered
    in a fraction of a second instead of after TensorFlow's start (~5 CPU-s)."""
    import json
    import subprocess
    import sys

    from tasks.families import REGISTRY
    from tests import ROOT
    from tests.testing import refusals_before_tensorflow
    # Every registered family is a case (its command: the package of its Task's module).
    assert sorted(REGISTRY) == ["classification", "multilabel", "ner", "squad", "swag"]
    module = REGISTRY[name].rsplit(".", 1)[0]
    done = subprocess.run([sys.executable, "-c", _HELP_CHILD, module], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0, True, False], module
    flags = ["--task_name=custom"] if name == "classification" else []
    refusals_before_tensorflow(module, [(flags + ["--output_dir", str(tmp_path / "run")],
                                         "nothing to do: pass --do_train")], tmp_path)


def test_export_help_names_every_task_family_for_its_run_directory(capsys):
    """export.saved_model --help: the --checkpoint_dir line names every task of --task,
    the pretrained ones and each registered family (multi-label included), as what the
    flag takes; the list is the registry's, so a new family is named there too."""
    import re
    from tasks.families import REGISTRY
    with pytest.raises(SystemExit):
        importlib.import_module("export.saved_model").main(["--help"])
    out = capsys.readouterr().out
    line = " ".join(out.split("\n  --checkpoint_dir CHECKPOINT_DIR\n", 1)[1]
                    .split("\n  --", 1)[0].split())
    assert re.search(r"pretraining/embeddings: .*; classification/swag/ner/squad/"
                     r"multilabel: the --output_dir of the fine-tuning run$", line), line
    assert "/".join(REGISTRY) + ":" in line
