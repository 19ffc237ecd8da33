"""create_pretraining_data --runner (Apache Beam, bert_tf/data/beam.py): on the
DirectRunner in multi-process mode it writes shards byte-identical to the local engine's,
and the same summary, on several input files and shards with whole-word and n-gram
masking; inputs, vocabulary and shards at URLs (Beam's file systems: gs:// on Dataflow)
give the same bytes; bad input is the local engine's one line, and a refused run leaves no
file."""

import glob
import json
import os
import shutil

import pytest

pytest.importorskip("apache_beam")

from bert_tf import create_pretraining_data as cpd  # noqa: E402
from tests import ROOT

BEAM = ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
        "--direct_num_workers=2"]
# What depends on the run's speed, not on its output.
TIMING = ("seconds", "examples_per_second")


@pytest.fixture(scope="module")
def corpus_files(stdlib_corpus, tmp_path_factory):
    """Three input files of real text (standard-library docstrings), cut at documents."""
    folder = tmp_path_factory.mktemp("beam_corpus")
    with open(stdlib_corpus, encoding="utf-8") as f:
        documents = f.read(600_000).split("\n\n")[:-1]
    paths = []
    for i in range(3):
        path = folder / f"part{i}.txt"
        path.write_text("\n\n".join(documents[i::3]) + "\n", encoding="utf-8")
        paths.append(str(path))
    return paths


def run(corpus_files, vocab, output, *extra):
    return cpd.main([f"--input_file={','.join(corpus_files)}", f"--output_file={output}",
                     f"--vocab_file={vocab}", "--num_shards=3", "--block_size_kb=48",
                     "--dupe_factor=2", "--do_whole_word_mask", "--max_ngram_size=3",
                     "--quiet", *extra])


@pytest.fixture(scope="module")
def local_run(corpus_files, minilm_dir, tmp_path_factory):
    """The local engine's shards of the corpus (their folder) and its summary."""
    folder = tmp_path_factory.mktemp("beam_local")
    summary = run(corpus_files, os.path.join(minilm_dir, "vocab.txt"), folder / "train",
                  "--num_workers=2")
    assert summary["examples"] > 2000 and len(summary["shards"]) == 3
    return folder, summary


def comparable(summary, places=False):
    """The summary without timings and shard folders (and, with `places`, without where
    the inputs and the vocabulary are)."""
    summary = json.loads(json.dumps({k: v for k, v in summary.items() if k not in TIMING}))
    for shard in summary["shards"]:
        shard["path"] = os.path.basename(shard["path"])
    summary["config"] = {k: v for k, v in summary["config"].items() if k != "shards"}
    if places:
        summary["config"]["vocab"].pop("path")
        for entry in summary["config"]["inputs"]:
            entry.pop("path"), entry.pop("mtime_ns")
    return summary


def assert_same_shards(folder, local_folder):
    assert sorted(os.listdir(folder)) == sorted(os.listdir(local_folder))
    for name in sorted(os.listdir(local_folder)):
        if name.endswith(".summary.json"):
            continue
        with open(os.path.join(local_folder, name), "rb") as a, \
                open(os.path.join(folder, name), "rb") as b:
            assert a.read() == b.read(), name


def test_beam_writes_the_local_engines_bytes_and_summary(corpus_files, minilm_dir, local_run,
                                                         tmp_path, capsys):
    vocab = os.path.join(minilm_dir, "vocab.txt")
    local_folder, local = local_run
    beam = run(corpus_files, vocab, tmp_path / "beam" / "train", *BEAM)
    assert "log" not in capsys.readouterr().out      # Beam's log is named only if kept
    assert_same_shards(tmp_path / "beam", local_folder)
    assert comparable(beam) == comparable(local)
    with open(tmp_path / "beam" / "train.summary.json", encoding="utf-8") as f:
        assert comparable(json.load(f)) == comparable(local)
    # A rerun keeps the complete shards (nothing to run).
    again = run(corpus_files, vocab, tmp_path / "beam" / "train", *BEAM)
    assert again["skipped_shards"] == 3 and again["examples_this_run"] == 0


def test_beam_reads_and_writes_urls(corpus_files, minilm_dir, local_run, tmp_path,
                                    monkeypatch, capsys):
    """The corpus (a glob), the vocabulary, the shards and the summary at URLs of a Beam
    file system (bertfs://, a stand-in for gs://: tests/beam_urlfs.py), on worker
    processes: the local engine's bytes and summary, nothing else left in the "bucket", a
    rerun keeps the shards. The local engine refuses a URL, and Beam a scheme it has no
    file system for, in one line, before writing anything."""
    from tests import beam_urlfs  # noqa: F401  (registers bertfs:// with Beam)
    bucket = tmp_path / "bucket"
    monkeypatch.setenv("BERT_TF_URLFS_ROOT", str(bucket))
    os.makedirs(bucket / "corpus")
    for path in corpus_files:
        shutil.copy(path, bucket / "corpus")
    shutil.copy(os.path.join(minilm_dir, "vocab.txt"), bucket / "vocab.txt")
    local_folder, local = local_run
    urls = ["bertfs://corpus/part*.txt"], "bertfs://vocab.txt", "bertfs://shards/train"
    beam = run(*urls, *BEAM)
    assert_same_shards(bucket / "shards", local_folder)
    assert beam["shards"][0]["path"] == "bertfs://shards/train-00000-of-00003"
    assert comparable(beam, places=True) == comparable(local, places=True)
    assert beam["config"]["inputs"][0]["path"] == "bertfs://corpus/part0.txt"
    with open(bucket / "shards" / "train.summary.json", encoding="utf-8") as f:
        assert json.load(f) == beam
    assert sorted(os.listdir(bucket)) == ["corpus", "shards", "vocab.txt"]
    again = run(*urls, *BEAM)
    assert again["skipped_shards"] == 3 and again["examples_this_run"] == 0
    capsys.readouterr()

    def refused(*args):
        with pytest.raises(SystemExit) as exit_info:
            run(*args)
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 1 and len(err) == 1, err
        return err[0]
    assert refused(*urls[:2], "bertfs://other/train") == (
        "error: --input_file: bertfs://corpus/part*.txt is a URL: only the Beam engine "
        "(--runner=..., Apache Beam's file systems) reads and writes URLs; give a local path")
    assert refused(*urls[:2], "nope://bucket/train", *BEAM) == (
        "error: --output_file: nope://bucket/train: Apache Beam has no file system for "
        "nope://")
    assert refused(*urls[:2], "bertfs://corpus/part0.txt", "--num_shards=1", *BEAM) == (
        "error: --output_file=bertfs://corpus/part0.txt is the input "
        "--input_file=bertfs://corpus/part0.txt: writing it would destroy the input; "
        "choose another --output_file")
    assert sorted(os.listdir(bucket)) == ["corpus", "shards", "vocab.txt"]
    assert sorted(os.listdir(bucket / "corpus")) == ["part0.txt", "part1.txt", "part2.txt"]


@pytest.mark.parametrize("case", ["missing", "empty", "latin1"])
def test_beam_bad_input_is_the_local_engines_one_line(case, minilm_dir, tmp_path, capsys):
    vocab = os.path.join(minilm_dir, "vocab.txt")
    source = tmp_path / "in.txt"
    if case == "empty":
        source.write_bytes(b"")
    elif case == "latin1":
        source.write_bytes(("Caf\xe9 cr\xe8me br\xfbl\xe9e, na\xefve fa\xe7ade.\n" * 400)
                           .encode("latin-1"))
    lines = []
    for engine in ([], BEAM):
        out = tmp_path / ("beam" if engine else "local")
        with pytest.raises(SystemExit) as exit_info:
            cpd.main([f"--input_file={source}", f"--output_file={out / 'train'}",
                      f"--vocab_file={vocab}", "--quiet", *engine])
        assert exit_info.value.code == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --input_file"), err
        lines.append(err[0])
        assert not out.exists() or os.listdir(out) == [], case
    assert lines[0] == lines[1]


def test_an_unknown_flag_after_ours_is_refused(minilm_dir, tmp_path, capsys):
    """Beam drops a pipeline option it does not know with a warning in its log; a misspelt
    one (here --direct_num_worker) would quietly change the run, so it is refused in one
    line, before any file is written."""
    source = tmp_path / "in.txt"
    source.write_text("One sentence here.\nAnother one.\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        cpd.main([f"--input_file={source}", f"--output_file={tmp_path / 'out' / 'train'}",
                  f"--vocab_file={os.path.join(minilm_dir, 'vocab.txt')}", "--quiet",
                  "--runner=DirectRunner", "--direct_num_worker=2"])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --direct_num_worker: not a flag of create_pretraining_data, nor one of "
        "Apache Beam's pipeline options"]
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]


def _beam_workers():
    """Pids of Beam's SDK worker processes on this machine."""
    found = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(cmdline, "rb") as f:
                if b"sdk_worker_main" in f.read():
                    found.append(int(cmdline.split("/")[2]))
        except OSError:
            continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_beam_stopped_or_killed_resumes_and_leaves_nothing(how, corpus_files, minilm_dir,
                                                           local_run, tmp_path):
    """SIGTERM or Ctrl-C while the pipeline runs: one line, exit status 1, the part files,
    the lock and Beam's temporary files (in TMPDIR) gone. kill -9 once shards are being
    written: the rerun keeps those that are complete (their entries say they were made
    with this config) and ends with the local engine's bytes; the killed run's own
    temporary folder goes at the next run."""
    import signal
    import subprocess
    import sys
    import time
    vocab = os.path.join(minilm_dir, "vocab.txt")
    local_folder, _ = local_run
    out, tmp = tmp_path / "beam", tmp_path / "tmp"
    tmp.mkdir()
    argv = [f"--input_file={','.join(corpus_files)}", f"--output_file={out / 'train'}",
            f"--vocab_file={vocab}", "--num_shards=3", "--block_size_kb=48",
            "--dupe_factor=2", "--do_whole_word_mask", "--max_ngram_size=3", "--quiet",
            *BEAM]
    env = dict(os.environ, TMPDIR=str(tmp),
               PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "bert_tf.create_pretraining_data",
                             *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    # SIGTERM / SIGINT while blocks run; kill -9 once a shard is complete.
    ready = (lambda names: any(".tmp-part" in n for n in names)) if how != "SIGKILL" else \
        (lambda names: any(n.endswith("-of-00003") for n in names))
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline and \
            not ready(os.listdir(out) if out.exists() else []):
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be stopped"
    complete = sorted(n for n in os.listdir(out) if n.endswith("-of-00003"))
    proc.send_signal(getattr(signal, how))
    _, err = proc.communicate(timeout=120)
    if how == "SIGKILL":
        deadline = time.time() + 60
        while _beam_workers() and time.time() < deadline:   # orphans end with their
            time.sleep(0.2)                                  # parent's channel
        assert [n for n in os.listdir(tmp) if n.startswith("create_pretraining_data-beam-")]
    else:
        assert proc.returncode == 1
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {how}: stopped; ") and \
            lines[0].endswith("of 3 shard(s) complete, run the same command again to "
                              "resume"), err
        left = os.listdir(out) if out.exists() else []
        assert not [n for n in left if ".tmp" in n or n.endswith(".lock")], left
        assert os.listdir(tmp) == []
    env_tmp = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp)
    try:
        import tempfile
        tempfile.tempdir = None
        summary = cpd.main(argv)
    finally:
        if env_tmp is None:
            os.environ.pop("TMPDIR")
        else:
            os.environ["TMPDIR"] = env_tmp
        tempfile.tempdir = None
    if how == "SIGKILL":
        assert summary["skipped_shards"] >= len(complete) >= 1
    assert_same_shards(out, local_folder)
    assert os.listdir(tmp) == []
