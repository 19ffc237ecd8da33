"""Released BERT checkpoints by name: one table of names and addresses, and the download
cache behind it.

    encoder = bert_tf.load_encoder("uncased_L-12_H-768_A-12")   # google's zip, unpacked
    python -m bert_tf.extract_features --init_checkpoint=bert-base-cased ...

Every checkpoint path the project reads (`checkpoints.read_checkpoint` and all that goes
through it: `load_encoder`, `load_pretrainer`, `restore`, `--init_checkpoint`,
convert_checkpoint's `--input`) passes through `resolve_checkpoint` first:

1. an existing path (file, directory or TF1 checkpoint prefix) is returned as it is: a
   path always wins over a name;
2. a name in the table is looked up in the cache, downloaded into it on first use, and
   its directory returned (google's `bert_model.ckpt.*` + `bert_config.json` +
   `vocab.txt`, or HF's `config.json` + `model.safetensors` + `vocab.txt`);
3. anything else that looks like a name is one error listing the known names.

Addresses. Each entry holds paths relative to its publisher's base address:

    google  https://storage.googleapis.com/bert_models / 2018_10_18/uncased_L-12_H-768_A-12.zip
    Model Garden  https://storage.googleapis.com/tf_model_garden /
            nlp/bert/v3/uncased_L-12_H-768_A-12.tar.gz  (named tf_model_garden/uncased_...)
    HF hub  https://huggingface.co / google-bert/bert-base-uncased/resolve/main/vocab.txt

`BERT_TF_MIRROR=URL` replaces both bases: a mirror serves the same relative paths under
URL (`URL/2018_10_18/uncased_L-12_H-768_A-12.zip`,
`URL/google-bert/bert-base-uncased/resolve/main/config.json`). `HF_ENDPOINT` replaces the
HF base alone, as it does for huggingface_hub.

Cache. `$BERT_TF_CACHE`, default `$XDG_CACHE_HOME/bert_tf` (`~/.cache/bert_tf`):

    checkpoints/NAME/        complete checkpoints, ready to load (a folder there that
                             lacks its files was not made by a download: an empty one
                             is downloaded anew, another is refused, named for deletion)
    downloads/RELATIVE_PATH  files on their way (`.part` while incomplete)
    tables/                  the tokenizer's per-code-point tables, computed once per
                             machine (bert_tf/text/tokenization.py `_cached_tables`)

A download resumes its `.part` file with an HTTP Range request (a server that answers
the whole file instead starts it over), is checked against the size the server announced
and every checksum known (the table's, and the sha256 the HF hub sends for its large files
as `X-Linked-Etag`), and is checked once more by reading it (a zip's CRCs, a safetensors
header). A checkpoint reaches `checkpoints/NAME` by one rename of a directory filled beside
it, so an interrupted or rejected download never leaves anything under that name.
HTTP is the standard library's urllib: no dependency beyond Python.

Why one file: the table, the cache's layout and the download are one path from a name to
a directory; the downloading serves only the table's two kinds of entry, and a reader
following a name to its files should not have to open a second module to see where
they land.
"""

import contextlib
import dataclasses
import difflib
import http.client
import os
import re
import shutil
import struct
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
import zlib

from bert_tf.checkpoints.formats.core import GOOGLE_CONFIG_NAME, HF_CONFIG_NAME, VOCAB_NAME
from bert_tf.checkpoints.formats.google import GOOGLE_CKPT_NAME
from bert_tf.checkpoints.formats.hf import HF_WEIGHTS_NAME, safetensors_header
from bert_tf.base.files import cache_dir, file_sha256

GOOGLE_ZIP = "google zip"   # one zip of a TF1 checkpoint, unpacked into the cache
MODEL_GARDEN_TAR = "model garden tar.gz"  # one tar.gz of a TF2 checkpoint, unpacked
HF_FILES = "hf files"       # files of an HF hub repository, fetched one by one

GOOGLE_BASE = "https://storage.googleapis.com/bert_models"
MODEL_GARDEN_BASE = "https://storage.googleapis.com/tf_model_garden"
HF_BASE = "https://huggingface.co"
# The file names are the formats' own (bert_tf/checkpoints/formats/).
HF_FILE_NAMES = (HF_CONFIG_NAME, HF_WEIGHTS_NAME, VOCAB_NAME)
# What an unpacked google zip must hold besides its weights' data shard; a Model Garden
# tar.gz, besides its checkpoint's .index and data shard (their prefix varies).
GOOGLE_FILES = (GOOGLE_CKPT_NAME + ".index", GOOGLE_CONFIG_NAME, VOCAB_NAME)
MODEL_GARDEN_FILES = (GOOGLE_CONFIG_NAME, VOCAB_NAME)

CHUNK = 1 << 20
TIMEOUT_S = 60           # a stalled connection fails after this long without data
RETRIES = 2              # an interrupted transfer is resumed this many times in one call
RETRY_WAIT_S = 2.0


class DownloadError(FileNotFoundError):
    """A named checkpoint is not in the cache and could not be downloaded (no network, an
    HTTP error, a transfer that kept breaking, a cache that cannot be written)."""


class CorruptDownloadError(ValueError):
    """A downloaded file failed a check (size, checksum, zip CRCs, safetensors layout);
    it was deleted so that the next run downloads it anew."""


class UnknownCheckpointError(FileNotFoundError):
    """Neither an existing path nor a known checkpoint name."""


@dataclasses.dataclass(frozen=True)
class File:
    """One file of an entry: its path relative to the publisher's base address, and its
    size and sha256 where the publisher documents them (None: not documented)."""
    path: str
    size: int = None
    sha256: str = None


@dataclasses.dataclass(frozen=True)
class Released:
    """One released checkpoint: its name, how it is published (GOOGLE_ZIP or HF_FILES),
    its files, and other names it answers to."""
    name: str
    kind: str
    files: tuple
    aliases: tuple = ()


# -- the table --------------------------------------------------------------------------
# google-research/bert README.md lists these zips and no checksums or sizes for them: a
# download is checked by the size the server announces and by the zip's own CRCs.

def _google(name, date):
    return Released(name, GOOGLE_ZIP, (File(f"{date}/{name}.zip"),))


# tensorflow/models official/nlp/docs/pretrained_models.md lists google's BERTs converted
# to Model Garden's TF2 checkpoints (BertEncoder under `encoder`, bert_config.json and
# vocab.txt beside) as one tar.gz each, no sizes or checksums: checked like the zips, by
# the announced size and by reading every member.
def _model_garden(name):
    return Released(f"tf_model_garden/{name}", MODEL_GARDEN_TAR,
                    (File(f"nlp/bert/v3/{name}.tar.gz"),))


# The HF hub serves every file of a repository at REPO/resolve/REVISION/FILE. It documents
# the sha256 and size of its large (LFS) files per request, in the X-Linked-Etag and
# X-Linked-Size headers: `_download` checks those; none are pinned here.
def _hf(repo, *aliases):
    return Released(repo, HF_FILES,
                    tuple(File(f"{repo}/resolve/main/{f}") for f in HF_FILE_NAMES), aliases)


SMALL_LAYERS = (2, 4, 6, 8, 10, 12)
SMALL_HIDDEN = (128, 256, 512, 768)

_ENTRIES = (
    # BERT-Base and BERT-Large, uncased and cased.
    _google("uncased_L-12_H-768_A-12", "2018_10_18"),
    _google("cased_L-12_H-768_A-12", "2018_10_18"),
    _google("uncased_L-24_H-1024_A-16", "2018_10_18"),
    _google("cased_L-24_H-1024_A-16", "2018_10_18"),
    # Whole word masking: BERT-Large only.
    _google("wwm_uncased_L-24_H-1024_A-16", "2019_05_30"),
    _google("wwm_cased_L-24_H-1024_A-16", "2019_05_30"),
    # Multilingual cased (104 languages, recommended) and uncased (102), Chinese.
    _google("multi_cased_L-12_H-768_A-12", "2018_11_23"),
    _google("multilingual_L-12_H-768_A-12", "2018_11_03"),
    _google("chinese_L-12_H-768_A-12", "2018_11_03"),
    # The 24 smaller BERTs (uncased, 64-wide heads). Their L=12/H=768 is BERT-Base
    # re-trained under the small models' regime, published as
    # 2020_02_20/uncased_L-12_H-768_A-12.zip; the name keeps meaning the original above.
    *(_google(f"uncased_L-{layers}_H-{hidden}_A-{hidden // 64}", "2020_02_20")
      for layers in SMALL_LAYERS for hidden in SMALL_HIDDEN
      if (layers, hidden) != (12, 768)),
    # The HF hub's copies, under their hub names and the short names they began with.
    _hf("google-bert/bert-base-uncased", "bert-base-uncased"),
    _hf("google-bert/bert-base-cased", "bert-base-cased"),
    _hf("google-bert/bert-large-uncased", "bert-large-uncased"),
    _hf("google-bert/bert-large-cased", "bert-large-cased"),
    _hf("google-bert/bert-base-multilingual-cased", "bert-base-multilingual-cased"),
    _hf("google-bert/bert-base-chinese", "bert-base-chinese"),
    # Model Garden's TF2 copies of google's, under its storage folder's name.
    *(_model_garden(name) for name in (
        "uncased_L-12_H-768_A-12", "cased_L-12_H-768_A-12", "uncased_L-24_H-1024_A-16",
        "cased_L-24_H-1024_A-16", "wwm_uncased_L-24_H-1024_A-16",
        "wwm_cased_L-24_H-1024_A-16", "multi_cased_L-12_H-768_A-12",
        "chinese_L-12_H-768_A-12")),
)

CHECKPOINTS = {entry.name: entry for entry in _ENTRIES}


def lookup(name):
    """The table's entry for `name` (a name or an alias), or None."""
    if name in CHECKPOINTS:
        return CHECKPOINTS[name]
    for entry in CHECKPOINTS.values():
        if name in entry.aliases:
            return entry
    return None


def known_names():
    """Every name and alias the table answers to."""
    return [n for e in CHECKPOINTS.values() for n in (e.name, *e.aliases)]


def _compact_names():
    """The known names for an error message: the small BERTs as one pattern, the HF names
    once (with the hub's organisation said once)."""
    small = re.compile(r"uncased_L-\d+_H-\d+_A-\d+$")
    shown = []
    for entry in CHECKPOINTS.values():
        if entry.kind == MODEL_GARDEN_TAR:
            pattern = "tf_model_garden/NAME (NAME: the 2018-2019 google names but multilingual)"
            if pattern not in shown:
                shown.append(pattern)
        elif entry.kind == GOOGLE_ZIP and small.match(entry.name) and \
                entry.files[0].path.startswith("2020_02_20/"):
            pattern = (f"uncased_L-{{{','.join(map(str, SMALL_LAYERS))}}}"
                       f"_H-{{{','.join(map(str, SMALL_HIDDEN))}}}_A-{{H/64}}")
            if pattern not in shown:
                shown.append(pattern)
        else:
            shown.append(entry.aliases[0] if entry.aliases else entry.name)
    return ", ".join(shown) + " (HF names also as google-bert/NAME)"


# -- where things are -------------------------------------------------------------------

def url(entry, file):
    """The address of one of `entry`'s files: BERT_TF_MIRROR, else the publisher's base
    (HF_ENDPOINT for the HF hub when set), then the file's relative path."""
    base = os.environ.get("BERT_TF_MIRROR")
    if not base:
        base = GOOGLE_BASE if entry.kind == GOOGLE_ZIP else \
            MODEL_GARDEN_BASE if entry.kind == MODEL_GARDEN_TAR else \
            os.environ.get("HF_ENDPOINT") or HF_BASE
    return base.rstrip("/") + "/" + file.path


def checkpoint_dir(entry):
    """Where `entry` lives in the cache once complete."""
    return os.path.join(cache_dir(), "checkpoints", *entry.name.split("/"))


# -- resolving --------------------------------------------------------------------------

_NAME_LIKE = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_PATH_SUFFIXES = (".ckpt", ".index", ".meta", ".keras", ".safetensors", ".bin", ".json",
                  ".h5", ".txt")


def _exists(path):
    """A file, a directory or a TF1 checkpoint prefix (PREFIX.index beside it)."""
    return os.path.exists(path) or os.path.exists(path + ".index")


def resolve_checkpoint(path_or_name, log=None):
    """A local path for `path_or_name`: itself when it exists (a TF1 prefix counts), the
    cached directory of a known name (downloaded on first use), else itself unless it
    looks like a name (then UnknownCheckpointError listing the known names)."""
    if path_or_name is None:
        return None
    path = os.fspath(path_or_name)
    if "://" in path or _exists(path):
        return path
    entry = lookup(path)
    if entry is not None:
        return fetch(path, log=log)
    if _NAME_LIKE.fullmatch(path) and not path.endswith(_PATH_SUFFIXES):
        names = known_names()
        close = [n for n in names if n.startswith(path)] or \
            difflib.get_close_matches(path, names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UnknownCheckpointError(
            f"{path}: no such file or directory, and not a known checkpoint name{hint}; "
            f"known names: {_compact_names()}")
    return path


def fetch(name, log=None):
    """The cache directory of the released checkpoint `name` (a name or an alias in the
    table), downloaded first when absent. `log`: where the one-line notices of a download
    go (default: stderr); the progress bar is bert_tf.base.progress's."""
    entry = lookup(name)
    if entry is None:
        raise UnknownCheckpointError(f"{name}: not a known checkpoint name; known names: "
                                     f"{_compact_names()}")
    final = checkpoint_dir(entry)
    if os.path.isdir(final) and not _missing_files(entry, final):
        return final
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        os.makedirs(os.path.dirname(final), exist_ok=True)
        with _lock(os.path.join(cache_dir(), "downloads", entry.name + ".lock")):
            if os.path.isdir(final):
                missing = _missing_files(entry, final)
                if not missing:   # another process finished it meanwhile
                    return final
                _clear_stale_entry(name, final, missing)
            if entry.kind in (GOOGLE_ZIP, MODEL_GARDEN_TAR):
                _fetch_archive(entry, name, final, log)
            else:
                _fetch_hf(entry, name, final, log)
    except (DownloadError, CorruptDownloadError):
        raise
    except OSError as e:
        reason = f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e)
        raise DownloadError(f"{name}: could not write the cache {cache_dir()} ({reason}); "
                            "set BERT_TF_CACHE to a writable directory") from None
    return final


def _missing_files(entry, directory):
    """The files `entry`'s cache folder must hold that `directory` lacks (none: complete).
    A download only ever renames a complete folder into place, so a folder that lacks
    one was made some other way: by hand, or by an older copy of this cache."""
    names = GOOGLE_FILES if entry.kind == GOOGLE_ZIP else \
        MODEL_GARDEN_FILES if entry.kind == MODEL_GARDEN_TAR else \
        tuple(os.path.basename(f.path) for f in entry.files)
    present = set(os.listdir(directory))
    missing = [n for n in names if n not in present]
    if entry.kind == GOOGLE_ZIP and not any(n.startswith("bert_model.ckpt.data-")
                                            for n in present):
        missing.append("bert_model.ckpt.data-*")
    if entry.kind == MODEL_GARDEN_TAR and \
            not any(re.fullmatch(r".+\.data-\d+-of-\d+", n) for n in present):
        missing.append("*.data-*")
    if entry.kind == MODEL_GARDEN_TAR and not any(n.endswith(".index") for n in present):
        missing.append("*.index")
    return missing


def _clear_stale_entry(name, final, missing):
    """An empty folder where a checkpoint belongs is removed, to be downloaded anew (it
    holds nothing to lose); one holding other files is someone's: DownloadError saying
    which folder to delete."""
    if os.listdir(final):
        raise DownloadError(f"{name}: the cache folder {final} is incomplete (no "
                            f"{', '.join(missing)}): delete that folder and run again to "
                            f"download {name}")
    os.rmdir(final)


@contextlib.contextmanager
def _lock(path):
    """An exclusive lock on `path` (POSIX): two processes never fill one .part file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        import fcntl
    except ImportError:  # no advisory locks here: go on unlocked
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _fill_beside(final):
    """A fresh directory beside `final`, with the usual permissions (mkdtemp's are 0700)."""
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(final)}.tmp-",
                           dir=os.path.dirname(final))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    return tmp


def _fetch_archive(entry, name, final, log):
    """Downloads the archive (google's zip, Model Garden's tar.gz), unpacks it beside
    `final`, renames its checkpoint folder onto `final`, deletes the archive. google's
    2018-2019 zips hold one folder named like the checkpoint; the 2020 small ones hold the
    files at the top."""
    file = entry.files[0]
    address = url(entry, file)
    archive = _download(name, address, file, log)
    tmp = _fill_beside(final)
    what = "zip" if entry.kind == GOOGLE_ZIP else "tar.gz"
    try:
        try:
            if entry.kind == GOOGLE_ZIP:
                with zipfile.ZipFile(archive) as z:
                    z.extractall(tmp)  # reads every member: a CRC mismatch raises here
            else:
                with tarfile.open(archive, "r:gz") as t:
                    # "data": no member may land outside tmp, nor be a device or a link out
                    t.extractall(tmp, filter="data")
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error) as e:
            os.remove(archive)
            raise CorruptDownloadError(
                f"{name}: {archive} (from {address}) is not a valid {what} archive ({e}); "
                f"it was deleted: run again to download it anew") from None
        root = _checkpoint_root(entry, tmp)
        if root is None:
            os.remove(archive)
            raise CorruptDownloadError(
                f"{name}: {archive} (from {address}) holds no checkpoint with "
                f"bert_config.json and vocab.txt; it was deleted")
        if root != tmp:
            os.chmod(root, os.stat(tmp).st_mode & 0o777)
        os.replace(root, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.remove(archive)  # the unpacked folder is the cache; the archive would double it
    log(f"{name}: saved in {final}")


def _checkpoint_root(entry, directory):
    """The folder of an unpacked archive holding the checkpoint: itself or its one
    subfolder."""
    candidates = [directory] + [os.path.join(directory, d) for d in os.listdir(directory)
                                if os.path.isdir(os.path.join(directory, d))]
    for candidate in candidates:
        if not _missing_files(entry, candidate):
            return candidate
    return None


def _fetch_hf(entry, name, final, log):
    """Downloads each file (kept in downloads/ until all are there), then moves them into
    a folder beside `final` renamed onto it."""
    done = []
    for file in entry.files:
        address = url(entry, file)
        path = _download(name, address, file, log)
        if path.endswith(".safetensors"):
            _check_safetensors(name, path, address)
        done.append(path)
    tmp = _fill_beside(final)
    try:
        for path in done:
            shutil.move(path, os.path.join(tmp, os.path.basename(path)))
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"{name}: saved in {final}")


def _check_safetensors(name, path, address):
    """A safetensors file laid out as its header says (hf.safetensors_header); anything
    else is a damaged download."""
    try:
        safetensors_header(path)
    except (ValueError, KeyError, TypeError, IndexError, struct.error) as e:
        os.remove(path)
        raise CorruptDownloadError(f"{name}: {path} (from {address}) is not a valid "
                                   f"safetensors file ({e}); it was deleted: run again "
                                   f"to download it anew") from None


# -- downloading one file ---------------------------------------------------------------

class _Interrupted(Exception):
    """The transfer started and broke off; the .part file holds what arrived."""


class _RecordRedirects(urllib.request.HTTPRedirectHandler):
    """Keeps the headers of every redirect: the HF hub sends a large file's checksum on
    its redirect to the storage that serves the bytes."""

    def __init__(self):
        self.headers = []

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        self.headers.append(headers)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _announced(headers_list):
    """(size, sha256) the HF hub announces for an LFS file (X-Linked-Size,
    X-Linked-Etag), each None when absent or not of that form."""
    size = sha256 = None
    for headers in headers_list:
        etag = (headers.get("X-Linked-Etag") or "").strip().removeprefix("W/").strip('"')
        if re.fullmatch(r"[0-9a-f]{64}", etag):
            sha256 = etag
        if (headers.get("X-Linked-Size") or "").isdigit():
            size = int(headers["X-Linked-Size"])
    return size, sha256


def _download(name, address, file, log):
    """`address` downloaded to downloads/FILE.PATH (via a .part file, resumed), checked;
    returns its path. Interrupted transfers are resumed up to RETRIES times."""
    target = os.path.join(cache_dir(), "downloads", *file.path.split("/"))
    if os.path.isfile(target):  # complete and checked by an earlier run
        return target
    os.makedirs(os.path.dirname(target), exist_ok=True)
    log(f"{name}: downloading {address}")
    for attempt in range(RETRIES + 1):
        try:
            return _transfer(name, address, file, target)
        except _Interrupted as e:
            if attempt == RETRIES:
                raise DownloadError(
                    f"{name}: the download of {address} broke off ({e}); the part kept in "
                    f"{target}.part resumes on the next run") from None
            time.sleep(RETRY_WAIT_S)
    raise AssertionError("unreachable")


def _transfer(name, address, file, target, restarted=False):
    part = target + ".part"
    offset = os.path.getsize(part) if os.path.isfile(part) else 0
    headers = {"User-Agent": "bert_tf", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    redirects = _RecordRedirects()
    opener = urllib.request.build_opener(redirects)
    try:
        response = opener.open(urllib.request.Request(address, headers=headers),
                               timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        if e.code == 416 and offset and not restarted:  # the part is not a prefix: restart
            os.remove(part)
            return _transfer(name, address, file, target, restarted=True)
        raise DownloadError(_unreachable(name, address, f"HTTP {e.code} {e.reason}")) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        reason = getattr(e, "reason", None) or e
        raise DownloadError(_unreachable(name, address, reason)) from None

    with response:
        if response.status == 206:
            match = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)",
                                 response.headers.get("Content-Range", "").strip())
            if not match or int(match.group(1)) != offset:
                if restarted:
                    raise DownloadError(_unreachable(
                        name, address, "the server sent a range that was not asked for"))
                os.remove(part)
                return _transfer(name, address, file, target, restarted=True)
            total = int(match.group(2)) if match.group(2) != "*" else None
        else:
            # 200: the whole file, whatever was asked (a server without ranges): start over.
            offset = 0
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        announced_size, announced_sha256 = _announced(redirects.headers + [response.headers])
        from bert_tf.base.progress import progress_bar
        bar = progress_bar(total, f"{name}: {os.path.basename(file.path)}", unit="B",
                           unit_scale=True, initial=offset)
        received = offset
        with open(part, "ab" if offset else "wb") as out, bar:
            while True:
                try:
                    chunk = response.read(CHUNK)
                except (OSError, http.client.HTTPException) as e:
                    raise _Interrupted(f"{received} of {total or '?'} bytes: "
                                       f"{e.__class__.__name__} {e}") from None
                if not chunk:
                    break
                out.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
    if total is not None and received < total:
        raise _Interrupted(f"{received} of {total} bytes: the connection closed early")

    # The whole file is there: check it against every size and checksum known.
    problems = []
    for expected, what in ((total, "announced by the server"), (file.size, "in the table"),
                           (announced_size, "announced by the hub")):
        if expected is not None and received != expected:
            problems.append(f"{received} bytes, {expected} {what}")
    expected_sha256 = {file.sha256, announced_sha256} - {None}
    digest = file_sha256(part) if expected_sha256 else None
    for expected in sorted(expected_sha256):
        if digest != expected:
            problems.append(f"sha256 {digest}, expected {expected}")
    if problems:
        os.remove(part)
        raise CorruptDownloadError(f"{name}: {target} (from {address}) is corrupt "
                                   f"({'; '.join(problems)}); it was deleted: run again to "
                                   f"download it anew")
    os.replace(part, target)
    return target


def _unreachable(name, address, reason):
    entry = lookup(name)
    where = checkpoint_dir(entry) if entry else cache_dir()
    return (f"{name}: not in the cache ({where}) and the address could not be reached: "
            f"{address} ({reason})")


