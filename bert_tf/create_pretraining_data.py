"""Writes masked-LM + next-sentence pretraining examples as TFRecord shards.

    python -m bert_tf.create_pretraining_data --input_file='corpus/*.txt' \\
        --output_file=shards/train --num_shards=16 --vocab_file=vocab.txt \\
        --max_seq_length=128 --max_predictions_per_seq=20 --dupe_factor=10

google-research/bert's create_pretraining_data.py with the same flags, defaults, algorithm
and output features (shards from either train with either), but streaming: memory stays
flat whatever the corpus size, all cores work, the output is the same for a given seed
whatever --num_workers is, and a killed run picks up where it stopped with byte-identical
shards. docs/pretraining_data.md has the details; bert_tf/data/ the algorithm.

Input (--input_format): `lines` (google's: one sentence per line, a blank line between
documents), `paragraphs` (a blank line between documents, sentences found by punctuation),
`jsonl` (one JSON object per line, a document; its --jsonl_field text is split into
sentences).

This module is the command: its flags and `main`. The run (`pipeline.run`: checks, blocks
to workers, the shard writer, the summary a rerun resumes from) and the algorithm it runs
live in bert_tf/data/, one module per step; with --runner the blocks run on
Apache Beam instead (data/beam.py), giving the same shards.
"""

import argparse
import os

# This module runs in the main process, which must not import TensorFlow
# (text/python_tokenizer.py says why) nor even numpy: it only reads, dispatches and
# writes, and stays small.
from bert_tf.base.cli import ArgumentParser, boolean, run_main
from bert_tf.data import inputs
from bert_tf.data.errors import Stopped
from bert_tf.data.pipeline import run
from bert_tf.data.pool import WorkerError
from bert_tf.data.segmenters import SEGMENTERS
from bert_tf.data.shards import shard_paths
from bert_tf.data.summary import print_summary

PROG = "python -m bert_tf.create_pretraining_data"
# The flags' defaults are the settings' (google's): one place states them.
DEFAULTS = inputs.Settings(vocab_file=None)


def default_workers():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def parse_args(argv=None):
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    flag = lambda name, **kw: p.add_argument(f"--{name}", **kw)  # noqa: E731
    # google-research/bert's flags, same names and defaults.
    flag("input_file", default=None,
         help="input text: comma-separated globs (or --input_tfds)")
    flag("output_file", required=True,
         help="output TFRecord file, or comma-separated files (one shard each), or with "
              "--num_shards N a prefix: PREFIX-00000-of-0000N ...")
    flag("vocab_file", required=True, help="WordPiece vocabulary of the model")
    boolean(p, "--do_lower_case", default=DEFAULTS.do_lower_case,
            help="lower-case and strip accents (uncased models)")
    boolean(p, "--do_whole_word_mask", default=DEFAULTS.do_whole_word_mask,
            help="mask whole words (80/10/10 drawn once per word)")
    flag("max_seq_length", type=int, default=DEFAULTS.max_seq_length,
         help="tokens per example, padded")
    flag("max_predictions_per_seq", type=int, default=DEFAULTS.max_predictions_per_seq,
         help="most masked-LM predictions per example")
    flag("random_seed", type=int, default=DEFAULTS.random_seed,
         help="the output is a function of it")
    flag("dupe_factor", type=int, default=None,
         help=f"passes over the corpus, each with different masks (default: "
              f"{DEFAULTS.dupe_factor}; 1 with --masking=none)")
    flag("masked_lm_prob", type=float, default=DEFAULTS.masked_lm_prob,
         help="share of an example's tokens to predict")
    flag("short_seq_prob", type=float, default=DEFAULTS.short_seq_prob,
         help="probability of a shorter random target length (per document and pass)")
    # Ours.
    flag("num_shards", type=int, default=None,
         help="number of shards for a single --output_file prefix (unset: that one file, "
              "or one shard per comma-separated --output_file)")
    flag("num_workers", type=int, default=default_workers(),
         help="processes that share the work (this one and N-1 workers; default: all "
              "cores); the output does not depend on it")
    flag("max_ngram_size", type=int, default=DEFAULTS.max_ngram_size,
         help="mask spans of up to N words (or pieces), P(n) ~ 1/n; 1: no n-grams")
    flag("masking", default=DEFAULTS.masking, choices=("static", "none"),
         help="static: masked-LM predictions drawn here (google's); none: no masks, for "
              "run_pretraining --masking=dynamic, which draws new ones for every batch")
    flag("next_sentence", default=DEFAULTS.next_sentence, choices=("nsp", "sop", "none"),
         help="the second task's labels: nsp (google's: B is random half the time), sop "
              "(ALBERT's sentence order: B is the next text, swapped with A half the time) "
              "or none (RoBERTa's FULL-SENTENCES: one span of whole sentences, read on "
              "across a document's end; for run_pretraining --next_sentence=none)")
    flag("chinese_word_segmenter", default=None, choices=sorted(SEGMENTERS),
         help="Chinese whole-word masking (Chinese-BERT-wwm): cut Chinese text into words "
              "with this segmenter (pip install 'bert-tf[chinese]') and mask the "
              "characters of a word together; implies --do_whole_word_mask (with "
              "--masking=none the words are marked in the shards, for run_pretraining "
              "--masking=dynamic --do_whole_word_mask)")
    boolean(p, "--gzip", default=DEFAULTS.gzip,
            help="gzip the shards (read with compression_type='GZIP')")
    flag("input_format", default=DEFAULTS.input_format, choices=inputs.INPUT_FORMATS,
         help="lines: a sentence per line, blank line between documents (google's); "
              "paragraphs: blank line between documents, sentences found by punctuation; "
              "jsonl: a JSON object per line and document")
    flag("jsonl_field", default=DEFAULTS.jsonl_field, help="text field of --input_format jsonl")
    flag("input_tfds", default=None,
         help="instead of --input_file: a prepared tensorflow-datasets text dataset, "
              "NAME[/CONFIG][:VERSION] (wikipedia/20230601.en, c4/en), a document per "
              "example; nothing is downloaded")
    flag("tfds_data_dir", default=None,
         help="where the dataset is prepared (default: ~/tensorflow_datasets)")
    flag("tfds_split", default="train", help="the --input_tfds split to read")
    flag("tfds_text_field", default="text", help="the --input_tfds feature holding the text")
    flag("block_size_kb", type=int, default=512,
         help="text per block: the window random next sentences are drawn from and the "
              "unit of parallel work (changing it changes the output)")
    boolean(p, "--quiet", default=False, help="no progress bar")
    flag("runner", default=None,
         help="run on Apache Beam (pip install 'bert-tf[beam]') with this runner: "
              "DirectRunner, DataflowRunner, FlinkRunner, SparkRunner; Beam's own flags "
              "follow ours (docs/pretraining_data.md); same shards as without")
    args, beam_args = p.parse_known_args(argv)
    if (args.input_file is None) == (args.input_tfds is None):
        p.error("give exactly one of --input_file or --input_tfds")
    if beam_args and not args.runner:
        p.error(f"unrecognized arguments: {' '.join(beam_args)}")
    args.beam_args = [f"--runner={args.runner}"] + beam_args if args.runner else []
    if args.dupe_factor is None:
        args.dupe_factor = 1 if args.masking == "none" else DEFAULTS.dupe_factor
    return args


def main(argv=None):
    """Returns the run's summary; a bad input or a file or worker failure is one
    `error: ...` line and exit status 1 (bert_tf/base/cli.py)."""
    args = parse_args(argv)
    summary = run_main(run, args, errors=(OSError, WorkerError, Stopped), keras=False)
    print_summary(summary, shard_paths(args.output_file, args.num_shards)[1])
    return summary


if __name__ == "__main__":
    main()
