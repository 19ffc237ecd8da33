"""Every command against every kind of bad input, one row each (tests/fuzz_inputs.py
writes the inputs).

A refused row asserts: exit status 1 (2 for argparse's own errors), exactly one line on
stderr, `error: ...`, that contains the row's text (the file or flag, and what was
expected), no traceback, nothing under the output name and no temporary file left
anywhere. An accepted row (a CRLF file behind a BOM, one 5 MB line) asserts exit 0 and,
where the command's output is cheap to compare, the same output as the clean input's.

The full and read-only output directories are in tests/workflows/test_full_disk.py (they need a
tmpfs mount)."""

import os

import pytest

from tests import command_main
from tests.testing import tree_hash

ROWS = {}


def row(command, case, argv, expect):
    """`expect`: the text the one error line must contain, or None for an accepted input
    (exit 0)."""
    ROWS[f"{command.rsplit('.', 1)[-1]}:{case}"] = (command, argv, expect)


TEXT_REFUSED = {
    "missing": ("{path}: ",),
    "empty": ("{path}:", "empty"),
    "dir": ("{path}: Is a directory",),
    "latin1": ("{path}:", "not UTF-8"),
    "nul": ("{path}:", "NUL byte"),
}


def text_rows(command, flag, role, argv, kinds=TEXT_REFUSED, accepted=("crlf_bom",)):
    """Rows for the text input `flag` of `command`: each kind of bad file refused (the
    line names the file and says what was wrong), each of `accepted` run through."""
    for kind, texts in kinds.items():
        expect = tuple(t.replace("{path}", "{%s_%s}" % (role, kind)) for t in texts)
        row(command, f"{flag}={kind}", lambda ns, out, k=kind: argv(ns, out, {flag: getattr(
            ns, role)[k]}), expect)
    for kind in accepted:
        row(command, f"{flag}={kind}", lambda ns, out, k=kind: argv(ns, out, {flag: getattr(
            ns, role)[k]}), None)


def flag_rows(command, argv, cases):
    for flags, expect in cases:
        row(command, " ".join(f"{k}={v}" for k, v in flags.items()),
            lambda ns, out, f=flags: argv(ns, out, f), expect)


# Rows of damaged checkpoints and exports: their error line names the damaged file; the
# whole of file descriptor 2 is read (TensorFlow's C++ and Python log lines included), and
# every input the row names is hashed before and after (a refused resume must not touch
# the run it was given).
DAMAGED = {}


def damage_rows(command, argv, cases):
    """flag_rows whose inputs (the "@name" values of each case's flags) are damaged
    checkpoints or exports: see DAMAGED."""
    flag_rows(command, argv, cases)
    for flags, _ in cases:
        name = f"{command.rsplit('.', 1)[-1]}:" + " ".join(f"{k}={v}" for k, v in flags.items())
        DAMAGED[name] = [v for v in flags.values() if isinstance(v, str) and v.startswith("@")]


def _names(ns):
    """Every input's path by name: `shard_cut`, `corpus_empty`, `google_data_cut`, ..."""
    names = {}
    for key, value in vars(ns).items():
        if isinstance(value, dict):
            names.update({f"{key}_{k}": v for k, v in value.items()})
        elif isinstance(value, str):
            names[key] = value
    return names


def _resolve(value, ns):
    """"@name" (and "@name/more") -> that input's path; anything else as it is."""
    if not (isinstance(value, str) and value.startswith("@")):
        return value
    names = _names(ns)
    name = max((n for n in names if value[1:].startswith(n)), key=len)
    return names[name] + value[1 + len(name):]


def argv_of(defaults):
    """A row's argv builder: the command's defaults (callables of (ns, out)) updated by
    the row's flags (values or callables of ns)."""
    def build(ns, out, flags):
        values = {k: (v(ns, out) if callable(v) else v) for k, v in defaults.items()}
        values.update({k: _resolve(v, ns) for k, v in flags.items()})
        argv = []
        for k, v in values.items():
            if v is True:
                argv.append(f"--{k}")
            elif v is not None:
                argv.append(f"--{k}={v}")
        return argv
    return build


# ------------------------------------------------------------------------- build_vocab
BUILD_VOCAB = "bert_tf.build_vocab"
bv = argv_of({"input_file": lambda ns, out: ns.corpus["good"],
              "output_file": lambda ns, out: os.path.join(out, "vocab.txt"),
              "vocab_size": 200, "min_frequency": 1})
text_rows(BUILD_VOCAB, "input_file", "corpus", bv, accepted=("crlf_bom", "long_line"))
flag_rows(BUILD_VOCAB, bv, [
    ({"vocab_size": 0}, "--vocab_size must be a positive number, got 0"),
    ({"vocab_size": -5}, "--vocab_size must be a positive number, got -5"),
    ({"vocab_size": "ten"}, "argument --vocab_size: invalid int value: 'ten'"),
    ({"output_file": "@shard_dir"}, "{shard_dir}: Is a directory"),
    ({"min_frequency": -1}, "--min_frequency must be a number >= 0, got -1"),
    ({"max_unique_chars": 0}, "--max_unique_chars must be a positive number, got 0"),
    ({"output_file": "@corpus_good"},
     "--output_file={corpus_good} is the input --input_file={corpus_good}"),
])

# ------------------------------------------------------------- create_pretraining_data
CPD = "bert_tf.create_pretraining_data"
cpd = argv_of({"input_file": lambda ns, out: ns.corpus["good"],
               "output_file": lambda ns, out: os.path.join(out, "shard.tfrecord"),
               "vocab_file": lambda ns, out: ns.vocab, "max_seq_length": 32,
               "max_predictions_per_seq": 5, "dupe_factor": 1, "num_workers": 1,
               "quiet": True})
text_rows(CPD, "input_file", "corpus", cpd, accepted=("crlf_bom", "long_line"),
          kinds=dict(TEXT_REFUSED, dir=("{path} is not a file",),
                     missing=("--input_file: no file matches '{path}'",)))
flag_rows(CPD, cpd, [
    ({"vocab_file": "@vocab_empty"}, "--vocab_file: {vocab_empty} is empty"),
    ({"vocab_file": "@vocab_flipped"}, "{vocab_flipped} is not UTF-8"),
    ({"vocab_file": "@shard_dir"}, ("{shard_dir}", "Is a directory")),
    ({"max_seq_length": 0}, "--max_seq_length must be >= 5"),
    ({"max_predictions_per_seq": 0}, "--max_predictions_per_seq must be >= 1"),
    ({"masked_lm_prob": 1.5}, "--masked_lm_prob must be in (0, 1]"),
    ({"masked_lm_prob": "nan"}, "--masked_lm_prob must be a finite number, got nan"),
    ({"short_seq_prob": -0.1}, "--short_seq_prob must be in [0, 1]"),
    ({"dupe_factor": 0}, "--dupe_factor must be >= 1"),
    ({"num_shards": 0}, "--num_shards must be >= 1"),
    ({"num_workers": 0}, "--num_workers must be >= 1"),
    ({"block_size_kb": 0}, "--block_size_kb must be >= 1"),
    ({"output_file": "@corpus_good"},
     "--output_file={corpus_good} is the input --input_file={corpus_good}"),
    ({"output_file": "@vocab"}, "--output_file={vocab} is the input --vocab_file={vocab}"),
    ({"output_file": "@vocab/shard.tfrecord"}, ": {vocab} is a file, not a folder"),
    ({"max_seq_length": 4}, "--max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP] with one "
                            "token of each text), got 4"),
])

# --------------------------------------------------------------------- run_pretraining
RP = "bert_tf.run_pretraining"
rp = argv_of({"input_file": lambda ns, out: ns.shard,
              "output_dir": lambda ns, out: out,
              "bert_config_file": lambda ns, out: ns.config, "do_train": True,
              "num_train_steps": 2, "train_batch_size": 4, "max_seq_length": 32,
              "max_predictions_per_seq": 5, "num_warmup_steps": 0, "steps_per_loop": 1})
flag_rows(RP, rp, [
    ({"input_file": "@shard.missing"}, "--input_file: no file matches"),
    ({"input_file": "@shard_empty"}, "{shard_empty} is empty"),
    ({"input_file": "@shard_dir"}, "{shard_dir} is a directory"),
    ({"input_file": "@shard_cut"}, ("{shard_cut}: the last record, at byte", "is cut short")),
    ({"input_file": "@shard_flipped"},
     ("{shard_flipped}: the record at byte", "--skip_corrupt_records")),
    ({"input_file": "@shard_text"}, "{shard_text}: not a TFRecord file"),
    ({"max_seq_length": 64}, "--max_seq_length=64"),
    ({"max_predictions_per_seq": 7}, "--max_predictions_per_seq=7"),
    ({"max_seq_length": 100000}, "records have input_ids of length 32, but "
                                 "--max_seq_length=100000"),
    ({"bert_config_file": "@root/nope.json"}, "{root}/nope.json: config file not found"),
    ({"output_dir": "@corpus_good"}, "--output_dir={corpus_good} is a file, not a folder"),
    ({"bert_config_file": "@corpus_empty"}, "{corpus_empty}: not valid JSON"),
    ({"bert_config_file": "@config_not_json"}, "{config_not_json}: not valid JSON"),
    ({"bert_config_file": "@config_list"}, "{config_list}: expected a JSON object"),
    ({"bert_config_file": "@config_wrong_type"},
     "{config_wrong_type}: Invalid BertConfig: hidden_size must be a positive integer, got '32'"),
    ({"bert_config_file": "@config_bad_heads"},
     "hidden_size 32 is not a multiple of num_attention_heads 3"),
    ({"init_checkpoint": "@google",
      "bert_config_file": "@config_other_size"}, "{google}/bert_model.ckpt does not match the model"),
    ({"init_checkpoint": "@google_damaged_data_cut"},
     ("{google_damaged_data_cut}/bert_model.ckpt: unreadable TF1 checkpoint", "cut short")),
    ({"init_checkpoint": "@google_damaged_index_cut"},
     "{google_damaged_index_cut}/bert_model.ckpt: unreadable TF1 checkpoint"),
    ({"init_checkpoint": "@google_damaged_index_flipped"},
     "{google_damaged_index_flipped}/bert_model.ckpt: unreadable TF1 checkpoint"),
    ({"init_checkpoint": "@google_damaged_data_flipped"},
     ("{google_damaged_data_flipped}/bert_model.ckpt: unreadable TF1 checkpoint",
      "checksum mismatch")),
    ({"init_checkpoint": "@keras_cut"}, "{keras_cut}: not a readable .keras file"),
    ({"vocab_file": "@vocab_big"}, "{vocab_big}: 30530 tokens, more than the model's vocab_size 30522"),
    ({"learning_rate": 0}, "--learning_rate must be a positive number, got 0.0"),
    ({"learning_rate": -1}, "--learning_rate must be a positive number, got -1.0"),
    ({"learning_rate": "nan"}, "--learning_rate must be a positive number, got nan"),
    ({"learning_rate": "fast"}, "argument --learning_rate: invalid float value: 'fast'"),
    ({"max_seq_length": 4}, "--max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP] with one "
                            "token of each text), got 4"),
    ({"train_batch_size": 0}, "--train_batch_size must be a positive number, got 0"),
    ({"num_train_steps": -3}, "--num_train_steps must be a positive number, got -3"),
    ({"num_warmup_steps": -1}, "--num_warmup_steps must be a number >= 0, got -1"),
    ({"keep_checkpoints": 0}, "--keep_checkpoints must be a positive number, got 0"),
    ({"shuffle_buffer": 0}, "--shuffle_buffer must be a positive number, got 0"),
    ({"cpu_devices": -1}, "--cpu_devices must be a number >= 0, got -1"),
    ({"optimizer": "sgd"}, "argument --optimizer: invalid choice: 'sgd'"),
    ({"do_train": "maybe"}, "argument --do_train: expected true or false, got 'maybe'"),
])

# ------------------------------------------------------------------ convert_checkpoint
CC = "bert_tf.convert_checkpoint"
cc = argv_of({"input": lambda ns, out: ns.google, "output": lambda ns, out: out,
              "output_format": "hf"})
flag_rows(CC, cc, [
    ({"input": "@root/nope"}, "{root}/nope: no such file, directory or checkpoint prefix"),
    ({"input": "@shard_dir"}, "{shard_dir}: no checkpoint found"),
    ({"input": "@corpus_good"}, "{corpus_good}: not a checkpoint of a known format"),
    ({"output_format": "onnx"}, "argument --output_format: invalid choice: 'onnx'"),
    ({"output": "@corpus_good/hf"}, "--output={corpus_good}/hf: {corpus_good} is a file, not "
                                    "a folder"),
    ({"input": "@hf_cut"}, "{hf_cut}/model.safetensors: not a readable safetensors file"),
    ({"input": "@hf_flipped"}, "{hf_flipped}/model.safetensors: not a readable safetensors file"),
    ({"input": "@google_damaged_index_cut"},
     "{google_damaged_index_cut}/bert_model.ckpt: unreadable TF1 checkpoint"),
    ({"input": "@google_damaged_index_flipped"},
     "{google_damaged_index_flipped}/bert_model.ckpt: unreadable TF1 checkpoint"),
    ({"input": "@google_damaged_data_cut"},
     ("{google_damaged_data_cut}/bert_model.ckpt: unreadable TF1 checkpoint", "cut short")),
    ({"input": "@google_damaged_data_flipped"},
     ("{google_damaged_data_flipped}/bert_model.ckpt: unreadable TF1 checkpoint",
      "checksum mismatch")),
    ({"input": "@keras_cut"}, "{keras_cut}: not a readable .keras file"),
    ({"input": "@keras_flipped"}, "{keras_flipped}: not a readable .keras file"),
    ({"input": "@mg_data_cut"},
     ("{mg_data_cut}/ckpt-1: unreadable checkpoint: ckpt-1.data-00000-of-00001 is cut "
      "short (29,918 bytes; its index expects 299,186)",)),
    ({"input": "@mg_norm_first"},
     "{mg_norm_first}/params.yaml: norm_first: true (pre-LayerNorm) is not BERT's layout"),
    ({"input": "@tfhub_cut"}, "{tfhub_cut}: unreadable SavedModel variables"),
    ({"input": "@tfhub_preprocess"},
     "{tfhub_preprocess}: a SavedModel without a BERT encoder's variables"),
    ({"bert_config_file": "@config_wrong_type"}, "hidden_size must be a positive integer"),
    ({"bert_config_file": "@config_other_size"}, "{google}/bert_model.ckpt does not match the model"),
    ({"vocab_file": "@vocab_big"}, "{vocab_big}: 30530 tokens, more than the model's vocab_size 30522"),
    ({"output": "@google", "overwrite": True}, "--output={google} is the input --input={google}"),
])

# -------------------------------------------------------------------- extract_features
EF = "bert_tf.extract_features"
ef = argv_of({"input_file": lambda ns, out: ns.lines["good"],
              "output_file": lambda ns, out: os.path.join(out, "features.jsonl"),
              "init_checkpoint": lambda ns, out: ns.google, "max_seq_length": 16,
              "layers": "-1"})
text_rows(EF, "input_file", "lines", ef, accepted=("crlf_bom", "long_line"))
flag_rows(EF, ef, [
    ({"layers": "5"}, "--layers: index 5 is outside the encoder's 1 layers (-1..0)"),
    ({"layers": "x"}, "--layers must be comma-separated integers, got 'x'"),
    ({"max_seq_length": 2}, "--max_seq_length must be >= 3 ([CLS] A [SEP] with one token "
                            "of each text), got 2"),
    ({"max_seq_length": 100000}, "--max_seq_length 100000 exceeds the model's 512"),
    ({"batch_size": 0}, "--batch_size must be a positive number, got 0"),
    ({"init_checkpoint": "@keras_cut", "vocab_file": "@vocab"},
     "{keras_cut}: not a readable .keras file"),
    ({"init_checkpoint": "@google_damaged_data_cut"},
     ("{google_damaged_data_cut}/bert_model.ckpt: unreadable TF1 checkpoint", "cut short")),
    ({"vocab_file": "@vocab_flipped"}, "{vocab_flipped}:"),
    ({"output_file": "@lines_good"},
     "--output_file={lines_good} is the input --input_file={lines_good}"),
    ({"output_file": "@shard_dir"}, "{shard_dir}: Is a directory (expected a file name"),
    ({"output_file": "@corpus_good/features.jsonl"},
     "--output_file={corpus_good}/features.jsonl: {corpus_good} is a file, not a folder"),
    ({"do_lower_case": "false"},
     "--do_lower_case=false with {google}/vocab.txt, an uncased vocabulary"),
])

# -------------------------------------------------------------------------- quickstart
QS = "bert_tf.quickstart"
qs = argv_of({"work_dir": lambda ns, out: out, "corpus": lambda ns, out: ns.corpus["good"],
              "num_train_steps": 2, "vocab_size": 200})
text_rows(QS, "corpus", "corpus", qs, accepted=())
flag_rows(QS, qs, [
    ({"vocab_size": 0}, "--vocab_size must be a positive number, got 0"),
    ({"num_train_steps": 0}, "--num_train_steps must be a positive number, got 0"),
    ({"learning_rate": -1}, "--learning_rate must be a positive number, got -1.0"),
    ({"max_seq_length": 3}, "--max_seq_length must be >= 5"),
])


# --------------------------------------------------------------------------- the tasks
def task_argv(train):
    return argv_of({"bert_config_file": lambda ns, out: ns.config,
                    "vocab_file": lambda ns, out: ns.vocab, "output_dir": lambda ns, out: out,
                    "do_train": True, "train_file": train, "max_seq_length": 32,
                    "num_train_epochs": 1, "train_batch_size": 4})


GLUE = "tasks.glue"
glue = lambda ns, out, flags: task_argv(lambda ns, out: ns.tsv["good"])(  # noqa: E731
    ns, out, dict({"task_name": "custom", "labels": "0,1"}, **flags))
text_rows(GLUE, "train_file", "tsv", glue)
flag_rows(GLUE, glue, [
    ({"vocab_file": "@vocab_flipped"}, "{vocab_flipped}:"),
    ({"vocab_file": "@vocab_empty"}, "{vocab_empty} is empty"),
    ({"bert_config_file": "@config_wrong_type"}, "hidden_size must be a positive integer"),
    ({"bert_config_file": "@config_not_json"}, "{config_not_json}: not valid JSON"),
    ({"max_seq_length": 2}, "--max_seq_length must be >= 3 ([CLS] A [SEP] with one token of "
                            "each text), got 2"),
    ({"do_lower_case": "false"}, "--do_lower_case=false with {vocab}, an uncased vocabulary"),
    ({"output_dir": "@vocab/run"}, "--output_dir={vocab}/run: {vocab} is a file, not a folder"),
    ({"init_checkpoint": "@google",
      "bert_config_file": "@config_other_size"}, "{google}/bert_model.ckpt does not match the model"),
    ({"init_checkpoint": "@google_damaged_data_flipped"},
     ("{google_damaged_data_flipped}/bert_model.ckpt: unreadable TF1 checkpoint",
      "checksum mismatch")),
    ({"init_checkpoint": "@hf_cut", "bert_config_file": None},
     "{hf_cut}/model.safetensors: not a readable safetensors file"),
    ({"train_batch_size": 0}, "--train_batch_size must be a positive number, got 0"),
    ({"train_batch_size": -8}, "--train_batch_size must be a positive number, got -8"),
    ({"learning_rate": 0}, "--learning_rate must be a positive number, got 0.0"),
    ({"save_checkpoints_steps": 0}, "--save_checkpoints_steps must be a positive number, got 0"),
    ({"learning_rate": "nan"}, "--learning_rate must be a positive number, got nan"),
    ({"warmup_proportion": 2}, "--warmup_proportion must be a number from 0 to 1"),
    ({"num_train_epochs": -1}, "--num_train_epochs must be a positive number"),
    ({"max_seq_length": 0}, "--max_seq_length must be a positive number"),
    ({"max_seq_length": 100000},
     "--max_seq_length 100000 exceeds the model's max_position_embeddings 512"),
    ({"do_train": False, "do_eval": True, "output_dir": "@run_cut",
      "dev_file": "@tsv_good"}, "{run_cut}/last.weights.h5: not a readable weights file"),
])
SQUAD = "tasks.squad"
squad = lambda ns, out, flags: task_argv(lambda ns, out: ns.squad["good"])(  # noqa: E731
    ns, out, dict({"max_query_length": 8, "doc_stride": 8}, **flags))
text_rows(SQUAD, "train_file", "squad", squad)
flag_rows(SQUAD, squad, [
    ({"train_file": "@squad_wrong_type"}, "{squad_wrong_type}:"),
    ({"train_file": "@squad_no_data"}, "{squad_no_data}:"),
    ({"train_file": "@config_not_json"}, "{config_not_json}: line 1: not valid JSON"),
    ({"doc_stride": 0}, "--doc_stride must be a positive number, got 0"),
    ({"max_query_length": 0}, "--max_query_length must be a positive number, got 0"),
])
NER = "tasks.ner"
ner = lambda ns, out, flags: task_argv(lambda ns, out: ns.conll["good"])(  # noqa: E731
    ns, out, flags)
text_rows(NER, "train_file", "conll", ner)
flag_rows(NER, ner, [
    ({"num_train_epochs": -1}, "--num_train_epochs must be a positive number, got -1.0"),
    ({"feature_lstm_units": 0}, "--feature_lstm_units must be a positive number, got 0"),
    ({"feature_based": True, "extracted_features": "@root/nope*.tfrecord"},
     "--extracted_features: no file matches '{root}/nope*.tfrecord'"),
    ({"feature_based": True, "extracted_features": "@shard_dir"},
     "--extracted_features: {shard_dir} is a directory"),
    ({"feature_based": True, "feature_layers": "last", "extracted_features": "@shard_cut"},
     "{shard_cut}: record at byte 0 is not an extract_features record"),
    ({"feature_based": True, "feature_layers": "last",
      "extracted_features": "@conll_latin1"},
     "{conll_latin1}: record at byte 0 has a bad length checksum"),
])
SWAG = "tasks.swag"
swag = lambda ns, out, flags: task_argv(lambda ns, out: ns.swag["good"])(  # noqa: E731
    ns, out, flags)
text_rows(SWAG, "train_file", "swag", swag)

# ---------------------------------------------------------------------- export
EXPORT = "export.saved_model"
ex = argv_of({"task": "embeddings", "checkpoint_dir": lambda ns, out: ns.google,
              "output_dir": lambda ns, out: out})
flag_rows(EXPORT, ex, [
    ({"checkpoint_dir": "@root/nope"},
     "--checkpoint_dir {root}/nope: no such file, directory or checkpoint prefix"),
    ({"checkpoint_dir": "@shard_dir"}, "--checkpoint_dir {shard_dir}: no vocab.txt beside"),
    ({"checkpoint_dir": "@keras_cut", "vocab_file": "@vocab"},
     "{keras_cut}: not a readable .keras file"),
    ({"checkpoint_dir": "@google_damaged_index_flipped"},
     "{google_damaged_index_flipped}/bert_model.ckpt: unreadable TF1 checkpoint"),
    ({"task": "classification", "checkpoint_dir": "@google"},
     "{google}/glue_config.json: not found"),
    ({"vocab_file": "@vocab_flipped"}, "{vocab_flipped}:"),
    ({"vocab_file": "@vocab_big"}, "{vocab_big}: 30530 tokens"),
    ({"max_seq_length": 0}, "--max_seq_length must be a positive number, got 0"),
    ({"task": "pretraining", "top_k": 0}, "--top_k must be a positive number, got 0"),
    ({"task": "fill_mask"}, "argument --task: invalid choice: 'fill_mask'"),
    ({"task": "classification", "checkpoint_dir": "@run_cut"},
     "{run_cut}/last.weights.h5: not a readable weights file"),
    ({"task": "classification", "checkpoint_dir": "@run_flipped"},
     "{run_flipped}/last.weights.h5: not a readable weights file"),
    ({"max_seq_length": 100000}, "--max_seq_length 100000: must be in [3, 512]"),
    ({"output_dir": "@vocab"}, "--output_dir={vocab} is a file, not a folder"),
])


# ---------------------------------------------------------------------- batch_predict
BP = "export.batch_predict"
bp = argv_of({"model_dir": lambda ns, out: ns.export,
              "input_file": lambda ns, out: ns.lines["good"],
              "output_file": lambda ns, out: os.path.join(out, "preds")})
flag_rows(BP, bp, [
    ({"input_file": "@root/nope.txt"}, "--input_file: {root}/nope.txt: no such file"),
    ({"input_file": "@shard"}, ("--input_file: {shard}: expected .txt, .jsonl, .tsv, "
                                ".csv",)),
    ({"model_dir": "@google"}, "--model_dir: {google} holds no SavedModel"),
    ({"bad_lines": "error", "input_file": "@lines_latin1"}, ("{lines_latin1}:", "not UTF-8")),
    ({"max_batch_size": 0}, "--max_batch_size must be a positive number, got 0"),
    ({"shard_lines": -1}, "--shard_lines must be a positive number, got -1"),
    ({"output_file": "@corpus_good/preds"},
     "--output_file={corpus_good}/preds-00000-of-00001.jsonl: {corpus_good} is a file"),
    ({"output_file": "@export/preds"}, "lies inside the input --model_dir"),
    ({"input_file": "@lines_crlf_bom"}, None),
    ({"input_file": "@lines_latin1"}, None),       # the line goes to the dead-letter file
])


# ------------------------------------------- damaged checkpoints, through every reader
# A cut .data file (by one byte, or to nothing), a missing one, a missing or cut .index, a
# state file naming a checkpoint that is not there: in a SavedModel's variables, a
# run_pretraining folder (an object-based tf.train.Checkpoint), google's TF1 checkpoint;
# a keras-hub preset's model.weights.h5 cut, a .keras zip cut by one byte. Each reader
# says which file and what it expected, before TensorFlow reads a byte of it.
PRETRAINING_CUT1 = ("{pretraining_damaged_data_cut1}/ckpt-1: unreadable",
                    "ckpt-1.data-00000-of-00001 is cut short (")
PRETRAINING_EMPTY = ("{pretraining_damaged_data_empty}/ckpt-1: unreadable",
                     "ckpt-1.data-00000-of-00001 is cut short (0 bytes; its index expects")
PRETRAINING_MISSING = ("{pretraining_damaged_data_missing}/ckpt-1: unreadable",
                       "ckpt-1.data-00000-of-00001 is missing (its index names it")
PRETRAINING_NO_INDEX = ("{pretraining_damaged_no_index}/ckpt-1.index: missing "
                        "(ckpt-1.data-00000-of-00001 is there without it")
PRETRAINING_STATE = ("{pretraining_damaged_state_names_missing}/ckpt-7.index: missing (the "
                     "checkpoint ckpt-7 that {pretraining_damaged_state_names_missing}/"
                     "checkpoint names as the latest")
GOOGLE_NO_INDEX = ("{google_damaged_no_index}/bert_model.ckpt.index: missing "
                   "(bert_model.ckpt.data-00000-of-00001 is there without it")
PRESET_CUT1 = ("{preset_damaged_cut1}/model.weights.h5: not a readable weights file (cut "
               "short: ")
damage_rows(BP, bp, [
    ({"model_dir": "@export_damaged_data_cut1"},
     ("{export_damaged_data_cut1}/1: unreadable SavedModel: variables/variables.data-00000-"
      "of-00001 is cut short (",)),
    ({"model_dir": "@export_damaged_data_empty"},
     ("{export_damaged_data_empty}/1: unreadable SavedModel: variables/variables.data-00000-"
      "of-00001 is cut short (0 bytes; its index expects",)),
    ({"model_dir": "@export_damaged_data_missing"},
     ("{export_damaged_data_missing}/1: unreadable SavedModel: variables/variables.data-"
      "00000-of-00001 is missing",)),
    ({"model_dir": "@export_damaged_data_flipped"},
     ("{export_damaged_data_flipped}/1: unreadable SavedModel (checksum mismatch",)),
    ({"model_dir": "@export_damaged_index_cut"},
     ("{export_damaged_index_cut}/1: unreadable SavedModel: variables/variables.index is "
      "damaged",)),
])
damage_rows(CC, cc, [
    ({"input": "@pretraining_damaged_data_cut1"}, PRETRAINING_CUT1),
    ({"input": "@pretraining_damaged_data_empty"}, PRETRAINING_EMPTY),
    ({"input": "@pretraining_damaged_data_missing"}, PRETRAINING_MISSING),
    ({"input": "@pretraining_damaged_no_index"}, PRETRAINING_NO_INDEX),
    ({"input": "@pretraining_damaged_state_names_missing"}, PRETRAINING_STATE),
    ({"input": "@preset_damaged_cut1"}, PRESET_CUT1),
    ({"input": "@preset_damaged_cut"},
     "{preset_damaged_cut}/model.weights.h5: not a readable weights file (cut short: "),
    ({"input": "@google_damaged_no_index"}, GOOGLE_NO_INDEX),
    ({"input": "@google_damaged_no_index_no_state"},
     "{google_damaged_no_index_no_state}/bert_model.ckpt.index: missing"),
    ({"input": "@keras_cut1"}, "{keras_cut1}: not a readable .keras file"),
    ({"input": "@tfhub_cut1"}, ("{tfhub_cut1}: unreadable SavedModel variables: "
                                "variables/variables.data-00000-of-00001 is cut short (",)),
])
# A resume (and an evaluation) of a damaged run: refused, the run left as it is.
damage_rows(RP, rp, [
    ({"output_dir": "@pretraining_damaged_data_cut1"}, PRETRAINING_CUT1),
    ({"output_dir": "@pretraining_damaged_data_empty"}, PRETRAINING_EMPTY),
    ({"output_dir": "@pretraining_damaged_data_missing"}, PRETRAINING_MISSING),
    ({"output_dir": "@pretraining_damaged_no_index"}, PRETRAINING_NO_INDEX),
    ({"output_dir": "@pretraining_damaged_state_names_missing"}, PRETRAINING_STATE),
    ({"output_dir": "@pretraining_damaged_data_cut1", "do_train": False, "do_eval": True},
     PRETRAINING_CUT1),
    ({"init_checkpoint": "@pretraining_damaged_data_cut1"}, PRETRAINING_CUT1),
    ({"init_checkpoint": "@preset_damaged_cut1"}, PRESET_CUT1),
    ({"init_checkpoint": "@google_damaged_no_index"}, GOOGLE_NO_INDEX),
])
damage_rows(GLUE, glue, [
    ({"init_checkpoint": "@pretraining_damaged_data_cut1"}, PRETRAINING_CUT1),
    ({"init_checkpoint": "@pretraining_damaged_state_names_missing"}, PRETRAINING_STATE),
    ({"init_checkpoint": "@preset_damaged_cut1", "bert_config_file": None}, PRESET_CUT1),
    ({"init_checkpoint": "@google_damaged_no_index"}, GOOGLE_NO_INDEX),
])
damage_rows(EF, ef, [
    ({"init_checkpoint": "@pretraining_damaged_data_cut1", "vocab_file": "@vocab"},
     PRETRAINING_CUT1),
    ({"init_checkpoint": "@preset_damaged_cut1"}, PRESET_CUT1),
    ({"init_checkpoint": "@google_damaged_no_index"}, GOOGLE_NO_INDEX),
])
damage_rows(EXPORT, ex, [
    ({"checkpoint_dir": "@pretraining_damaged_data_cut1", "vocab_file": "@vocab"},
     PRETRAINING_CUT1),
    ({"checkpoint_dir": "@preset_damaged_cut1"}, PRESET_CUT1),
    ({"checkpoint_dir": "@google_damaged_no_index"}, GOOGLE_NO_INDEX),
])


@pytest.fixture(scope="module")
def ns(bad_inputs):
    return bad_inputs


def _expected(text, ns):
    """`{name}` / `{role_kind}` in a row's text -> that input's path."""
    return text.format(**_names(ns))


def _contents(path):
    """A folder's tree_hash, a file's bytes."""
    if os.path.isdir(path):
        return tree_hash(path)
    with open(path, "rb") as f:
        return f.read()


def _temporary_files(root):
    return [os.path.join(d, f) for d, dirs, files in os.walk(root) for f in files + dirs
            if ".tmp" in f or f.endswith(".part")]


# Damage found while training (a record in the middle of a shard fails its checksum):
# the run's start is on disk (its config, the log of the steps before), no checkpoint.
LEAVES_RUN_STATE = {"run_pretraining:input_file=@shard_flipped": {
    "bert_config.json", "pretraining_settings.json", "train_log.jsonl", "train"}}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_row(name, ns, tmp_path, request):
    command, argv, expect = ROWS[name]
    out = str(tmp_path / "out")
    args = argv(ns, out)
    # A damaged input's row reads all of descriptor 2: TensorFlow's own log lines too.
    capsys = request.getfixturevalue("capfd" if name in DAMAGED else "capsys")
    inputs = [_resolve(value, ns) for value in DAMAGED.get(name, ())]
    before = [_contents(path) for path in inputs]
    main = command_main(command)
    try:
        main(args)
        code = 0
    except SystemExit as e:
        code = e.code
    except BaseException as e:  # noqa: BLE001
        if not os.environ.get("FUZZ_EXPLORE"):
            raise
        code = f"raised {type(e).__name__}: {str(e)[:150]}"
    captured = capsys.readouterr()
    if os.environ.get("FUZZ_EXPLORE"):
        lines = captured.err.strip().splitlines()
        print(f"\nROW {name} | code={code} | lines={len(lines)} | "
              f"{lines[-1] if lines else ''} | tb={'Traceback' in captured.err} | "
              f"left={os.listdir(out) if os.path.isdir(out) else '-'}", file=open(
                  "/tmp/fuzz_explore.txt", "a"))
        return
    assert "Traceback" not in captured.err + captured.out, captured.err
    if expect is None:
        assert code in (0, None), captured.err
        return
    lines = captured.err.strip().splitlines()
    assert code in (1, 2), (code, captured.err)
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    for text in (expect if isinstance(expect, tuple) else (expect,)):
        assert _expected(text, ns) in lines[0], lines[0]
    left = set(os.listdir(out)) if os.path.exists(out) else set()
    assert left <= LEAVES_RUN_STATE.get(name, set()), left
    assert not _temporary_files(ns.root) and not _temporary_files(str(tmp_path))
    assert [_contents(path) for path in inputs] == before


def test_ctrl_c_is_one_line_and_status_130(capsys):
    """Ctrl-C inside any command's work (the shared run_main): one line, exit status 130,
    no KeyboardInterrupt traceback. (run_pretraining saves a checkpoint first:
    tests/training/test_pretraining.py.)"""
    from bert_tf.base.cli import run_main

    def work(args):
        raise KeyboardInterrupt
    with pytest.raises(SystemExit) as exit_info:
        run_main(work, None, keras=False)
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == "error: interrupted (Ctrl-C)\n"
