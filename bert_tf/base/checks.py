"""Input checks that a command and the library parts it runs share (TF-free, no argparse,
so library modules can run them): no output written over an input (`check_not_inputs`),
an output that can be written where it is named (`check_output_place`), a sequence
length with room for the texts (`check_seq_length`). bert_tf/base/cli.py offers them to
the commands.
"""

import glob
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


def real_path(path):
    """`path` with every symlink and `..` resolved (also where it does not exist yet):
    what a file is, whatever the spelling."""
    return os.path.realpath(os.path.abspath(path))


def _is_url(path):
    return "://" in path


def checkpoint_place(path):
    """What a checkpoint input occupies on disk: its folder (a directory, or the folder
    of a TensorFlow checkpoint prefix or file, beside which its config and vocabulary
    lie), the file itself (a .keras file), or None (not on a local disk: a URL, a
    released checkpoint's name, a missing path)."""
    if not path or _is_url(path):
        return None
    if os.path.isdir(path):
        return path
    if os.path.isfile(path) and path.endswith(".keras"):
        return path
    if os.path.isfile(path) or glob.glob(glob.escape(path) + ".*"):
        return os.path.dirname(path) or "."
    return None


def check_output_place(flag, path, folder=False):
    """An error, before any work, when the output `path` of `--flag` cannot be written
    as a file (or, with `folder`, as a folder) where it is named: a folder where a file
    is to be written, a file where a folder is, or a file where a folder above it must
    be (`folder` None: only that). (Found only at the end, the run's work would be
    lost.) URLs are left to their file system."""
    if not path or _is_url(path):
        return
    path = os.fspath(path)
    if folder and os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"--{flag}={path} is a file, not a folder")
    if folder is False and os.path.isdir(path):
        raise IsADirectoryError(21, "Is a directory (expected a file name to write)", path)
    above = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(above) and above != os.path.dirname(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise ValueError(f"--{flag}={path}: {above} is a file, not a folder")


def _inside(path, folder):
    """Whether the real path `path` lies inside the real path `folder`."""
    return path.startswith(folder.rstrip(os.sep) + os.sep)


def check_not_inputs(outputs, inputs, checkpoints=(), writes=None):
    """ValueError when a path a command is about to write would destroy or change one of
    its inputs. `outputs`, `inputs`, `checkpoints`: (flag, path) pairs; paths are compared
    by what they are (real paths, symlinks and other spellings resolved; the same file
    through a hard link too). An input that does not exist is no input; a URL
    (gs://...) is the same as an input when it is spelled the same.

    Refused: an output that is an input; an output that is, holds or lies inside a
    checkpoint of `checkpoints` (a checkpoint folder and every file in it, a TF
    checkpoint prefix's folder, a .keras file: checkpoint_place); and, for the other
    inputs, an output folder that holds one: with `writes` None the output is written
    whole (a file, or a folder replaced whole), so any input inside it; with `writes`
    (the names a run writes into its folder, globs allowed), an input that is one of
    those names or lies inside one."""
    def same(a, b):
        try:
            return os.path.samefile(a, b)
        except OSError:
            return False

    def refuse(out_flag, out, relation, in_flag, path, effect="destroy"):
        raise ValueError(f"--{out_flag}={out} {relation} the input {in_flag}={path}: "
                         f"writing it would {effect} the input; choose another --{out_flag}")

    places = [(flag, path, checkpoint_place(path)) for flag, path in checkpoints]
    for out_flag, out in outputs:
        if not out:
            continue
        if _is_url(out):
            for in_flag, path in list(inputs) + list(checkpoints):
                if path == out:
                    refuse(out_flag, out, "is", in_flag, path)
            continue
        out_real = real_path(out)
        for in_flag, path, place in places:
            if place is None:
                continue
            place_real = real_path(place)
            if out_real == place_real or same(out, place):
                refuse(out_flag, out, "is", in_flag, path)
            if _inside(out_real, place_real):
                refuse(out_flag, out, "lies inside", in_flag, path, "change")
            if _inside(place_real, out_real):
                refuse(out_flag, out, "holds", in_flag, path)
        for in_flag, path in inputs:
            if not path or _is_url(path) or not os.path.exists(path):
                continue
            path_real = real_path(path)
            if out_real == path_real or same(out, path):
                refuse(out_flag, out, "is", in_flag, path)
            if writes is None:
                if os.path.isdir(out) and _inside(path_real, out_real):
                    refuse(out_flag, out, "holds", in_flag, path)
                continue
            for name in writes:
                for written in glob.glob(os.path.join(glob.escape(out), name)):
                    written_real = real_path(written)
                    if written_real == path_real or same(written, path) or \
                            _inside(path_real, written_real):
                        raise ValueError(
                            f"--{out_flag}={out} holds the input {in_flag}={path}: the "
                            f"command writes {written} there, which would destroy the "
                            f"input; choose another --{out_flag}")
