"""An Apache Beam file system for URLs `bertfs://PATH`, kept in the local folder
$BERT_TF_URLFS_ROOT: a stand-in for `gs://` in tests (the same FileSystems calls reach it,
with no network). Like Cloud Storage it has no folders and its rename is a copy and a
delete. Beam imports this module in its worker processes too (a FileSystem is a Beam
plugin: the pipeline's options name it), so they reach the same URLs.
"""

import os

from apache_beam.io.filesystem import FileMetadata, FileSystem, MatchResult
from apache_beam.io.localfilesystem import LocalFileSystem

SCHEME = "bertfs"
PREFIX = f"{SCHEME}://"


def to_local(url):
    assert url.startswith(PREFIX), url
    return os.path.join(os.environ["BERT_TF_URLFS_ROOT"], url[len(PREFIX):])


def to_url(path):
    return PREFIX + os.path.relpath(path, os.environ["BERT_TF_URLFS_ROOT"])


class UrlFileSystem(FileSystem):
    """bertfs:// URLs on a local folder, through Beam's own LocalFileSystem."""

    def __init__(self, pipeline_options=None):
        super().__init__(pipeline_options)
        self._local = LocalFileSystem(pipeline_options)

    @classmethod
    def scheme(cls):
        return SCHEME

    def join(self, basepath, *paths):
        return "/".join([basepath.rstrip("/")] + [p.strip("/") for p in paths])

    def split(self, path):
        head, _, tail = path.rpartition("/")
        return head, tail

    def mkdirs(self, path):
        pass                               # no folders, as on Cloud Storage

    def has_dirs(self):
        return False

    def _list(self, dir_or_prefix):
        raise NotImplementedError("match() is implemented directly")

    def match(self, patterns, limits=None):
        results = self._local.match([to_local(p) for p in patterns], limits)
        return [MatchResult(pattern, [
            FileMetadata(to_url(m.path), m.size_in_bytes, m.last_updated_in_seconds)
            for m in result.metadata_list]) for pattern, result in zip(patterns, results)]

    def create(self, path, *args, **kwargs):
        return self._local.create(to_local(path), *args, **kwargs)

    def open(self, path, *args, **kwargs):
        return self._local.open(to_local(path), *args, **kwargs)

    def copy(self, sources, destinations):
        self._local.copy([to_local(p) for p in sources], [to_local(p) for p in destinations])

    def rename(self, sources, destinations):
        # Cloud Storage's rename: a copy, then a delete.
        self.copy(sources, destinations)
        self.delete(sources)

    def exists(self, path):
        return os.path.isfile(to_local(path))

    def size(self, path):
        return self._local.size(to_local(path))

    def last_updated(self, path):
        return self._local.last_updated(to_local(path))

    def checksum(self, path):
        return self._local.checksum(to_local(path))

    def metadata(self, path):
        m = self._local.metadata(to_local(path))
        return FileMetadata(path, m.size_in_bytes, m.last_updated_in_seconds)

    def delete(self, paths):
        self._local.delete([to_local(p) for p in paths])
