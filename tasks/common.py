"""The fine-tuning command lines' shared part: google-research/bert's flags, the parser,
and `run`, which turns parsed flags into a task's config and runs tasks/driver.py.
"""

import argparse
import dataclasses

from bert_tf.base.cli import ArgumentParser, DTYPES, boolean, run_main


# The help texts of google-research/bert's fine-tuning flags (run_classifier.py /
# run_squad.py names), in --help's order. Defaults and types are FineTuneConfig's fields
# (tasks/driver.py): written once, there.
COMMON_FLAGS = {
    "init_checkpoint": dict(help=(
        "pretrained weights: google TF1 (bert_model.ckpt), HF directory, or .keras; "
        "or a released checkpoint's name (uncased_L-12_H-768_A-12, bert-base-cased, "
        "...: bert_tf/checkpoints/registry.py), downloaded once into $BERT_TF_CACHE; "
        "omitted = random initialisation (for comparisons)")),
    "bert_config_file": dict(help="config JSON; default: the one beside --init_checkpoint"),
    "vocab_file": dict(help="vocab.txt; default: the one beside --init_checkpoint"),
    "do_lower_case": dict(help=(
        "lowercase and strip accents before WordPiece: true for uncased checkpoints, "
        "false for cased ones (a mismatch with the vocabulary is refused)")),
    "output_dir": dict(required=True, help="checkpoints, logs, predictions, eval results"),
    "max_seq_length": dict(help=(
        "WordPiece tokens a sequence is packed to, [CLS] and [SEP] included; longer "
        "text is cut (or read in windows where the task offers them)")),
    "do_train": dict(help="fine-tune on the training data"),
    "do_eval": dict(help="score the evaluation data with the run's weights"),
    "do_predict": dict(help="predict the prediction file(s) with the run's weights"),
    "train_batch_size": dict(help="examples per training step"),
    "eval_batch_size": dict(help="examples per evaluation batch"),
    "predict_batch_size": dict(help="examples per prediction batch"),
    "learning_rate": dict(help="AdamW's peak learning rate (after warm-up, then linear "
                               "decay to 0)"),
    "num_train_epochs": dict(help="passes over the training data (a fraction allowed)"),
    "warmup_proportion": dict(help="share of the training steps the learning rate "
                                   "rises linearly from 0 over"),
    "weight_decay": dict(help="AdamW's weight decay (not on biases and LayerNorm)"),
    "mixed_precision": dict(choices=tuple(DTYPES), help=(
        "the encoder's compute dtype (float32; bfloat16 or float16 mixed precision, "
        "variables and outputs kept in float32)")),
    "strategy": dict(choices=("auto", "one_device", "mirrored", "multi_worker", "tpu"),
                     help="tf.distribute strategy (auto: tpu with --tpu, multi_worker "
                          "when TF_CONFIG names several workers, mirrored over several "
                          "GPUs or --cpu_devices, else one device)"),
    "cpu_devices": dict(
        help="split the CPU into N logical devices (mirrored strategy without accelerators)"),
    "tpu": dict(help="TPU name or address, for --strategy tpu (or auto)"),
    "seed": dict(help="seed of the head's initialisation, dropout and shuffling"),
    "save_checkpoints_steps": dict(help=(
        "save the resumable training state (OUTPUT_DIR/resume/, also after every "
        "epoch and on SIGTERM/SIGINT) every N steps; running the same command again "
        "continues from it")),
    "length_batching": dict(choices=("longest", "sort", "bucket", "off"), help=(
        "longest: batches in their shuffled order, each cut to its longest sequence "
        "(a multiple of 8): the batches of off, so the model learns what it learns "
        "there; sort: training examples sorted by width within windows of 50 "
        "batches, batches shuffled (HF's group_by_length): faster on short texts, "
        "but batches of like lengths can learn less (docs/benchmarks.md, Length "
        "batching and accuracy); bucket: tf.data length buckets instead; off: every "
        "batch padded to --max_seq_length (google's). Evaluation and prediction keep "
        "their order (sort and bucket act as longest there). See bert_tf/text/batching.py")),
}


def add_config_flags(parser, config_class, flags):
    """One flag per entry of `flags` ({field name: add_argument options such as help,
    choices, required}), its default and type taken from config_class's field of that
    name: a bool field is a `boolean` flag, an int or float field parses as one, any
    other takes the string as given."""
    fields = {field.name: field for field in dataclasses.fields(config_class)}
    for name, options in flags.items():
        field = fields[name]
        options = dict(options)
        if not options.get("required"):
            options["default"] = field.default
        if field.type is bool:
            boolean(parser, f"--{name}", **options)
        else:
            if field.type in (int, float):
                options["type"] = field.type
            parser.add_argument(f"--{name}", **options)
    return parser


def add_common_flags(parser, config_class=None):
    """google-research/bert's fine-tuning flags (run_classifier.py / run_squad.py names),
    their defaults config_class's (a FineTuneConfig subclass; a task may change one, as
    NER and SQuAD leave max_seq_length unset: the trained run's)."""
    from tasks.driver import FineTuneConfig
    return add_config_flags(parser, config_class or FineTuneConfig, COMMON_FLAGS)


def add_flags(parser, config_class):
    """A family's command's flags: google's fine-tuning flags, then the settings' own
    (config_class.FLAGS), each flag's default and type its field's."""
    add_common_flags(parser, config_class)
    return add_config_flags(parser, config_class, config_class.FLAGS)


class DefaultsOnceFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults formatter, except where the help text already says its
    default in words ("(default: the training file's, sorted)"), or there is none to say
    (None, a required flag): "(default: ...)" is then not added a second time."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default is None or action.required:
            return text
        return super()._get_help_string(action)


def parser(description):
    return ArgumentParser(description=description, formatter_class=DefaultsOnceFormatter)


def run(family, config_class, args):
    """`python -m tasks.<name>`: the family's Task run on the config of parsed flags, with
    the commands' exit convention (bert_tf/base/cli.py). `family`: a function of the
    config that returns the Task; a command checks its flags there before it imports its
    family, so a bad one (and --help) is answered without TensorFlow's start."""
    from bert_tf.base.training_plumbing import Interrupted
    from tasks import driver

    def run_task(a):
        config = config_class.from_args(a)
        return driver.run(family(config), config)
    # Interrupted: SIGTERM or SIGINT stopped training after saving (tasks/resume.py).
    # The numeric flags' ranges are the settings' (FineTuneConfig.flag_ranges).
    return run_main(run_task, args, errors=(Interrupted,), **config_class.flag_ranges())
