"""Converts BERT checkpoints between google TF1, HF and Keras formats.

    python -m bert_tf.convert_checkpoint --input uncased_L-12_H-768_A-12 \\
        --output bert-base-hf --output_format hf

The input format is detected unless --input_format says it. A checkpoint with pretraining
heads (cls/...) is converted with them; an encoder-only one stays encoder-only. Every
tensor is shape-checked on the way (see bert_tf/checkpoints/formats/core.py); the output
is written under a temporary name beside --output and renamed when complete. The format
choices are the registered formats' names (bert_tf/checkpoints/formats/), in their order.
"""

import glob
import os

from bert_tf.checkpoints import registry
from bert_tf.base.cli import (ArgumentParser, boolean, check_not_inputs, check_output_place,
                              run_main)


def parse_args(argv=None):
    from bert_tf.checkpoints.dispatch import format_names, writable_format_names
    parser = ArgumentParser(
        prog="python -m bert_tf.convert_checkpoint",
        description=__doc__.split("\n\n")[0] + " Formats: google = bert_model.ckpt + "
        "bert_config.json (google-research/bert); hf = model.safetensors + config.json "
        "(transformers BertModel / BertForPreTraining); keras = our .keras model; keras_hub = a "
        "keras-hub preset directory (BertBackbone, or BertMaskedLM with the masked-LM head; "
        "keras-hub has no next-sentence head).")
    parser.add_argument("--input", required=True,
                        help="checkpoint to read: a TF1 prefix (.../bert_model.ckpt) or its "
                             "directory, an HF directory, a .keras file or a keras-hub "
                             "preset directory; or a released checkpoint's name "
                             "(uncased_L-12_H-768_A-12, bert-base-uncased, ...: see "
                             "bert_tf/checkpoints/registry.py), downloaded once into "
                             "$BERT_TF_CACHE")
    parser.add_argument("--output", required=True,
                        help="directory to write (for keras, a path ending in .keras writes "
                             "just that file)")
    parser.add_argument("--output_format", required=True, choices=writable_format_names())
    parser.add_argument("--input_format", default="auto", choices=("auto",) + format_names(),
                        help="default: detected from --input")
    parser.add_argument("--bert_config_file", default=None,
                        help="config JSON (google's bert_config.json or HF config.json); "
                             "default: the one beside --input")
    parser.add_argument("--vocab_file", default=None,
                        help="vocab.txt to copy beside the output; default: the one beside "
                             "--input, if any")
    boolean(parser, "--overwrite", help="replace --output if it exists and is not empty")
    return parser.parse_args(argv)


def convert(input_path, output, output_format, input_format="auto", bert_config_file=None,
            vocab_file=None, overwrite=False, log=print):
    """Reads `input_path`, checks it against a freshly built model, writes `output`."""
    # Cheap checks first: a typo should cost one line, not a TensorFlow start-up (or a
    # download: a released checkpoint's name is resolved after them).
    if not os.path.exists(input_path) and not glob.glob(glob.escape(input_path) + ".*") \
            and registry.lookup(input_path) is None:
        registry.resolve_checkpoint(input_path)  # a mistyped name: lists the known names
        raise FileNotFoundError(f"{input_path}: no such file, directory or checkpoint prefix")
    for flag, path in (("--bert_config_file", bert_config_file), ("--vocab_file", vocab_file)):
        if path and not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: {flag} not found")
    output = os.path.abspath(output)
    if os.path.exists(output) and not overwrite and not (
            os.path.isdir(output) and not os.listdir(output)):
        raise FileExistsError(f"{output}: already exists (pass --overwrite to replace it)")
    input_path = registry.resolve_checkpoint(input_path, log=log)
    # --overwrite replaces the whole --output folder: never the one being read.
    check_not_inputs([("output", output)], [("--bert_config_file", bert_config_file),
                                            ("--vocab_file", vocab_file)],
                     checkpoints=[("--input", input_path)])
    check_output_place("output", output, folder=None)    # --overwrite may replace a file

    from bert_tf.checkpoints import dispatch as checkpoints
    from bert_tf.models.encoder import BertEncoder
    from bert_tf.models.pretrainer import BertPretrainer

    log(f"reading {input_path}")
    checkpoint = checkpoints.read_checkpoint(input_path, input_format, bert_config_file)
    c = checkpoint.config
    log(f"  {checkpoint.format} checkpoint, {len(checkpoint.tensors)} tensors "
        f"({len(checkpoint.ignored)} training-state tensors skipped); L={c.num_hidden_layers} "
        f"H={c.hidden_size} A={c.num_attention_heads} vocab={c.vocab_size} "
        f"hidden_act={c.hidden_act}; heads: {'yes' if checkpoint.has_heads else 'no'}")
    if checkpoint.has_heads:
        # A masked-LM head without a next-sentence one (keras-hub's, a --next_sentence=none
        # run's, Model Garden's and TF Hub's pretrainers) stays without one: no head is
        # written that was never trained.
        model = BertPretrainer.from_config_object(
            c, next_sentence=checkpoints.has_next_sentence_head(checkpoint))
    else:
        model = BertEncoder.from_config_object(c)
    report = checkpoints.restore(model, checkpoint)
    log(f"  {report}")
    vocab_file = vocab_file or checkpoint.vocab_file
    if vocab_file:
        from bert_tf.text.tokenization import check_vocab_fits
        check_vocab_fits(vocab_file, c.vocab_size)
    log(f"writing {output_format} checkpoint to {output}"
        + (f" (vocab from {vocab_file})" if vocab_file else " (no vocab.txt)"))
    checkpoints.save_checkpoint(model, output, output_format, vocab_file=vocab_file,
                                overwrite=overwrite)
    log(f"done: {output}")
    return output


def run(args):
    """convert() with the flags, its lines on stdout; returns the output path."""
    return convert(args.input, args.output, args.output_format, args.input_format,
                   args.bert_config_file, args.vocab_file, args.overwrite,
                   log=lambda line: print(line, flush=True))


def main(argv=None):
    """Returns the output path; a bad input, a file error (an existing --output
    included) or a missing package is one `error: ...` line and exit status 1
    (bert_tf/base/cli.py; a mismatch error lists every difference on that line)."""
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TF's startup chatter out
    return run_main(run, args, errors=(OSError, ImportError))


if __name__ == "__main__":
    main()
