"""Writing a file so that no reader ever finds half of it under its final name.

Every writer here writes `path + ".tmp"` first and renames it onto `path` (os.replace:
atomic on one file system) only when the whole file is written; on an error the temporary
file is removed and `path` keeps what it held before. A path with a scheme (gs://...)
goes through tf.io.gfile (its rename is a copy there, as tf.io.gfile's always is).
"""

import contextlib
import errno
import hashlib
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
    if not _remote(path) and os.path.isdir(path):
        raise IsADirectoryError(21, "Is a directory (expected a file name to write)", path)
    if _remote(path):
        import tensorflow as tf
        f = tf.io.gfile.GFile(tmp, mode)
        remove, rename = tf.io.gfile.remove, lambda: tf.io.gfile.rename(tmp, path, True)
    else:
        try:
            f = open(tmp, mode, encoding=None if "b" in mode else encoding)
        except OSError as e:    # read-only, missing folder: said of the name the user gave
            raise OSError(e.errno, e.strerror, path) from None
        remove, rename = os.remove, lambda: os.replace(tmp, path)
    try:
        with f:
            yield f
        rename()
    except BaseException as e:
        with contextlib.suppress(Exception):
            remove(tmp)
        if isinstance(e, OSError) and not e.filename and e.errno:
            # A write or close that failed (a full disk) names no file: name `path`.
            raise OSError(e.errno, os.strerror(e.errno), path) from None
        raise


def close_hdf5_files(path):
    """Closes every HDF5 file this process still has open at `path` or inside the folder
    `path`, with every object open in it; True if there was one.

    A write that fails in HDF5 (a full disk, an I/O error) leaves the file open: h5py and
    Keras drop their handles without closing it, and HDF5 frees the file's state when
    the last handle's close fails, while the group handles still point at it. The
    library then crashes (a segmentation fault) closing those groups at the process's
    exit, and the descriptor it keeps holds the space of the removed temporary file. A
    writer of HDF5 files calls this on its error path, before removing what it wrote;
    closing groups and datasets first, as h5py's File.close does, leaves nothing
    dangling. A close that fails again (the data cannot be flushed) is what the caller is
    already reporting."""
    import sys
    if "h5py" not in sys.modules:       # nothing was ever opened
        return False
    import h5py
    path = os.path.abspath(path)
    found = False
    for file_id in h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE):
        name = os.path.abspath(os.fsdecode(file_id.name))
        if name != path and not name.startswith(path.rstrip(os.sep) + os.sep):
            continue
        found = True
        with contextlib.suppress(Exception):
            h5py.File(file_id).close()
    return found


# The file system's refusals by errno, as every library words them (strerror): a full
# disk, a quota, a read-only or unwritable folder, a failing device.
SYSTEM_ERRORS = {errno.ENOSPC: "No space left on device", errno.EDQUOT: "Disk quota exceeded",
                 errno.EROFS: "Read-only file system", errno.EACCES: "Permission denied",
                 errno.EIO: "Input/output error"}


def system_error(error, path):
    """OSError(errno, reason, `path`) when `error` is the file system refusing a write
    (SYSTEM_ERRORS): Python's OSError, or another library's error whose text gives the
    system's reason (TensorFlow's file writers, h5py, safetensors), which name a
    temporary file or none; else None. A writer that writes under temporary names
    reports its failure with the name the user gave."""
    if isinstance(error, OSError) and error.errno in SYSTEM_ERRORS:
        return OSError(error.errno, SYSTEM_ERRORS[error.errno], os.fspath(path))
    if not isinstance(error, Exception):
        return None
    text = str(error)
    for number, reason in SYSTEM_ERRORS.items():
        if reason in text:
            return OSError(number, reason, os.fspath(path))
    return None


def replace_path(new, path):
    """Puts the file or folder `new` at `path` (same file system), replacing what is
    there in one step for its readers: a folder is swapped with the old one atomically
    (Linux's renameat2 RENAME_EXCHANGE), then the old one, now under `new`'s name, is
    removed; a reader opening `path` finds the old or the new, never nothing. Where the
    swap is not available, the old one is renamed aside first (for a moment `path` is
    missing)."""
    if not os.path.lexists(path):
        os.replace(new, path)
        return
    if os.path.isdir(new) == os.path.isdir(path) and not os.path.isdir(path):
        os.replace(new, path)        # a file onto a file: rename is atomic
        return
    if not _exchange(new, path):
        aside = f"{new}.old"
        os.rename(path, aside)
        os.rename(new, path)
        new = aside
    if os.path.isdir(new) and not os.path.islink(new):
        shutil.rmtree(new)
    else:
        os.remove(new)


def _exchange(a, b):
    """Swaps the paths `a` and `b` atomically (renameat2 with RENAME_EXCHANGE); False
    where the system or the file system cannot."""
    import ctypes
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (22, 38, 95):    # EINVAL, ENOSYS, EOPNOTSUPP: not here
        return False
    raise OSError(errno, os.strerror(errno), b)


def atomic_copy(src, dst):
    """Copies the file `src` to `dst` by way of `dst + ".tmp"`."""
    with open(src, "rb") as source, atomic_write(dst, "wb") as target:
        shutil.copyfileobj(source, target, 1 << 20)


def usual_mode(path):
    """Gives the file `path` the mode a plain open() would have (0666 less the umask):
    writers that go through a private temporary file (safetensors' is 0600) would
    otherwise leave a file that a serving account cannot read."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def file_sha256(path, open_file=None):
    """The hex SHA-256 of a file's bytes, read in 1 MiB chunks. `open_file`: how to open
    it for reading in binary (default: `open(path, "rb")`)."""
    digest = hashlib.sha256()
    with (open_file(path) if open_file else open(path, "rb")) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# Side files a folder's fingerprint leaves out: locks, and what writers keep under
# temporary names until they are complete.
_SIDE_FILE = (".lock", ".tmp", ".part")


def fingerprint(path, sample=None):
    """What the file or folder `path` is, by content: {"bytes", "sha256"}. A file's sha256
    is of all its bytes, or with `sample` (a byte count) of its size and its first and
    last `sample` bytes: cheap for shards of gigabytes, and still different for files
    written anew (other masks, other seed). A folder's is of its files' relative names
    and fingerprints, side files (locks, temporary names) left out: a checkpoint folder
    is the same folder wherever it is copied."""
    if os.path.isdir(path):
        digest, total = hashlib.sha256(), 0
        for folder, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                if name.startswith(".") and name.endswith(_SIDE_FILE) or \
                        TMP_SUFFIX in name:
                    continue
                file = os.path.join(folder, name)
                item = fingerprint(file, sample)
                total += item["bytes"]
                digest.update(f"{os.path.relpath(file, path)}\0{item['sha256']}\0"
                              .encode("utf-8", "surrogateescape"))
        return {"bytes": total, "sha256": digest.hexdigest()}
    size = os.path.getsize(path)
    if sample is None or size <= 2 * sample:
        return {"bytes": size, "sha256": file_sha256(path)}
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(sample))
        f.seek(size - sample)
        digest.update(f.read(sample))
    return {"bytes": size, "sha256": digest.hexdigest()}



def data_fingerprints(files):
    """{real path: {"flag", "bytes", "sha256"}} of the local files and folders `files`
    ((flag, path) pairs: a run's training files and vocabulary, a search's inputs) name;
    paths that do not exist and URLs are left out."""
    from bert_tf.base.checks import real_path
    return {real_path(path): dict(flag=flag, **fingerprint(path)) for flag, path in files
            if path and "://" not in path and os.path.exists(path)}


def changed_data(theirs, ours):
    """The first file recorded in both `theirs` and `ours` (data_fingerprints) whose
    content differs, as a phrase, or None. A file only one side reads (a --do_eval added
    on resuming) is no change."""
    for path in sorted(set(theirs) & set(ours)):
        a, b = theirs[path], ours[path]
        if (a.get("bytes"), a.get("sha256")) != (b.get("bytes"), b.get("sha256")):
            return (f"{b.get('flag')} {path} has changed since it was saved ({a.get('bytes'):,} "
                    f"bytes, sha256 {str(a.get('sha256'))[:12]} there; {b.get('bytes'):,} "
                    f"bytes, {str(b.get('sha256'))[:12]} now)")
    return None

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


def read_results(path):
    """An eval_results.txt (write_results) -> {key: value}, numbers as floats."""
    results = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, sep, value = line.rstrip("\n").partition(" = ")
            if sep:
                try:
                    results[key] = float(value)
                except ValueError:
                    results[key] = value
    return results


# ------------------------------------------------------------------------- reading text

def _not_text(path, number, line, error=None):
    """The ValueError for line `number` (bytes `line`) of `path`: its first byte that is
    not UTF-8 (`error`, a UnicodeDecodeError) or its first NUL byte."""
    if error is not None:
        return ValueError(f"{path}:{number}: not UTF-8 (byte {error.start + 1} of the line: "
                          f"{error.reason}; expected UTF-8 text)")
    byte = line.index(b"\0") + 1
    return ValueError(f"{path}:{number}: NUL byte (byte {byte} of the line; UTF-16 or a "
                      f"binary file? expected UTF-8 text)")


def check_no_nul(raw, path, number):
    """ValueError naming the file, line and byte when the bytes `raw` (line `number` of
    `path` and the lines after it) hold a NUL byte: the project's one rule for text, which
    a UTF-16 or binary file breaks (extract_features, create_pretraining_data, the
    fine-tuning readers and batch_predict refuse such a file)."""
    nul = raw.find(b"\0")
    if nul >= 0:
        start = raw.rfind(b"\n", 0, nul) + 1
        raise _not_text(path, number + raw.count(b"\n", 0, nul), raw[start:nul + 1])


def text_line(raw, path, number):
    """Line `number` of the text file `path` as read (bytes) -> str, the line end and
    (on line 1) a UTF-8 BOM removed; ValueError naming the file, line and byte when the
    line is not UTF-8 or holds a NUL byte (a UTF-16 file is full of them)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _not_text(path, number, raw, e) from None
    check_no_nul(raw, path, number)
    if number == 1:
        line = line.removeprefix("\ufeff")
    return line.rstrip("\n").rstrip("\r")


def read_text(path):
    """The whole text of `path` (UTF-8, a BOM dropped, CRLF kept as it is); ValueError
    naming the line and byte of the first byte that is not UTF-8 or is NUL (a text-mode
    file decodes ahead in 8 kB chunks, so its errors cannot say where); OSError (reported
    as `path: reason`) for a missing path or a directory."""
    with open(path, "rb") as f:
        return decode_text(f.read(), path)


def decode_text(data, path):
    """read_text for bytes already read from `path`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        number = data.count(b"\n", 0, e.start) + 1
        start = data.rfind(b"\n", 0, e.start) + 1
        e.start -= start
        raise _not_text(path, number, data[start:], e) from None
    check_no_nul(data, path, 1)
    return text.removeprefix("\ufeff")


def cache_dir():
    """The project's cache folder (released checkpoints, the tokenizer's tables):
    $BERT_TF_CACHE, else $XDG_CACHE_HOME/bert_tf, else ~/.cache/bert_tf."""
    if os.environ.get("BERT_TF_CACHE"):
        return os.path.abspath(os.path.expanduser(os.environ["BERT_TF_CACHE"]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.abspath(os.path.join(base, "bert_tf"))
