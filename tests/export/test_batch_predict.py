"""export.batch_predict's inputs, plans and reruns on a tiny exported classifier: a record
is what its format says (a quoted .csv cell spanning lines is one row, on both engines,
read as the families read it), the project's one rule for text (NUL), inputs by real
path, a finished job, an export version that appeared between a kill and a rerun,
--overwrite, files that hold no row or lack the export's keys, names with commas, an
--output_file that is a folder, Beam's progress, and the refusals that need only the
flags and files, made before TensorFlow is imported (a process where it cannot be).

The refusals run in-process (`tests.testing.refused`: one line, every file as it was).
Tests that load the export are marked slow; the others use a folder that only looks like
an export (their refusals come before anything is loaded).
"""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests import ROOT
from tests.testing import refused, tree_hash

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz.,")
# A valid CSV whose quoted cells hold line ends, commas and doubled quotes (issue 68).
SPANNING_CSV = ('id,text_a\n1,"two\nlines, here"\n2,plain\n3,"say ""hi""\r\nand\n\ngo"\n'
                '4,last one\n')
SPANNING_ROWS = [(2, "two\nlines, here"), (4, "plain"), (5, 'say "hi"\r\nand\n\ngo'),
                 (9, "last one")]


def main(argv):
    from export.batch_predict.__main__ import main as batch_main
    return batch_main(argv)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return str(path)


def read_shards(prefix):
    """(the files' bytes by name, the predicted rows in order)."""
    files = {os.path.basename(p): open(p, "rb").read()
             for p in sorted(glob.glob(glob.escape(prefix) + "-*.jsonl"))}
    rows = [json.loads(line) for name, data in files.items()
            if not name.endswith(".rejected.jsonl") for line in data.splitlines()]
    return files, rows


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """models/clf/1: a tiny random classifier of one text (L=1, H=8), exported."""
    import keras
    from bert_tf.base.config import BertConfig
    from bert_tf.models import run_dir
    from bert_tf.models.encoder import BertEncoder
    from bert_tf.models.task_models import BertClassifier
    from export.saved_model import build_module, export
    root = tmp_path_factory.mktemp("batch_predict")
    vocab = write(root / "vocab.source.txt", "\n".join(VOCAB) + "\n")
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=8, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=16,
                        max_position_embeddings=16, initializer_range=0.5)
    keras.utils.set_random_seed(0)
    run = str(root / "run")
    os.makedirs(run)
    BertClassifier(BertEncoder.from_config_object(config), 2).save_weights(
        os.path.join(run, "last.weights.h5"))
    run_dir.save_task_files(run, "glue", {
        "task": "glue", "task_name": "custom", "labels": ["neg", "pos"],
        "regression": False, "num_classes": 2, "text_inputs": ["text_a"], "dropout": None,
        "max_seq_length": 16, "do_lower_case": True}, config, vocab)
    models = str(root / "models" / "clf")
    export(build_module("classification", run, None, True), models)
    # The module's batch_predict runs deserialize the unchanged export once.
    from tests.task_runs import shared_loads
    with shared_loads():
        yield models


@pytest.fixture
def fake_export(tmp_path):
    """A folder that looks like an export to the checks before loading (a version with a
    saved_model.pb that is no SavedModel): what they refuse needs nothing more."""
    os.makedirs(tmp_path / "models" / "clf" / "1")
    write(tmp_path / "models" / "clf" / "1" / "saved_model.pb", b"\x0a\x01")
    return str(tmp_path / "models" / "clf")


def answers(model_dir, texts):
    """The signature's answers, one text a call."""
    import tensorflow as tf
    signature = tf.saved_model.load(os.path.join(model_dir, "1")).signatures[
        "serving_default"]
    return [{k: getattr(v.numpy()[0], "tolist", lambda: v.numpy()[0])()
             for k, v in signature(text_a=tf.constant([t])).items()} for t in texts]


# ----------------------------------------------------------------------------- records

@pytest.mark.slow
def test_a_csv_record_spanning_lines_is_one_row_named_by_its_first_line(classifier,
                                                                       tmp_path, capsys):
    """A quoted .csv cell with line ends (CRLF too), commas and doubled quotes is one row,
    its `line` the physical line it starts on, whatever the shard boundaries (shards
    start at records, not lines); the rows and lines are the ones the fine-tuning readers
    read from the same file (one reader per format); 0 rejected. A quote never closed is
    refused in one line naming where it opens."""
    source = write(tmp_path / "spanning.csv", SPANNING_CSV)
    want = answers(classifier, [text for _, text in SPANNING_ROWS])
    for shard_lines in (1, 3, 10):
        prefix = str(tmp_path / f"out{shard_lines}" / "p")
        summary = main([f"--model_dir={classifier}", f"--input_file={source}",
                        f"--output_file={prefix}", f"--shard_lines={shard_lines}"])
        assert (summary["predicted"], summary["rejected"], summary["rows_read"]) == (4, 0, 4)
        files, rows = read_shards(prefix)
        assert not [n for n in files if "rejected" in n]
        assert [(r["file"], r["line"]) for r in rows] == [(source, n) for n, _ in
                                                          SPANNING_ROWS]
        for row, answer in zip(rows, want):
            assert row["outputs"]["label"] == answer["label"].decode()
            assert row["outputs"]["probabilities"] == pytest.approx(
                answer["probabilities"], abs=1e-6)
    broken = write(tmp_path / "broken.csv", 'id,text_a\n1,ok\n2,"never closed\n3,x\n')
    refused(main, [f"--model_dir={classifier}", f"--input_file={broken}",
                   f"--output_file={tmp_path / 'broken' / 'p'}"], capsys,
            [f"--input_file: {broken}:3: a quoted cell of the record starting here is "
             f"never closed"], str(tmp_path))


def test_the_record_reader_starts_anywhere_a_record_starts(tmp_path):
    """bert_tf/base/text_records.py: each record's line, offset and end; a reader started
    at any record's offset and line reads the same records as one from the start (what
    a shard does); .tsv records are lines, a BOM dropped. The fine-tuning readers read
    the same rows and lines (tasks/rows.py, SWAG's reader)."""
    import io
    from bert_tf.base.text_records import records
    from tasks.families.swag.task import read_swag_csv
    from tasks.rows import RowReport, table_rows
    source = write(tmp_path / "spanning.csv", SPANNING_CSV)
    family = [(where, text) for where, text, _, _ in table_rows(
        source, ".csv", "text_a", None, None, True, RowReport(source))]
    assert family == [(f"{source}:{n}", t) for n, t in SPANNING_ROWS]
    swag = write(tmp_path / "swag.csv", "sent1,sent2,ending0,ending1,ending2,ending3,label\n"
                 'a,b,"c\nd",e,f,g,1\nh,i,j,k,l,m,0\n')
    examples, _ = read_swag_csv(swag)
    assert [(e.guid, e.endings[0]) for e in examples] == [(f"{swag}:2", "c\nd"),
                                                          (f"{swag}:4", "j")]
    data = ("\ufeff" + SPANNING_CSV).encode("utf-8")
    whole = list(records(io.BytesIO(data), ".csv", "x.csv"))
    assert [(r.line, r.value) for r in whole] == [(1, ["id", "text_a"])] + [
        (n, [str(i), t]) for i, (n, t) in enumerate(SPANNING_ROWS, 1)]
    assert [r.end for r in whole[:-1]] == [r.offset for r in whole[1:]]
    assert whole[-1].end == len(data)
    for i, record in enumerate(whole):
        assert list(records(io.BytesIO(data), ".csv", "x.csv", offset=record.offset,
                            line=record.line)) == whole[i:]
    tsv = list(records(io.BytesIO(b"\xef\xbb\xbfa\tb\r\n\nc\"d\te\n"), ".tsv", "x.tsv"))
    assert [(r.line, r.value) for r in tsv] == [(1, ["a", "b"]), (2, []), (3, ['c"d', "e"])]


def test_a_line_holding_nul_is_refused_as_extract_features_refuses_it(fake_export,
                                                                        tmp_path, capsys):
    """A NUL byte (a UTF-16 or binary file) is not text: the project's one rule
    (files.check_no_nul, which extract_features and the fine-tuning readers use),
    refused in one line naming the file, line and byte, before anything is written; the
    same line in a .csv record that spans lines names the line that holds it."""
    from bert_tf.base.files import read_text
    source = write(tmp_path / "nul.txt", b"abc\nde\x00f\n")
    with pytest.raises(ValueError) as rule:
        read_text(source)
    refused(main, [f"--model_dir={fake_export}", f"--input_file={source}",
                   f"--output_file={tmp_path / 'out' / 'p'}"], capsys,
            [f"error: --input_file: {rule.value}", f"{source}:2: NUL byte (byte 3 of the "
                                                   f"line"], str(tmp_path))
    spanning = write(tmp_path / "nul.csv", b'id,text_a\n1,"x\ny\x00"\n')
    refused(main, [f"--model_dir={fake_export}", f"--input_file={spanning}",
                   f"--output_file={tmp_path / 'out' / 'p'}"], capsys,
            [f"{spanning}:3: NUL byte (byte 2 of the line"], str(tmp_path))


def test_a_file_with_no_row_is_refused(fake_export, tmp_path, capsys):
    """An empty input (0 bytes), a .csv with its header alone and a .jsonl of blank lines
    are refused in one line naming the file, before a byte is written."""
    cases = {"empty.txt": (b"", "is empty (0 bytes): nothing to predict"),
             "header.csv": (b"id,text_a\n", "holds no row to predict (only its header)"),
             "blank.jsonl": (b"\n \n", "holds no row to predict (only blank lines)")}
    for name, (data, reason) in cases.items():
        source = write(tmp_path / name, data)
        refused(main, [f"--model_dir={fake_export}", f"--input_file={source}",
                       f"--output_file={tmp_path / 'out' / 'p'}"], capsys,
                [f"error: --input_file: {source} {reason}"], str(tmp_path))


def test_an_output_file_that_is_a_folder_is_refused(fake_export, tmp_path, capsys):
    """--output_file=preds/ (or a folder that is there) names no file: refused in one
    line saying what to give, before anything is loaded."""
    source = write(tmp_path / "in.txt", "a text\n")
    os.makedirs(tmp_path / "there")
    for output in (f"{tmp_path}/preds/", str(tmp_path / "there")):
        refused(main, [f"--model_dir={fake_export}", f"--input_file={source}",
                       f"--output_file={output}"], capsys,
                [f"--output_file={output} is a folder; expected the prefix of the "
                 f"output's file names (e.g. --output_file={output.rstrip('/')}/preds"],
                str(tmp_path))


def test_a_path_with_commas_that_exists_is_one_name(tmp_path):
    """file_patterns' rule, every command's: a path that exists as written is one name,
    commas included, also inside a comma-separated list; names that are no path are
    split at their commas as before."""
    from bert_tf.base import file_patterns
    comma = write(tmp_path / "scores,2020.txt", "x\n")
    plain = write(tmp_path / "more.txt", "y\n")
    assert file_patterns.split_patterns(comma) == [comma]
    assert file_patterns.split_patterns(f"{comma}, {plain},{comma}") == [comma, plain, comma]
    assert file_patterns.split_patterns(f"{tmp_path}/nope,x.txt") == [
        f"{tmp_path}/nope", "x.txt"]
    assert file_patterns.expand_file_patterns(f"{plain},{comma}") == sorted([comma, plain])


@pytest.mark.slow
def test_an_input_named_with_a_comma_is_read(classifier, tmp_path, capsys):
    """A path that exists as written is that file, commas included (file_patterns'
    rule, as create_pretraining_data reads it); two files given with a comma are two."""
    source = write(tmp_path / "scores,2020.txt", "a text\nanother\n")
    other = write(tmp_path / "more.txt", "third\n")
    summary = main([f"--model_dir={classifier}", f"--input_file={source}",
                    f"--output_file={tmp_path / 'out' / 'p'}"])
    assert summary["predicted"] == 2
    assert [r["file"] for r in read_shards(str(tmp_path / "out" / "p"))[1]] == [source] * 2
    summary = main([f"--model_dir={classifier}", f"--input_file={source},{other}",
                    f"--output_file={tmp_path / 'two' / 'p'}"])
    assert summary["predicted"] == 3 and summary["shards"] == 2


# ----------------------------------------------------------------------------- reruns

@pytest.mark.slow
def test_reruns_resume_under_other_spellings_and_say_what_finishes_them(
        classifier, tmp_path, capsys, monkeypatch):
    """A job stopped after some shards (one removed, as a kill leaves it) and rerun with
    the input under another spelling (absolute path, a symlink) resumes: the same file
    by real path is the same input, and its rows keep the spelling the job started with.
    A rerun of the finished job says it is complete (no "None texts/s"), loads nothing
    and changes nothing. A new export version between a kill and the rerun is refused
    naming the version the job started with and the flag that finishes it, which does."""
    monkeypatch.chdir(tmp_path)
    models = str(tmp_path / "models" / "clf")
    shutil.copytree(os.path.join(classifier, "1"), os.path.join(models, "1"))
    write("in.txt", "one\ntwo\nthree\nfour\n")
    os.symlink("in.txt", "alias.txt")
    flags = [f"--model_dir={models}", "--shard_lines=1"]
    main([*flags, "--input_file=in.txt", "--output_file=whole/p"])
    whole = read_shards("whole/p")[0]
    main([*flags, "--input_file=in.txt", "--output_file=out/p"])
    for spelling in (str(tmp_path / "in.txt"), "alias.txt"):
        os.remove("out/p-00002-of-00004.jsonl")
        summary = main([*flags, f"--input_file={spelling}", "--output_file=out/p"])
        assert (summary["shards_kept"], summary["shards_written"]) == (3, 1)
        assert read_shards("out/p")[0] == whole
    before = tree_hash(str(tmp_path))
    capsys.readouterr()
    summary = main([*flags, "--input_file=in.txt", "--output_file=out/p"])
    out = capsys.readouterr().out
    assert "out/p: already complete (4 shards: 4 rows predicted, 0 rejected, by an " \
           "earlier run); nothing to do" in out and "None" not in out
    assert summary["shards_written"] == 0 and tree_hash(str(tmp_path)) == before
    # A new version appears between a kill and the rerun.
    os.remove("out/p-00003-of-00004.jsonl")
    shutil.copytree(os.path.join(models, "1"), os.path.join(models, "2"))
    write(os.path.join(models, "2", "assets.extra", "note.txt"), "another export\n")
    refused(main, [*flags, "--input_file=in.txt", "--output_file=out/p"], capsys,
            [f"--model_dir={models}: the job of out/p-plan.json started with its version "
             f"1, and 2 is the highest now: pass --model_dir={models}/1 to finish that "
             f"job, pass --overwrite to replace its output"], str(tmp_path))
    summary = main([f"--model_dir={models}/1", "--shard_lines=1", "--input_file=in.txt",
                    "--output_file=out/p"])
    assert summary["shards_written"] == 1 and read_shards("out/p")[0] == whole


@pytest.mark.slow
def test_overwrite_replaces_another_jobs_output_whole(classifier, tmp_path, capsys):
    """Another job's output (other inputs, other settings; finished or not) is replaced
    only with --overwrite: without it the refusal names the flag and changes nothing;
    with it the earlier job's files are gone (its other number of shards too) and the
    new job's are there, nothing under a temporary name. Files of the output's names
    without the plan of a job are not taken for this job's shards."""
    first = write(tmp_path / "first.txt", "a\nb\nc\n")
    second = write(tmp_path / "second.txt", "d\ne\n")
    prefix = str(tmp_path / "out" / "p")
    flags = [f"--model_dir={classifier}", "--shard_lines=1", f"--output_file={prefix}"]
    main([*flags, f"--input_file={first}"])
    for other in ([f"--input_file={second}"], [f"--input_file={first}", "--bad_lines=error"]):
        refused(main, [*flags, *other], capsys, ["pass --overwrite to replace its output"],
                str(tmp_path))
    summary = main([*flags, f"--input_file={second}", "--overwrite"])
    assert summary["shards_written"] == 2 and summary["shards_kept"] == 0
    assert sorted(os.listdir(tmp_path / "out")) == [
        "p-00000-of-00002.jsonl", "p-00001-of-00002.jsonl", "p-plan.json", "p-summary.json"]
    assert [r["file"] for r in read_shards(prefix)[1]] == [second] * 2
    # A shard left without its plan (the plan removed by hand) is not this job's.
    os.remove(prefix + "-plan.json")
    refused(main, [*flags, f"--input_file={second}"], capsys,
            [f"{prefix}-00000-of-00002.jsonl is there without the plan of the job that "
             f"wrote it; pass --overwrite"], str(tmp_path))


@pytest.mark.slow
def test_a_jsonl_without_the_exports_keys_is_refused_before_loading(classifier, tmp_path,
                                                                     capsys):
    """A .jsonl whose first object lacks the export's keys would reject every row: it
    is refused up front in one line naming the file, the keys found and the keys
    expected, as a .csv header without the columns is, and so is one with no JSON object
    at all; later rows without the keys are still rejected one by one."""
    source = write(tmp_path / "keys.jsonl", '\nnot json\n{"text": "x", "id": 1}\n')
    refused(main, [f"--model_dir={classifier}", f"--input_file={source}",
                   f"--output_file={tmp_path / 'out' / 'p'}"], capsys,
            [f"--input_file: {source}:3: the first JSON object has the keys id, text; the "
             f"export takes text_a (no text_a)"], str(tmp_path))
    arrays = write(tmp_path / "arrays.jsonl", '["x"]\n["y"]\n')
    refused(main, [f"--model_dir={classifier}", f"--input_file={arrays}",
                   f"--output_file={tmp_path / 'out' / 'p'}"], capsys,
            [f"--input_file: {arrays}: no line is a JSON object (one a line, keyed by the "
             f"export's inputs: text_a)"], str(tmp_path))
    good = write(tmp_path / "good.jsonl", '{"text_a": "x"}\n{"text": "y"}\n')
    summary = main([f"--model_dir={classifier}", f"--input_file={good}",
                    f"--output_file={tmp_path / 'good' / 'p'}"])
    assert (summary["predicted"], summary["rejected"]) == (1, 1)


@pytest.mark.slow
def test_refusals_of_flags_and_files_come_before_tensorflow(classifier, tmp_path):
    """Each refusal that needs only the flags and files (a plan of another run, an
    output folder, a .csv header or .jsonl keys that are not the export's, a new export
    version, an empty file, a NUL byte) is made in a process where TensorFlow cannot be
    imported: before it is, and before the export loads."""
    source = write(tmp_path / "in.txt", "a\nb\n")
    prefix = str(tmp_path / "out" / "p")
    flags = [f"--model_dir={classifier}", f"--output_file={prefix}"]
    main([*flags, f"--input_file={source}"])
    cases = [
        ([*flags, f"--input_file={source}", "--max_batch_size=3"],
         "is the plan of a run with another max_batch_size (--max_batch_size=32 there, "
         "3 now)"),
        ([f"--model_dir={classifier}", f"--input_file={source}",
          f"--output_file={tmp_path}/"], "is a folder; expected the prefix"),
        ([f"--model_dir={classifier}", f"--input_file="
          f"{write(tmp_path / 'h.csv', 'id,text' + chr(10) + '1,x' + chr(10))}",
          f"--output_file={tmp_path / 'h' / 'p'}"], "the header has no column text_a"),
        ([f"--model_dir={classifier}", f"--input_file="
          f"{write(tmp_path / 'k.jsonl', json.dumps({'text': 'x'}) + chr(10))}",
          f"--output_file={tmp_path / 'k' / 'p'}"], "the first JSON object has the keys"),
        ([f"--model_dir={classifier}", f"--input_file={write(tmp_path / 'e.txt', '')}",
          f"--output_file={tmp_path / 'e' / 'p'}"], "is empty (0 bytes)"),
    ]
    code = ("import sys; sys.modules['tensorflow'] = None; "
            "from export.batch_predict.__main__ import main; main(sys.argv[1:])")
    for argv, expect in cases:
        before = tree_hash(str(tmp_path))
        done = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and len(lines) == 1, done.stderr
        assert lines[0].startswith("error: ") and expect in lines[0], lines[0]
        assert tree_hash(str(tmp_path)) == before
    # A finished job's rerun loads nothing either.
    done = subprocess.run([sys.executable, "-c", code, *flags, f"--input_file={source}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "already complete" in done.stdout, done.stderr


# ----------------------------------------------------------------------------- Beam

@pytest.mark.slow
def test_beam_reads_records_that_span_lines_and_shows_progress(classifier, tmp_path,
                                                               capsys):
    """--runner=DirectRunner (two worker threads): shards that start inside the file at
    records spanning lines are read from the plan's offsets, giving the local engine's
    bytes; the run prints progress lines as its shards are written, as the local
    engine does."""
    pytest.importorskip("apache_beam")
    source = write(tmp_path / "spanning.csv", SPANNING_CSV * 3)
    flags = [f"--model_dir={classifier}", f"--input_file={source}", "--shard_lines=2"]
    main([*flags, f"--output_file={tmp_path / 'local' / 'p'}"])
    capsys.readouterr()
    summary = main([*flags, f"--output_file={tmp_path / 'beam' / 'p'}",
                    "--runner=DirectRunner", "--direct_running_mode=multi_threading",
                    "--direct_num_workers=2"])
    out = capsys.readouterr().out
    local = read_shards(str(tmp_path / "local" / "p"))
    assert read_shards(str(tmp_path / "beam" / "p")) == local
    assert summary["predicted"] == 14 and summary["rejected"] == 0
    # Each copy of the file is 9 lines; the copies after the first start with their
    # header line, a row of text there.
    assert [r["line"] for r in local[1]] == [2, 4, 5, 9, 10, 11, 13, 14, 18, 19, 20, 22,
                                             23, 27]
    progress = [line for line in out.splitlines() if line.startswith("predicting: ")]
    assert progress and progress[-1].startswith("predicting: 14/14 row (100%)"), out
