"""Learn a WordPiece vocabulary from raw text, normalised exactly as the tokenizer does.

    python -m bert_tf.build_vocab --input_file corpus.txt --output_file vocab.txt \\
        --vocab_size 8000 --do_lower_case

The flags of `bert_tf.text.wordpiece_learner.build_vocab`, which does the work (how pieces are
learned, and what the file holds, is told there).
"""

import sys

from bert_tf.base.cli import (ArgumentParser, boolean, check_not_inputs, check_output_place,
                              run_main)


def run(args):
    """Learns and writes the vocabulary of the flags; returns it (a list of tokens). The
    inputs and the output are checked before TensorFlow is imported (local paths are
    reached without it: wordpiece_learner.file_system)."""
    from bert_tf.text.wordpiece_learner import build_vocab, expand_files, file_system
    files = expand_files(args.input_file)
    check_not_inputs([("output_file", args.output_file)],
                     [("--input_file", path) for path in files])
    check_output_place("output_file", args.output_file)
    if all(file_system(f).size(f) == 0 for f in files):
        raise ValueError(f"{args.input_file}: empty (no text to learn from)")
    vocab = build_vocab(files, args.vocab_size, args.do_lower_case, args.output_file,
                        max_unique_chars=args.max_unique_chars,
                        min_frequency=args.min_frequency,
                        character_coverage=args.character_coverage,
                        log=lambda line: print(line, file=sys.stderr))
    print(f"wrote {len(vocab)} tokens to {args.output_file}", file=sys.stderr)
    return vocab


def main(argv=None):
    parser = ArgumentParser(
        prog="python -m bert_tf.build_vocab",
        description="Learn a WordPiece vocabulary (vocab.txt) from raw text, with the same "
                    "normalisation as bert_tf.text.tokenization.BertTokenizer. The file starts "
                    "with [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0, 1, 2, 3, 4 in that order "
                    "([PAD] at 0 as in bert-base's vocab), then every character of the "
                    "corpus with and without '##', then the learned pieces.")
    parser.add_argument("--input_file", required=True,
                        help="input text file, or comma-separated files/globs (any text; the "
                             "pretraining format of one sentence per line is fine)")
    parser.add_argument("--output_file", required=True, help="vocab.txt to write")
    parser.add_argument("--vocab_size", type=int, default=30522,
                        help="maximum size including the 5 reserved tokens (default 30522, "
                             "bert-base's); smaller corpora stop earlier")
    boolean(parser, "--do_lower_case", default=True,
            help="lower-case, NFD and strip accents like uncased BERT (default "
                 "true; --do_lower_case=false for a cased vocabulary)")
    parser.add_argument("--character_coverage", type=float, default=1.0,
                        help="keep the most frequent characters that cover this share of "
                             "the corpus's character occurrences (default 1.0: every "
                             "character, as long as they leave half of --vocab_size to "
                             "pieces; SentencePiece's 0.9995 drops the rarest of a CJK "
                             "corpus); the command prints the [UNK] share it leaves")
    parser.add_argument("--max_unique_chars", type=int, default=None,
                        help="keep at most this many characters (default: no limit but "
                             "the above)")
    parser.add_argument("--min_frequency", type=int, default=2,
                        help="stop when the most frequent pair occurs fewer times (default 2)")
    return run_main(run, parser.parse_args(argv), keras=False,
                    positive=("vocab_size", "max_unique_chars", "character_coverage"),
                    non_negative=("min_frequency",), fractions=("character_coverage",))


if __name__ == "__main__":
    main()
