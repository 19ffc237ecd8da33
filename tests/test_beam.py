"""create_pretraining_data --runner (Apache Beam, bert_tf/pretraining_data/beam.py): on the
DirectRunner in multi-process mode it writes shards byte-identical to the local engine's,
and the same summary, on several input files and shards with whole-word and n-gram
masking; bad input is the local engine's one line, and a refused run leaves no file."""

import json
import os

import pytest

pytest.importorskip("apache_beam")

from bert_tf import create_pretraining_data as cpd  # noqa: E402

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


def test_beam_writes_the_local_engines_bytes_and_summary(corpus_files, minilm_dir, tmp_path):
    vocab = os.path.join(minilm_dir, "vocab.txt")
    local = run(corpus_files, vocab, tmp_path / "local" / "train", "--num_workers=2")
    beam = run(corpus_files, vocab, tmp_path / "beam" / "train", *BEAM)
    assert local["examples"] > 2000 and len(local["shards"]) == 3
    for name in sorted(os.listdir(tmp_path / "local")):
        if name.endswith(".summary.json"):
            continue
        with open(tmp_path / "local" / name, "rb") as a, \
                open(tmp_path / "beam" / name, "rb") as b:
            assert a.read() == b.read(), name
    assert sorted(os.listdir(tmp_path / "beam")) == sorted(os.listdir(tmp_path / "local"))

    def comparable(summary):
        summary = {k: v for k, v in summary.items() if k not in TIMING}
        for shard in summary["shards"]:
            shard["path"] = os.path.basename(shard["path"])
        summary["config"] = {k: v for k, v in summary["config"].items() if k != "shards"}
        return summary
    assert comparable(beam) == comparable(local)
    with open(tmp_path / "beam" / "train.summary.json", encoding="utf-8") as f:
        assert comparable(json.load(f)) == comparable(local)
    # A rerun keeps the complete shards (nothing to run).
    again = run(corpus_files, vocab, tmp_path / "beam" / "train", *BEAM)
    assert again["skipped_shards"] == 3 and again["examples_this_run"] == 0


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
