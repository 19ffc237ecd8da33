"""Where create_pretraining_data reads and writes: local paths through Python's os, and
URLs (`gs://bucket/corpus/*.txt`, `s3://...`, `hdfs://...`) through Apache Beam's file
systems, which the Beam engine's workers share (`--runner=DataflowRunner` reads its input
from Cloud Storage and writes the shards there). The local engine takes local paths
only: `check_local` refuses a URL in one line.

Every call here is the os one for a local path, so the local engine's files are written
as before (shards.py and files.py keep their atomic, fsync'd writes). For a URL: no
folders to make (object stores have none), and a rename is the file system's (copy and
delete on Cloud Storage: the final name appears only once the copy is whole).
No TensorFlow and no numpy here (the main process stays small; inputs.py says why).
"""

import atexit
import errno
import os
import re
import shutil
import tempfile

from bert_tf.base.files import file_sha256
from bert_tf.data.errors import InputError

def is_url(path):
    """A path with a scheme (the project's rule for remote paths: bert_tf/base/files.py,
    bert_tf/base/cli.py)."""
    return bool(path) and "://" in path


def check_local(flags):
    """InputError naming the first (flag, path) whose path is a URL: only the Beam
    engine reaches URLs."""
    for flag, path in flags:
        if is_url(path):
            raise InputError(f"{flag}: {path} is a URL: only the Beam engine (--runner=..., "
                             f"Apache Beam's file systems) reads and writes URLs; give a "
                             f"local path")


def _beam_io():
    """(Beam's FileSystems, its UNCOMPRESSED type); InputError when Beam is missing."""
    try:
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems
    except ImportError:
        raise InputError("paths with a scheme (gs://...) need Apache Beam, which is not "
                         "installed: pip install 'bert-tf[beam]'") from None
    return FileSystems, CompressionTypes.UNCOMPRESSED


def _beam_fs():
    return _beam_io()[0]


def file_system(path):
    """The Beam FileSystem that serves the URL `path` (ValueError when none does)."""
    return _beam_fs().get_filesystem(path)


def check_url(flag, path):
    """InputError (one line) when no Beam file system serves `path`'s scheme."""
    try:
        file_system(path)
    except ValueError:
        scheme = path.split("://", 1)[0]
        extra = " (pip install 'apache-beam[gcp]')" if scheme == "gs" else ""
        raise InputError(f"{flag}: {path}: Apache Beam has no file system for "
                         f"{scheme}://{extra}") from None


def _uncompressed():
    return _beam_io()[1]


def open_read(path):
    """A binary file object for reading (seekable)."""
    if not is_url(path):
        return open(path, "rb")
    return _beam_fs().open(path, compression_type=_uncompressed())


def open_write(path):
    """A binary file object that creates or replaces `path` (for a URL: whole on close)."""
    if not is_url(path):
        return open(path, "wb")
    return _beam_fs().create(path, compression_type=_uncompressed())


def exists(path):
    return _beam_fs().exists(path) if is_url(path) else os.path.exists(path)


def isfile(path):
    # An object store has no folders: a URL that exists is a file.
    return _beam_fs().exists(path) if is_url(path) else os.path.isfile(path)


def _metadata(path):
    return _beam_fs().match([path])[0].metadata_list[0]


def getsize(path):
    return _metadata(path).size_in_bytes if is_url(path) else os.path.getsize(path)


def mtime_ns(path):
    if not is_url(path):
        return os.stat(path).st_mtime_ns
    return int(round(_metadata(path).last_updated_in_seconds * 1e9))


def remove(path):
    """Removes `path` when it is there."""
    if not is_url(path):
        if os.path.exists(path):
            os.remove(path)
    elif _beam_fs().exists(path):
        _beam_fs().delete([path])


def replace(src, dst):
    """Renames src to dst, replacing dst."""
    if not is_url(src):
        os.replace(src, dst)
        return
    remove(dst)
    _beam_fs().rename([src], [dst])


def glob(pattern):
    """The paths a glob matches (unsorted)."""
    if not is_url(pattern):
        import glob as glob_lib
        return glob_lib.glob(pattern)
    result = _beam_fs().match([pattern])[0]
    return [m.path for m in result.metadata_list]


def remove_temporaries(path):
    """Removes `path`'s temporary pieces (PATH.tmp, PATH.tmp-partN, PATH.tmp-entry.json)."""
    if not is_url(path):
        import glob as glob_lib
        for tmp in glob_lib.glob(glob_lib.escape(path) + ".tmp*"):
            try:
                os.remove(tmp)
            except OSError:
                pass
        return
    # Beam's match takes globs: the name's own glob characters escaped.
    escaped = re.sub(r"([*?\[])", r"[\1]", path)
    for tmp in glob(escaped + ".tmp*"):
        remove(tmp)


def makedirs_for(path):
    """The folder a file will be written in (nothing to make for a URL)."""
    if not is_url(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)


def absolute(path):
    return path if is_url(path) else os.path.abspath(path)


def sha256(path):
    return file_sha256(path, open_read)


def fingerprint(path):
    """The file `path` by content, {"bytes", "sha256"}: bert_tf/base/files.py's
    fingerprint of a local file, for a URL too."""
    return {"bytes": getsize(path), "sha256": sha256(path)}


def write_text(path, text):
    """`text` (UTF-8) to `path` whole or not at all."""
    if not is_url(path):
        from bert_tf.base.files import atomic_write
        with atomic_write(path) as f:
            f.write(text)
        return
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path, data):
    """`data` to `path` whole or not at all (a temporary beside it, renamed)."""
    if not is_url(path):
        from bert_tf.base.files import atomic_write
        with atomic_write(path, "wb") as f:
            f.write(data)
        return
    with open_write(f"{path}.tmp") as f:
        f.write(data)
    replace(f"{path}.tmp", path)


def read_bytes(path):
    with open_read(path) as f:
        return f.read()


_local_copies = {}


def local_copy(path):
    """A local path with `path`'s bytes: `path` itself when local, else a copy made once
    per process (the workers' vocabulary on a URL)."""
    if not is_url(path):
        return path
    if path not in _local_copies:
        if not exists(path):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        folder = tempfile.mkdtemp(prefix="bert_tf-")
        atexit.register(shutil.rmtree, folder, True)
        local = os.path.join(folder, os.path.basename(path) or "file")
        with open(local, "wb") as f:
            f.write(read_bytes(path))
        _local_copies[path] = local
    return _local_copies[path]

