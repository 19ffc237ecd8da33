"""Writing a file so that no reader ever finds half of it under its final name.

Every writer here writes `path + ".tmp"` first and renames it onto `path` (os.replace:
atomic on one file system) only when the whole file is written; on an error the temporary
file is removed and `path` keeps what it held before. A path with a scheme (gs://...)
goes through tf.io.gfile (its rename is a copy there, as tf.io.gfile's always is).
"""

import contextlib
import json
import os
import shutil

TMP_SUFFIX = ".tmp"


def _remote(path):
    return "://" in path


@contextlib.contextmanager
def atomic_write(path, mode="w", encoding="utf-8"):
    """`with atomic_write(path) as f: f.write(...)`: `f` is open on `path + ".tmp"`,
    which becomes `path` when the block ends without an error and is removed otherwise.
    `mode` "w" (text, `encoding`) or "wb" (bytes)."""
    path = os.fspath(path)
    tmp = path + TMP_SUFFIX
    if _remote(path):
        import tensorflow as tf
        f = tf.io.gfile.GFile(tmp, mode)
        remove, rename = tf.io.gfile.remove, lambda: tf.io.gfile.rename(tmp, path, True)
    else:
        f = open(tmp, mode, encoding=None if "b" in mode else encoding)
        remove, rename = os.remove, lambda: os.replace(tmp, path)
    try:
        with f:
            yield f
        rename()
    except BaseException:
        with contextlib.suppress(Exception):
            remove(tmp)
        raise


def atomic_copy(src, dst):
    """Copies the file `src` to `dst` by way of `dst + ".tmp"`."""
    with open(src, "rb") as source, atomic_write(dst, "wb") as target:
        shutil.copyfileobj(source, target, 1 << 20)


def write_json(path, value, indent=2, sort_keys=True, ensure_ascii=False):
    """`value` as JSON (json.dump's options) and a final newline, atomically."""
    with atomic_write(path) as f:
        json.dump(value, f, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii)
        f.write("\n")


def write_results(path, metrics):
    """google's eval_results.txt: `key = value` lines, sorted by key, atomically."""
    with atomic_write(path) as f:
        for key in sorted(metrics):
            f.write(f"{key} = {metrics[key]}\n")
