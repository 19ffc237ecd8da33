"""Input checks that a command and the library parts it runs share (TF-free, no argparse,
so library modules can run them): no output written over an input (`check_not_inputs`),
a sequence length with room for the texts (`check_seq_length`). bert_tf/cli.py offers
them to the commands.
"""

import os


# What one packed sequence must hold beside the texts' tokens, by the number of texts:
# [CLS] A [SEP] (one text), [CLS] A [SEP] B [SEP] (a pair).
SEQUENCE_LAYOUTS = {1: "[CLS] A [SEP]", 2: "[CLS] A [SEP] B [SEP]"}


def check_seq_length(value, texts=1, flag="--max_seq_length"):
    """ValueError naming the command's flag when `value` leaves no room for one token of
    each of `texts` texts beside [CLS] and their [SEP]s (3 for one text, 5 for a pair):
    shorter, every example would hold special tokens alone. Commands call it before any
    work, so the line names what the user typed, not BertPacker's `seq_length`."""
    least = 1 + 2 * texts
    if value is not None and value < least:
        raise ValueError(f"{flag} must be >= {least} ({SEQUENCE_LAYOUTS[texts]} with one "
                         f"token of each text), got {value}")


def check_not_inputs(outputs, inputs):
    """ValueError when a path a command is about to write is one of its inputs (the same
    file, through a link or another spelling too) or a folder it replaces that holds one:
    writing it would destroy what the command reads. `outputs`, `inputs`: (flag, path)
    pairs; an output path that does not exist yet is no input. A URL (gs://...) is the same
    as an input when it is spelled the same."""
    def same(a, b):
        try:
            return os.path.samefile(a, b)
        except OSError:
            return False
    for out_flag, out in outputs:
        if out and "://" in out:
            for in_flag, path in inputs:
                if path == out:
                    raise ValueError(f"--{out_flag}={out} is the input {in_flag}={path}: "
                                     f"writing it would destroy the input; choose another "
                                     f"--{out_flag}")
            continue
        if not out or not os.path.exists(out):
            continue
        for in_flag, path in inputs:
            if not path or "://" in path:
                continue
            inside = os.path.isdir(out) and os.path.realpath(path).startswith(
                os.path.realpath(out) + os.sep)
            if same(out, path) or inside:
                what = "holds" if inside else "is"
                raise ValueError(
                    f"--{out_flag}={out} {what} the input {in_flag}={path}: writing it "
                    f"would destroy the input; choose another --{out_flag}")
