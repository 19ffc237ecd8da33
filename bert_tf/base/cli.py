"""What every command (`python -m bert_tf.X`, `tasks.X`, `export.X`) shares: boolean
flags, the precision names, and how a command ends.

Exit convention, the same for every command:

- `main(argv=None)` parses the flags and returns `run_main(run, args)`: what the
  command's `run(args)` returns (its results, for a caller in Python); the process exits
  with status 0.
- A bad input (ValueError, FileNotFoundError, and the project's own errors, which
  subclass them: InputError, DataError, CheckpointMismatchError; plus any error class the
  command names in `errors=`) prints exactly one line, `error: <message>`, on stderr and
  raises SystemExit(1), the way argparse raises SystemExit(2) for a bad flag. A command
  that calls another command's `main` lets that SystemExit through. Ctrl-C is one line
  too, and status 130.
- Commands that build Keras models run on TensorFlow (tf.data, tf.distribute, tf-text in
  the graph, SavedModel export): under another KERAS_BACKEND they stop with one line
  before any work (`keras=False` for the commands without a model).
- So a command module ends with `if __name__ == "__main__": main()` (never
  `sys.exit(main())`, which would treat a result as a status), and a test checks a bad
  input with `pytest.raises(SystemExit)` and `.code == 1`.
"""

import argparse
import contextlib
import math
import os
import re
import shutil
import sys

# check_not_inputs, check_output_place, check_seq_length: the commands import them from
# here; the library parts of a command (no argparse) from bert_tf/base/checks.py.
from bert_tf.base.checks import (check_not_inputs, check_output_place,  # noqa: F401
                                  check_seq_length)
from bert_tf.base.files import SYSTEM_ERRORS
from bert_tf.base.output_lock import OutputLock
from bert_tf.base.tf_logs import tf_error_text
from bert_tf.base.training_plumbing import is_chief

# --mixed_precision / --dtype name -> Keras dtype policy.
DTYPES = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}

# What run_main reports as a bad input (one line, exit status 1) for every command.
# OSError: a missing or unreadable path, a directory where a file was expected, a full
# disk or a read-only output folder, each reported as `path: reason`.
BAD_INPUT = (ValueError, OSError)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with the commands' one-line errors: a bad flag (unknown, missing,
    not a number, not one of the choices) prints `error: <what argparse says> (see
    --help)` alone, without the usage block, and exits with argparse's status 2."""

    def error(self, message):
        print(f"error: {' '.join(message.split())} (see --help)", file=sys.stderr, flush=True)
        raise SystemExit(2)


def str2bool(value):
    """absl-style booleans, as google-research/bert's flags accept them:
    --do_lower_case, --do_lower_case=true, --do_lower_case=False."""
    if isinstance(value, bool):
        return value
    if value.lower() in ("1", "true", "yes", "y"):
        return True
    if value.lower() in ("0", "false", "no", "n"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def boolean(parser, name, default=False, help=None):  # noqa: A002 (argparse's name)
    """Adds the boolean flag `name` ("--do_train") to `parser`, spelled any of the ways
    google's absl flags take: `--name` (true), `--name=true`, `--name true`,
    `--name=false` (also 1/0, yes/no, y/n, any case)."""
    return parser.add_argument(name, type=str2bool, nargs="?", const=True, default=default,
                               metavar="BOOL", help=help)


def check_flags(args, positive=(), non_negative=(), fractions=(), finite=()):
    """ValueError (one line, via run_main) for the first numeric flag out of its range:
    `positive` > 0, `non_negative` >= 0, `fractions` in [0, 1], `finite` any finite
    number; NaN and infinity are refused everywhere. Flags whose value is None (not
    given, no default) are skipped."""
    rules = ([(n, lambda v: v > 0, "a positive number") for n in positive] +
             [(n, lambda v: v >= 0, "a number >= 0") for n in non_negative] +
             [(n, lambda v: 0 <= v <= 1, "a number from 0 to 1") for n in fractions] +
             [(n, lambda v: True, "a finite number") for n in finite])
    for name, ok, expected in rules:
        value = getattr(args, name, None)   # a task's own flag, absent from the others
        if value is not None and not (math.isfinite(value) and ok(value)):
            raise ValueError(f"--{name} must be {expected}, got {value}")


def error_message(error):
    """The one line a bad input is reported as: an OSError the system raised as
    `path: reason`, anything else as its text, white space (newlines too) folded."""
    if isinstance(error, OSError) and error.filename and error.strerror:
        text = f"{error.filename}: {error.strerror}"
    else:
        text = str(error)
    return " ".join(text.split())


def check_keras_backend():
    """ValueError unless Keras runs (or will run) on TensorFlow: the backend of a Keras
    already imported, else the KERAS_BACKEND variable Keras will read."""
    keras = sys.modules.get("keras")
    backend = keras.backend.backend() if keras is not None else \
        os.environ.get("KERAS_BACKEND", "tensorflow")
    if backend != "tensorflow":
        raise ValueError(
            f"KERAS_BACKEND={backend}: the commands run on TensorFlow (tf.data, "
            f"tf.distribute, tf-text, SavedModel); set KERAS_BACKEND=tensorflow. On "
            f"{backend} the models train with Keras fit(): see docs/backends.md")


# The flags that name what a command writes: each is locked while the command runs.
OUTPUT_FLAGS = ("output_dir", "work_dir", "output", "output_file")


def run_main(run, args, errors=(), keras=True, positive=(), non_negative=(), fractions=(),
             lock=OUTPUT_FLAGS):
    """`run(args)`, returned as is; a bad input (BAD_INPUT, or one of `errors`) becomes the
    line `error: <message>` on stderr and SystemExit(1). See the module docstring.
    `keras`: the command builds Keras models, so Keras must run on TensorFlow.
    `positive`, `non_negative`, `fractions`: the command's numeric flags and their ranges,
    checked before any work (check_flags); NaN and infinity are refused in every float
    flag of every command.
    `lock`: the output flags whose paths this command owns while it runs
    (bert_tf/base/output_lock.py): a second command writing one of them stops with one line
    naming this one. Only the chief of a multi-worker cluster locks (the workers share
    the run's folder)."""
    new_dirs = _new_output_dirs(args)
    try:
        floats = tuple(name for name, value in vars(args).items()
                       if isinstance(value, float)) if args is not None else ()
        check_flags(args, positive, non_negative, fractions, finite=floats)
        if keras:
            check_keras_backend()
        with contextlib.ExitStack() as held:
            for flag, path in _locked_outputs(args, lock):
                held.enter_context(OutputLock(path, f"--{flag}"))
            return run(args)
    except BAD_INPUT + tuple(errors) as e:
        _remove_empty(new_dirs)
        print(f"error: {error_message(e)}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        # Ctrl-C: one line instead of a traceback; 130 = 128 + SIGINT, the shell's code.
        _remove_empty(new_dirs)
        print("error: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    except Exception as e:  # noqa: BLE001  (only the system's file errors; others re-raised)
        line = system_error_line(e)
        if line is None:
            raise
        _remove_empty(new_dirs)
        print(f"error: {line}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


# The file system's refusals, as libraries other than Python's own report them
# (TensorFlow's file writers, safetensors, h5py): the message names the file and one of
# these reasons.
SYSTEM_REASONS = tuple(SYSTEM_ERRORS.values())


def system_error_line(error):
    """One line for an error of the file system raised as another library's error class
    (a full disk under TensorFlow's SaveV2, for instance), else None."""
    text = tf_error_text(error)
    if not any(reason in text for reason in SYSTEM_REASONS):
        return None
    # TensorFlow's file errors: `PATH; REASON` and what it was doing -> `PATH: REASON`.
    reasons = "|".join(map(re.escape, SYSTEM_REASONS))
    said = re.match(rf"^(\S+); ({reasons})\b", text)
    if said:
        return f"{said.group(1)}: {said.group(2)}"
    return text


def _locked_outputs(args, flags):
    """(flag, path) of each of `flags` that `args` sets to a local path; none on a worker
    of a multi-worker cluster that is not its chief. A comma-separated --output_file
    (create_pretraining_data's shard list) is locked by each of its names, the names a
    reader of one of those shards locks (output_lock.shard_set)."""
    if args is None or not is_chief():
        return []
    found = []
    for flag in flags:
        path = getattr(args, flag, None)
        if isinstance(path, str) and path and "://" not in path:
            names = [p for p in path.split(",") if p] if flag == "output_file" else [path]
            found += [(flag, name) for name in names]
    return found


def _new_output_dirs(args):
    """The outermost folder each output flag (--output_dir, --work_dir, --output, and the
    folder of --output_file) would create: not there yet when the command starts."""
    found = []
    for name in ("output_dir", "work_dir", "output", "output_file"):
        path = getattr(args, name, None)
        if not isinstance(path, str) or not path or "://" in path:
            continue
        path = os.path.abspath(os.path.dirname(path) if name == "output_file" else path)
        if os.path.exists(path):
            continue
        while not os.path.exists(os.path.dirname(path)):
            path = os.path.dirname(path)
        found.append(path)
    return found


def _remove_empty(paths):
    """Removes each folder of `paths` that holds no file (only empty folders): what a
    failed command created and left empty."""
    for path in paths:
        if os.path.isdir(path) and not any(files for _, _, files in os.walk(path)):
            shutil.rmtree(path, ignore_errors=True)
