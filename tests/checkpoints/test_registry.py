"""Released checkpoints by name (bert_tf/checkpoints/registry.py), against a local HTTP server.

There is no network here: a server on 127.0.0.1 (with Range support written below, and a
switch that drops the connection part-way through a file) serves a tiny model written by
bert_tf's own writers, zipped in google's layout and laid out as the HF hub serves it,
under the relative paths of real names; BERT_TF_MIRROR points at it and BERT_TF_CACHE at
tmp_path.
"""

import hashlib
import http.server
import io
import os
import re
import socket
import subprocess
import sys
import tarfile
import threading
import zipfile

import numpy as np
import pytest

from bert_tf.base import files
from bert_tf.checkpoints import dispatch as checkpoints
from bert_tf.checkpoints import registry
from bert_tf.base.config import BertConfig
from bert_tf.models.encoder import BertEncoder
from tests import ROOT, TESTS
from tests.testing import random_inputs

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]
BASE = "uncased_L-12_H-768_A-12"      # served from 2018_10_18/, one top folder in the zip
SMALL = "uncased_L-2_H-128_A-2"       # served from 2020_02_20/, files at the zip's top


class Server:
    """A static file server on 127.0.0.1 that understands `Range: bytes=N-`.

    files: {url path: bytes}; headers: {url path: extra response headers};
    drop_after: {url path: n}: the next answer for that path announces the whole length
    but sends n bytes and closes; ignore_range: answer 200 and the whole file regardless;
    log: one (path, Range header, status, bytes sent) per request."""

    def __init__(self):
        self.files, self.headers, self.drop_after, self.log = {}, {}, {}, []
        self.ignore_range = False
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                asked = self.headers.get("Range")
                data = server.files.get(self.path)
                # Logged before the reply: a client that has its answer finds it logged.
                if data is None:
                    server.log.append((self.path, asked, 404, 0))
                    self.send_error(404)
                    return
                start, status = 0, 200
                if asked and not server.ignore_range:
                    start, status = int(re.fullmatch(r"bytes=(\d+)-", asked).group(1)), 206
                body = data[start:]
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                if status == 206:
                    self.send_header("Content-Range",
                                     f"bytes {start}-{len(data) - 1}/{len(data)}")
                for key, value in server.headers.get(self.path, {}).items():
                    self.send_header(key, value)
                self.end_headers()
                cut = server.drop_after.pop(self.path, None)
                sent = body if cut is None else body[:cut]
                server.log.append((self.path, asked, status, len(sent)))
                self.wfile.write(sent)  # HTTP/1.0: the connection closes after this

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def reset(self):
        self.files.clear(), self.headers.clear(), self.drop_after.clear(), self.log.clear()
        self.ignore_range = False


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A tiny encoder, its outputs, and its files: google's zips (2018 layout with a top
    folder, 2020 layout without) and HF's three files."""
    out = tmp_path_factory.mktemp("source")
    vocab = out / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    encoder = BertEncoder.from_config_object(BertConfig.preset("tiny", vocab_size=len(VOCAB)))
    inputs = random_inputs(2, 8, len(VOCAB))
    google = checkpoints.save_checkpoint(encoder, str(out / "google"), "google", str(vocab))
    hf = checkpoints.save_checkpoint(encoder, str(out / "hf"), "hf", str(vocab))

    def zipped(top):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
            for name in sorted(os.listdir(google)):
                if name != "checkpoint":   # google's zips hold bert_model.ckpt.* only
                    z.write(os.path.join(google, name), f"{top}/{name}" if top else name)
        return buffer.getvalue()

    return {"encoder": encoder, "inputs": inputs,
            "outputs": np.asarray(encoder(inputs)["sequence_output"]),
            "google": google, "hf": hf,
            "base_zip": zipped(BASE), "small_zip": zipped(None),
            "hf_files": {n: open(os.path.join(hf, n), "rb").read()
                         for n in ("config.json", "model.safetensors", "vocab.txt")}}


@pytest.fixture(scope="module")
def module_server():
    server = Server()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


@pytest.fixture
def server(module_server, tmp_path, monkeypatch):
    """The server, emptied, as the mirror; the cache in tmp_path; no waits between
    retries."""
    module_server.reset()
    monkeypatch.setenv("BERT_TF_MIRROR", module_server.url)
    monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    for name in ("no_proxy", "NO_PROXY"):           # a proxy set for the outside world
        monkeypatch.setenv(name, "127.0.0.1")
    monkeypatch.setattr(registry, "RETRY_WAIT_S", 0)
    return module_server


def serve_google(server, source, name=BASE):
    path = f"/2018_10_18/{name}.zip" if name == BASE else f"/2020_02_20/{name}.zip"
    server.files[path] = source["base_zip" if name == BASE else "small_zip"]
    return path


def serve_hf(server, source, repo="google-bert/bert-base-cased", sha256=None):
    for name, data in source["hf_files"].items():
        server.files[f"/{repo}/resolve/main/{name}"] = data
    weights = source["hf_files"]["model.safetensors"]
    # What the hub sends for an LFS file (on its redirect to the storage that serves it).
    server.headers[f"/{repo}/resolve/main/model.safetensors"] = {
        "X-Linked-Etag": f'"{sha256 or hashlib.sha256(weights).hexdigest()}"',
        "X-Linked-Size": str(len(weights))}


def cached(tmp_path, name):
    return tmp_path / "cache" / "checkpoints" / name


def leftovers(tmp_path):
    """Everything in the cache but the lock files."""
    root = tmp_path / "cache"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and not p.name.endswith(".lock"))


def outputs(encoder, source):
    return np.asarray(encoder(source["inputs"])["sequence_output"])


def test_google_name_downloads_once_then_loads_from_the_cache(server, source, tmp_path,
                                                               monkeypatch):
    path = serve_google(server, source)
    encoder = checkpoints.load_encoder(BASE)
    np.testing.assert_allclose(outputs(encoder, source), source["outputs"], atol=1e-6)
    assert [(p, s) for p, _, s, _ in server.log] == [(path, 200)]
    assert leftovers(tmp_path) == [f"checkpoints/{BASE}/{n}" for n in (
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "vocab.txt")]                                  # unpacked; the zip itself is gone

    # Cache hit: nothing listens at the mirror any more, and it loads all the same.
    monkeypatch.setenv("BERT_TF_MIRROR", "http://127.0.0.1:9")
    again = checkpoints.load_encoder(BASE)
    np.testing.assert_allclose(outputs(again, source), source["outputs"], atol=1e-6)
    assert checkpoints.vocab_beside(BASE) == str(cached(tmp_path, BASE) / "vocab.txt")
    assert len(server.log) == 1


def test_small_bert_zip_without_a_top_folder(server, source, tmp_path):
    serve_google(server, source, SMALL)
    checkpoint = checkpoints.read_checkpoint(SMALL)
    assert checkpoint.path == str(cached(tmp_path, SMALL) / "bert_model.ckpt")
    want = checkpoints.read_checkpoint(source["google"]).tensors
    assert sorted(checkpoint.tensors) == sorted(want)
    for name, value in want.items():
        np.testing.assert_array_equal(checkpoint.tensors[name], value)


def test_hf_name_and_its_hub_spelling_share_one_download(server, source, tmp_path):
    serve_hf(server, source)
    encoder = checkpoints.load_encoder("bert-base-cased")
    np.testing.assert_allclose(outputs(encoder, source), source["outputs"], atol=1e-6)
    folder = cached(tmp_path, "google-bert/bert-base-cased")
    assert registry.resolve_checkpoint("google-bert/bert-base-cased") == str(folder)
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors", "vocab.txt"]
    assert [p.rsplit("/", 1)[1] for p, *_ in server.log] == \
        ["config.json", "model.safetensors", "vocab.txt"]


def test_interrupted_download_resumes_where_it_stopped(server, source, tmp_path,
                                                       monkeypatch):
    path = serve_google(server, source)
    size = len(source["base_zip"])
    server.drop_after[path] = size // 3
    monkeypatch.setattr(registry, "RETRIES", 0)   # one request per run: see both runs
    with pytest.raises(registry.DownloadError,
                       match=f"^{BASE}: the download of {server.url}{path} broke off "
                             f"\\({size // 3} of {size} bytes"):
        registry.resolve_checkpoint(BASE)
    assert leftovers(tmp_path) == [f"downloads/2018_10_18/{BASE}.zip.part"]

    folder = registry.resolve_checkpoint(BASE)      # the next run
    assert server.log == [(path, None, 200, size // 3),
                          (path, f"bytes={size // 3}-", 206, size - size // 3)]
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001"):
        assert open(os.path.join(folder, name), "rb").read() == \
            open(os.path.join(source["google"], name), "rb").read()


def test_server_without_ranges_starts_over(server, source):
    path = serve_google(server, source, SMALL)
    size = len(source["small_zip"])
    server.drop_after[path] = 1000
    server.ignore_range = True                      # answers 200 and the whole file
    folder = registry.resolve_checkpoint(SMALL)     # retried within the call
    assert server.log == [(path, None, 200, 1000), (path, "bytes=1000-", 200, size)]
    assert open(os.path.join(folder, "bert_model.ckpt.index"), "rb").read() == \
        open(os.path.join(source["google"], "bert_model.ckpt.index"), "rb").read()


def _flip_in_member(data):
    """The zip with one byte of its largest member's data changed (its CRC then fails)."""
    info = max(zipfile.ZipFile(io.BytesIO(data)).infolist(), key=lambda i: i.compress_size)
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + \
        info.compress_size // 2
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


@pytest.mark.parametrize("damage", ["truncated", "flipped byte"])
def test_corrupt_archive_is_rejected_and_leaves_nothing(server, source, tmp_path, damage):
    path = serve_google(server, source, SMALL)
    good = server.files[path]
    server.files[path] = good[:len(good) // 2] if damage == "truncated" else \
        _flip_in_member(good)
    archive = tmp_path / "cache" / "downloads" / "2020_02_20" / f"{SMALL}.zip"
    with pytest.raises(registry.CorruptDownloadError,
                       match=f"^{SMALL}: {re.escape(str(archive))} \\(from "
                             f"{server.url}{path}\\) is not a valid zip archive"):
        checkpoints.load_encoder(SMALL)
    assert leftovers(tmp_path) == []                 # not the zip, not a half-unpacked folder
    assert not any(cached(tmp_path, "").iterdir())
    server.files[path] = good                        # the next run downloads it anew
    assert registry.resolve_checkpoint(SMALL) == str(cached(tmp_path, SMALL))


def test_size_and_checksum_mismatches_are_rejected(server, source, tmp_path, monkeypatch):
    # The hub's announced sha256 (X-Linked-Etag) disagrees with the bytes.
    serve_hf(server, source, sha256="0" * 64)
    target = tmp_path / "cache" / "downloads" / "google-bert" / "bert-base-cased" / \
        "resolve" / "main" / "model.safetensors"
    with pytest.raises(ValueError, match=f"^bert-base-cased: {re.escape(str(target))} "
                                         f"\\(from .*\\) is corrupt \\(sha256 [0-9a-f]{{64}}, "
                                         f"expected 0{{64}}\\); it was deleted"):
        registry.resolve_checkpoint("bert-base-cased")
    assert leftovers(tmp_path) == [
        "downloads/google-bert/bert-base-cased/resolve/main/config.json"]  # checked, kept
    assert not any(cached(tmp_path, "google-bert").iterdir())  # no folder, no temporary

    # No checksum announced (a plain mirror), and a short safetensors file served whole.
    weights = "/google-bert/bert-base-cased/resolve/main/model.safetensors"
    server.headers.pop(weights)
    server.files[weights] = server.files[weights][:-4]
    with pytest.raises(ValueError, match=f"^bert-base-cased: {re.escape(str(target))} "
                                         f"\\(from .*\\) is not a valid safetensors file"):
        registry.resolve_checkpoint("bert-base-cased")
    assert not target.exists() and not any(cached(tmp_path, "google-bert").iterdir())

    # A size documented in the table that the download does not have.
    entry = registry.CHECKPOINTS[SMALL]
    wrong = registry.Released(entry.name, entry.kind,
                              (registry.File(entry.files[0].path, size=12345),))
    monkeypatch.setitem(registry.CHECKPOINTS, SMALL, wrong)
    serve_google(server, source, SMALL)
    with pytest.raises(ValueError, match=f"is corrupt \\({len(source['small_zip'])} bytes, "
                                         f"12345 in the table\\)"):
        registry.resolve_checkpoint(SMALL)
    assert not cached(tmp_path, SMALL).exists()


def test_unknown_name_lists_the_known_names(server, tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        checkpoints.load_encoder("bert-base-uncsed")
    message = str(error.value)
    assert message.startswith("bert-base-uncsed: no such file or directory, and not a known "
                              "checkpoint name (did you mean bert-base-uncased?); known names: ")
    for name in ("uncased_L-12_H-768_A-12", "wwm_cased_L-24_H-1024_A-16",
                 "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12",
                 "uncased_L-{2,4,6,8,10,12}_H-{128,256,512,768}_A-{H/64}",
                 "bert-base-multilingual-cased", "bert-base-chinese", "tf_model_garden/NAME"):
        assert name in message
    assert len(message) < 700                       # compact: the 24 small ones as a pattern
    missing = str(tmp_path / "no" / "bert_model.ckpt")   # a path: the readers' own error
    assert registry.resolve_checkpoint(missing) == missing
    assert server.log == []


def test_unreachable_address_says_what_and_where(server, source, tmp_path, monkeypatch):
    with socket.socket() as s:                      # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("BERT_TF_MIRROR", f"http://127.0.0.1:{port}/")
    where = cached(tmp_path, BASE)
    with pytest.raises(registry.DownloadError) as error:
        checkpoints.load_encoder(BASE)
    assert str(error.value).startswith(
        f"{BASE}: not in the cache ({where}) and the address could not be reached: "
        f"http://127.0.0.1:{port}/2018_10_18/{BASE}.zip (")
    assert "refused" in str(error.value).lower()
    monkeypatch.setenv("BERT_TF_MIRROR", server.url)          # reachable, file missing
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"{server.url}/2018_10_18/{BASE}.zip (HTTP 404 Not Found)")):
        registry.resolve_checkpoint(BASE)
    assert not where.exists()


def test_stale_cache_folder_is_fetched_again_or_named_for_deletion(server, source, tmp_path,
                                                                   monkeypatch, capsys):
    """An empty folder where a name's checkpoint belongs (made by hand, or a mkdir of
    some tool) is no checkpoint: it is replaced by a download. A folder holding other
    files is not the cache's to delete: one line names it."""
    where = cached(tmp_path, BASE)
    where.mkdir(parents=True)
    with socket.socket() as s:                      # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("BERT_TF_MIRROR", f"http://127.0.0.1:{port}")
    with pytest.raises(registry.DownloadError) as error:
        registry.resolve_checkpoint(BASE)
    assert str(error.value).startswith(
        f"{BASE}: not in the cache ({where}) and the address could not be reached: ")
    assert not where.exists()
    where.mkdir()
    monkeypatch.setenv("BERT_TF_MIRROR", server.url)
    serve_google(server, source)
    encoder = checkpoints.load_encoder(BASE)
    np.testing.assert_allclose(outputs(encoder, source), source["outputs"], atol=1e-6)
    assert sorted(os.listdir(where)) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "vocab.txt"]

    # Someone's files under a released name: left as they are, the folder named.
    serve_google(server, source, SMALL)
    partial = cached(tmp_path, SMALL)
    partial.mkdir()
    (partial / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    requests = len(server.log)
    from bert_tf.convert_checkpoint import main
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(["--input", SMALL, "--output", str(tmp_path / "out"), "--output_format", "hf"])
    assert stop.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {SMALL}: the cache folder {partial} is incomplete (no "
        f"bert_model.ckpt.index, bert_config.json, bert_model.ckpt.data-*): delete that "
        f"folder and run again to download {SMALL}"]
    assert os.listdir(partial) == ["vocab.txt"] and len(server.log) == requests
    # An HF entry lacking its weights: the same.
    hf = cached(tmp_path, "google-bert/bert-base-cased")
    hf.mkdir(parents=True)
    (hf / "config.json").write_text("{}")
    with pytest.raises(registry.DownloadError, match=re.escape(
            f"the cache folder {hf} is incomplete (no model.safetensors, vocab.txt)")):
        registry.resolve_checkpoint("bert-base-cased")


def test_an_existing_path_wins_over_a_name(server, source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.symlink(source["hf"], "bert-base-uncased")
    assert registry.resolve_checkpoint("bert-base-uncased") == "bert-base-uncased"
    encoder = checkpoints.load_encoder("bert-base-uncased")
    np.testing.assert_allclose(outputs(encoder, source), source["outputs"], atol=1e-6)
    assert server.log == []


def test_cache_directory_and_addresses(monkeypatch):
    for name in ("BERT_TF_CACHE", "XDG_CACHE_HOME", "BERT_TF_MIRROR", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", "/home/u")
    assert files.cache_dir() == "/home/u/.cache/bert_tf"
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert files.cache_dir() == "/xdg/bert_tf"
    monkeypatch.setenv("BERT_TF_CACHE", "/models")
    assert files.cache_dir() == "/models"

    def urls(name):
        entry = registry.lookup(name)
        return [registry.url(entry, f) for f in entry.files]

    # google-research/bert's README.md addresses, written out.
    google = "https://storage.googleapis.com/bert_models/"
    assert urls("uncased_L-12_H-768_A-12") == [google + "2018_10_18/uncased_L-12_H-768_A-12.zip"]
    assert urls("cased_L-24_H-1024_A-16") == [google + "2018_10_18/cased_L-24_H-1024_A-16.zip"]
    assert urls("wwm_uncased_L-24_H-1024_A-16") == \
        [google + "2019_05_30/wwm_uncased_L-24_H-1024_A-16.zip"]
    assert urls("multi_cased_L-12_H-768_A-12") == \
        [google + "2018_11_23/multi_cased_L-12_H-768_A-12.zip"]
    assert urls("multilingual_L-12_H-768_A-12") == \
        [google + "2018_11_03/multilingual_L-12_H-768_A-12.zip"]
    assert urls("chinese_L-12_H-768_A-12") == [google + "2018_11_03/chinese_L-12_H-768_A-12.zip"]
    assert urls("uncased_L-4_H-256_A-4") == [google + "2020_02_20/uncased_L-4_H-256_A-4.zip"]
    small = [f"uncased_L-{l}_H-{h}_A-{h // 64}" for l in (2, 4, 6, 8, 10, 12)
             for h in (128, 256, 512, 768)]
    assert all(registry.lookup(n) for n in small) and len(small) == 24
    assert urls("bert-base-uncased") == [
        f"https://huggingface.co/google-bert/bert-base-uncased/resolve/main/{f}"
        for f in ("config.json", "model.safetensors", "vocab.txt")]
    hf = ["bert-base-uncased", "bert-base-cased", "bert-large-uncased", "bert-large-cased",
          "bert-base-multilingual-cased", "bert-base-chinese"]
    assert all(registry.lookup(n) is registry.lookup("google-bert/" + n) for n in hf)
    # tensorflow/models official/nlp/docs/pretrained_models.md's TF2 tarballs.
    garden = "https://storage.googleapis.com/tf_model_garden/nlp/bert/v3/"
    assert urls("tf_model_garden/uncased_L-12_H-768_A-12") == \
        [garden + "uncased_L-12_H-768_A-12.tar.gz"]
    assert urls("tf_model_garden/chinese_L-12_H-768_A-12") == \
        [garden + "chinese_L-12_H-768_A-12.tar.gz"]
    assert len(registry.CHECKPOINTS) == 9 + 23 + 6 + 8
    assert not any(f.sha256 or f.size for e in registry.CHECKPOINTS.values() for f in e.files)

    monkeypatch.setenv("HF_ENDPOINT", "https://hf.example")
    assert urls("bert-base-chinese")[0] == \
        "https://hf.example/google-bert/bert-base-chinese/resolve/main/config.json"
    assert urls("chinese_L-12_H-768_A-12")[0].startswith(google)
    monkeypatch.setenv("BERT_TF_MIRROR", "http://mirror/bert/")
    assert urls("chinese_L-12_H-768_A-12") == \
        ["http://mirror/bert/2018_11_03/chinese_L-12_H-768_A-12.zip"]
    assert urls("bert-base-chinese")[1] == \
        "http://mirror/bert/google-bert/bert-base-chinese/resolve/main/model.safetensors"


def test_fine_tuning_finds_config_and_vocab_of_a_name(server, source, tmp_path):
    from tasks.driver import FineTuneConfig, resolve_paths
    serve_hf(server, source)
    config = resolve_paths(FineTuneConfig(output_dir=str(tmp_path / "run"),
                                          init_checkpoint="bert-base-cased"))
    folder = cached(tmp_path, "google-bert/bert-base-cased")
    assert config.vocab_file == str(folder / "vocab.txt")
    assert config.bert_config_file == str(folder / "config.json")
    assert config.init_checkpoint == "bert-base-cased"   # the run records the name


def test_convert_checkpoint_command_with_a_name(server, source, tmp_path, capsys):
    serve_google(server, source, SMALL)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-m", "bert_tf.convert_checkpoint", "--input", SMALL,
         "--output", str(tmp_path / "out"), "--output_format", "hf"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"{SMALL}: downloading {server.url}/2020_02_20/{SMALL}.zip" in result.stdout
    from safetensors.numpy import load_file
    written = load_file(str(tmp_path / "out" / "model.safetensors"))
    want = load_file(os.path.join(source["hf"], "model.safetensors"))
    assert sorted(written) == sorted(want)
    for name, value in want.items():
        np.testing.assert_array_equal(written[name], value)
    assert (tmp_path / "out" / "vocab.txt").read_text() == "\n".join(VOCAB) + "\n"

    # A mistyped name: one line, exit status 1, before any download or TensorFlow.
    from bert_tf.convert_checkpoint import main
    with pytest.raises(SystemExit) as stop:
        main(["--input", "uncased_L-2_H-128", "--output", str(tmp_path / "x"),
              "--output_format", "hf"])
    assert stop.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: uncased_L-2_H-128: no such file or directory, and not a known checkpoint "
        "name (did you mean uncased_L-2_H-128_A-2?)")
    assert len(server.log) == 1


def test_model_garden_name_downloads_its_tar_gz(server, tmp_path):
    """A Model Garden TF2 tarball by name (here a tiny one written by Model Garden
    itself, tests/fixtures/model_garden/encoder, under the name's top folder): fetched,
    unpacked, read as Model Garden's; a damaged one leaves nothing."""
    fixtures = os.path.join(TESTS, "fixtures", "model_garden")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as t:
        for name in sorted(os.listdir(os.path.join(fixtures, "encoder"))):
            t.add(os.path.join(fixtures, "encoder", name), f"{BASE}/{name}")
        t.add(os.path.join(fixtures, "vocab.txt"), f"{BASE}/vocab.txt")
    name = f"tf_model_garden/{BASE}"
    path = f"/nlp/bert/v3/{BASE}.tar.gz"
    good = buffer.getvalue()
    server.files[path] = good[:len(good) // 2]
    with pytest.raises(registry.CorruptDownloadError, match="is not a valid tar.gz archive"):
        checkpoints.load_encoder(name)
    assert leftovers(tmp_path) == []
    server.files[path] = good
    assert checkpoints.detect_format(registry.resolve_checkpoint(name)) == "model_garden"
    found = np.load(os.path.join(fixtures, "outputs.npz"))
    encoder = checkpoints.load_encoder(name)
    out = encoder({"token_ids": found["input_word_ids"], "segment_ids": found["input_type_ids"],
                   "padding_mask": found["input_mask"]})
    np.testing.assert_allclose(np.asarray(out["pooled_output"]),
                               found["encoder/pooled_output"], atol=1e-5)
    assert leftovers(tmp_path) == [f"checkpoints/{name}/{n}" for n in (
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "vocab.txt")]
