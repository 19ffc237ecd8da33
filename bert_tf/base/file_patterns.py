"""What an input flag's pattern (`--input_file='shards/train*'`) names: the one rule every
command that takes globs follows (create_pretraining_data, build_vocab, run_pretraining's
reader, the Keras-fit reader). TF-free, so create_pretraining_data's main process can use it.

- A path that exists as written is that file, even when it holds glob characters or
  commas: a file named `corpus [2020].txt` is read, not taken for a glob that matches
  nothing, and `scores,2020.csv` is not split into two names.
- Otherwise a pattern with glob characters (`*`, `?`, `[`) is a glob, and what it matches
  leaves out the project's own side files, written beside outputs and never inputs:
  create_pretraining_data's `PREFIX.summary.json` (which `--input_file='shards/train*'`
  matches after `--output_file=shards/train`, the README's recipe), files being written
  (`NAME.tmp` of files.atomic_write, a shard's `NAME.tmp` and `NAME.tmp-partN` pieces, a
  download's `.part`) and locks (`.lock`, output_lock.py).
- A side file named explicitly (no glob characters) is still what the user asked for, and
  the command checks it like any other input.

`expand_file_patterns` is the readers' whole rule for shards (run_pretraining's tf.data
reader and the Keras-fit reader): the files of comma-separated patterns, sorted, with a
pattern that matches nothing, a folder and an empty file refused.
"""

import fnmatch
import glob
import os
import re
import typing

# Names of the side files a glob leaves out (see the module docstring).
SIDE_FILE = re.compile(r"(\.summary\.json|\.tmp|\.tmp-part\d+|\.part|\.lock)$")
_MAGIC = re.compile(r"[*?[]")


class FileSystem(typing.NamedTuple):
    """The calls a pattern is expanded with: Python's for local paths (LOCAL), or
    tf.io.gfile's, which also reach paths with a scheme (gs://...)."""
    glob: typing.Callable
    exists: typing.Callable
    isdir: typing.Callable
    size: typing.Callable    # path -> bytes


LOCAL = FileSystem(glob.glob, os.path.exists, os.path.isdir, os.path.getsize)


def is_glob(pattern):
    """True when `pattern` holds a glob character (`*`, `?`, `[`)."""
    return _MAGIC.search(pattern) is not None


def is_side_file(path):
    """True for a name the project writes beside its outputs (never an input)."""
    return SIDE_FILE.search(os.path.basename(path.rstrip("/"))) is not None


def split_patterns(patterns, exists=os.path.exists):
    """Comma-separated patterns (or a list of them) -> list, each stripped of the spaces
    around it (`a.txt, b.txt`), empty items dropped: every command's one rule. A path
    that exists as written is one item, commas and all (`scores,2020.csv`, also in
    `scores,2020.csv,more.csv`), as a path with glob characters is one file (`match`):
    an item that is no path is joined with the items after it, up to the first join
    that is one. `exists`: tf.io.gfile's or Beam's for URLs."""
    if isinstance(patterns, str):
        parts, patterns, i = patterns.split(","), [], 0
        while i < len(parts):
            end = i + 1
            if not exists(parts[i].strip()):
                end = next((k for k in range(i + 2, len(parts) + 1)
                            if exists(",".join(parts[i:k]).strip())), end)
            patterns.append(",".join(parts[i:end]))
            i = end
    return [p.strip() for p in patterns if p.strip()]


def match(pattern, glob_fn=glob.glob, exists=os.path.exists, skip=()):
    """The files `pattern` names, sorted: [pattern] when it exists as written, else the
    glob's matches without side files and without those matching a glob of `skip` ([]
    when nothing is left). `skip`: what the command itself writes where its inputs may
    lie (run_pretraining's outputs in an --output_dir that also holds the shards).
    `glob_fn` and `exists`: tf.io.gfile's for paths with a scheme (gs://...)."""
    if exists(pattern):
        return [pattern]
    if not is_glob(pattern):
        return []
    skip = [os.path.normpath(s) for s in skip]
    return sorted(p for p in glob_fn(pattern) if not is_side_file(p) and not any(
        fnmatch.fnmatchcase(os.path.normpath(p), s) for s in skip))



def expand_file_patterns(patterns, skip=(), fs=LOCAL, allow_empty=False, flag="--input_file"):
    """Comma-separated globs (or a list of them) -> sorted file list; an error names a
    pattern that matches nothing. A path that exists as written is taken literally, and
    a glob skips the project's side files (`train.summary.json` beside `train-*` shards)
    and the paths matching a glob of `skip`: what the run itself writes in its output
    folder, so that `--input_file='DIR/train*' --output_dir=DIR` matches the same shards
    when the run resumes as when it started (not its `train/` summaries and
    `train_log.jsonl`). A folder is refused, and an empty file unless `allow_empty` (a
    reader that names an empty shard itself, when it reaches it). `fs`: the file system's
    calls (LOCAL, or tf.io.gfile's); `flag`: the flag the errors name."""
    files = []
    for pattern in split_patterns(patterns, fs.exists):
        matched = match(pattern, fs.glob, fs.exists, skip=skip)
        if not matched:
            raise FileNotFoundError(f"{flag}: no file matches {pattern!r}")
        files.extend(matched)
    files = sorted(set(files))
    for file in files:
        # A repeated stream of nothing would wait forever for its first batch.
        if fs.isdir(file):
            raise ValueError(f"{flag}: {file} is a directory (give a glob of its "
                             f"shards, e.g. {file.rstrip('/')}/*.tfrecord)")
        if not allow_empty and fs.size(file) == 0:
            raise ValueError(f"{flag}: {file} is empty (0 bytes, no records); "
                             f"remove it or write the shards again")
    return files
