"""The fine-tuning command lines' shared part: google-research/bert's flags, the parser,
and `run`, which turns parsed flags into a task's config and runs tasks/driver.py.
"""

import argparse

from bert_tf.cli import ArgumentParser, DTYPES, boolean, run_main


def add_common_flags(parser):
    """google-research/bert's fine-tuning flags (run_classifier.py / run_squad.py names)."""
    f = parser.add_argument
    f("--init_checkpoint", default=None,
      help="pretrained weights: google TF1 (bert_model.ckpt), HF directory, or .keras; "
           "or a released checkpoint's name (uncased_L-12_H-768_A-12, bert-base-cased, "
           "...: bert_tf/registry.py), downloaded once into $BERT_TF_CACHE; "
           "omitted = random initialisation (for comparisons)")
    f("--bert_config_file", default=None,
      help="config JSON; default: the one beside --init_checkpoint")
    f("--vocab_file", default=None, help="vocab.txt; default: the one beside --init_checkpoint")
    boolean(parser, "--do_lower_case", default=True)
    f("--output_dir", required=True, help="checkpoints, logs, predictions, eval results")
    f("--max_seq_length", type=int, default=128)
    boolean(parser, "--do_train")
    boolean(parser, "--do_eval")
    boolean(parser, "--do_predict")
    f("--train_batch_size", type=int, default=32)
    f("--eval_batch_size", type=int, default=8)
    f("--predict_batch_size", type=int, default=8)
    f("--learning_rate", type=float, default=5e-5)
    f("--num_train_epochs", type=float, default=3.0)
    f("--warmup_proportion", type=float, default=0.1)
    f("--weight_decay", type=float, default=0.01)
    f("--mixed_precision", default="float32", choices=tuple(DTYPES))
    f("--strategy", default="auto",
      choices=("auto", "one_device", "mirrored", "multi_worker", "tpu"))
    f("--cpu_devices", type=int, default=0,
      help="split the CPU into N logical devices (mirrored strategy without accelerators)")
    f("--tpu", default=None)
    f("--seed", type=int, default=12345)
    f("--save_checkpoints_steps", type=int, default=1000,
      help="save the resumable training state (OUTPUT_DIR/resume/, also after every "
           "epoch and on SIGTERM/SIGINT) every N steps; running the same command again "
           "continues from it")
    f("--length_batching", default="sort", choices=("sort", "bucket", "longest", "off"),
      help="sort: training examples sorted by length within windows of 50 batches, "
           "every batch cut to its longest sequence (a multiple of 8), batches shuffled "
           "(HF's group_by_length); bucket: tf.data length buckets instead; longest: "
           "batches keep their order, each cut to its longest; off: every batch padded "
           "to --max_seq_length (google's). Evaluation and prediction keep their order "
           "(sort and bucket act as longest there). See bert_tf/batching.py")
    return parser


def parser(description):
    return ArgumentParser(description=description,
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)


def run(task, config_class, args):
    """`python -m tasks.<name>`: the task run on the config of parsed flags, with the
    commands' exit convention (bert_tf/cli.py)."""
    from bert_tf.pretraining.trainer import Interrupted
    from tasks import driver

    def run_task(a):
        return driver.run(task, config_class.from_args(a))
    # Every task's numeric flags (a task's own ones are skipped by the tasks without them).
    # Interrupted: SIGTERM or SIGINT stopped training after saving (tasks/resume.py).
    return run_main(run_task, args, errors=(Interrupted,), positive=(
        "max_seq_length", "train_batch_size", "eval_batch_size", "predict_batch_size",
        "learning_rate", "num_train_epochs", "save_checkpoints_steps", "doc_stride",
        "max_query_length", "n_best_size", "max_answer_length", "feature_lstm_units"),
        non_negative=("weight_decay", "cpu_devices"), fractions=("warmup_proportion",))
