"""extract_features: google's JSON layout, per-token values of the chosen layers equal to
transformers' hidden states on the real MiniLM weights, pair packing and truncation, and
bad input."""

import json
import os
import re
import shutil

import numpy as np
import pytest

from bert_tf import extract_features
from tests import ROOT

LINES = ["The quick brown fox jumps.",
         "Who was Jim Henson ? ||| Jim Henson was a puppeteer",
         "",
         "Zürich liegt am Zürichsee, naïve café."]


@pytest.fixture(scope="module")
def extracted(tmp_path_factory, minilm_dir):
    tmp = tmp_path_factory.mktemp("extract")
    input_file = tmp / "input.txt"
    input_file.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    output_file = str(tmp / "out.jsonl")
    count = extract_features.main([
        "--input_file", str(input_file), "--output_file", output_file,
        "--init_checkpoint", str(minilm_dir), "--layers=-1,-2,-3,-4,0",
        "--max_seq_length", "32", "--batch_size", "3"])
    with open(output_file, encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return count, records, tmp


def test_json_layout_tokens_and_order(extracted, minilm_dir):
    from bert_tf.text.tokenization import BertTokenizer
    count, records, tmp = extracted
    assert count == len(records) == len(LINES)
    assert not [p for p in os.listdir(tmp) if p.endswith(".tmp")]
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"))
    for i, (line, record) in enumerate(zip(LINES, records)):
        assert record["linex_index"] == i
        a, _, b = line.partition(" ||| ")
        expected = ["[CLS]"] + tokenizer.encode_as_tokens([a])[0] + ["[SEP]"]
        if b:
            expected += tokenizer.encode_as_tokens([b])[0] + ["[SEP]"]
        assert [t["token"] for t in record["features"]] == expected
        for token in record["features"]:
            assert [layer["index"] for layer in token["layers"]] == [-1, -2, -3, -4, 0]
            assert all(len(layer["values"]) == 384 for layer in token["layers"])
            # google rounds to 6 decimals.
            values = token["layers"][0]["values"]
            assert values == [round(v, 6) for v in values]
    assert [t["token"] for t in records[2]["features"]] == ["[CLS]", "[SEP]"]


def test_tfrecord_layout_holds_the_json_examples_unrounded(extracted, minilm_dir):
    """--output_format=tfrecord: one tf.train.Example per line, in order, with the JSON
    layout's tokens and layers and its values before rounding (within 5e-7), read alike
    by read_tfrecord_features (NumPy) and tf.data; less than half of JSON's bytes."""
    import tensorflow as tf
    from bert_tf.text.tokenization import BertTokenizer
    _, records, tmp = extracted
    output = str(tmp / "out.tfrecord")
    assert extract_features.main([
        "--input_file", str(tmp / "input.txt"), "--output_file", output,
        "--init_checkpoint", str(minilm_dir), "--layers=-1,-2,-3,-4,0",
        "--max_seq_length", "32", "--batch_size", "3", "--output_format=tfrecord"]) == 4
    vocab = BertTokenizer(os.path.join(minilm_dir, "vocab.txt")).vocab
    got = list(extract_features.read_tfrecord_features(output))
    assert [g["linex_index"] for g in got] == [0, 1, 2, 3]
    for g, record in zip(got, records):
        assert [vocab[t] for t in g["token_ids"]] == [t["token"] for t in record["features"]]
        assert g["layers"] == [5, 4, 3, 2, 0]                    # MiniLM's 6 layers
        want = np.array([[layer["values"] for layer in t["layers"]]
                         for t in record["features"]])
        assert g["values"].shape == want.shape and g["values"].dtype == np.float32
        np.testing.assert_allclose(g["values"], want, rtol=0, atol=5.01e-7)
    names = ("linex_index", "token_ids", "layers", "shape", "values")
    spec = {n: tf.io.VarLenFeature(tf.float32 if n == "values" else tf.int64)
            for n in names}
    for g, data in zip(got, tf.data.TFRecordDataset(output)):
        parsed = {k: tf.sparse.to_dense(v).numpy()
                  for k, v in tf.io.parse_single_example(data, spec).items()}
        assert parsed["token_ids"].tolist() == g["token_ids"].tolist()
        np.testing.assert_array_equal(parsed["values"].reshape(parsed["shape"]), g["values"])
    assert os.path.getsize(output) * 2 < os.path.getsize(tmp / "out.jsonl")


def test_values_match_transformers_hidden_states(extracted, minilm_dir):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from bert_tf.text.tokenization import BertTokenizer
    _, records, _ = extracted
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"))
    model = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()
    for line, record in zip(LINES, records):
        tokens = [t["token"] for t in record["features"]]
        ids = [tokenizer.vocab.index(t) for t in tokens]
        sep = tokens.index("[SEP]")
        segments = [0] * (sep + 1) + [1] * (len(tokens) - sep - 1)
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([segments]),
                        output_hidden_states=True)
        # hidden_states[0] is the embeddings; layer i (0-based) is hidden_states[i + 1].
        hidden = [h[0].numpy() for h in out.hidden_states[1:]]
        for j, layer_index in enumerate([-1, -2, -3, -4, 0]):
            ours = np.array([t["layers"][j]["values"] for t in record["features"]])
            np.testing.assert_allclose(ours, hidden[layer_index], atol=2e-4)


def test_one_layer_and_other_batches_give_the_same_values(extracted, minilm_dir):
    """--layers=-1 (a single layer) works, and batches sorted and cut differently
    (batch 2 instead of 3) give the same per-token values, in input order."""
    _, records, tmp = extracted
    output_file = str(tmp / "one_layer.jsonl")
    assert extract_features.main([
        "--input_file", str(tmp / "input.txt"), "--output_file", output_file,
        "--init_checkpoint", str(minilm_dir), "--layers=-1", "--max_seq_length", "32",
        "--batch_size", "2"]) == len(LINES)
    with open(output_file, encoding="utf-8") as f:
        one = [json.loads(line) for line in f]
    assert [r["linex_index"] for r in one] == list(range(len(LINES)))
    for mine, full in zip(one, records):
        assert [t["token"] for t in mine["features"]] == [t["token"] for t in full["features"]]
        assert all([layer["index"] for layer in t["layers"]] == [-1] for t in mine["features"])
        np.testing.assert_allclose([t["layers"][0]["values"] for t in mine["features"]],
                                   [t["layers"][0]["values"] for t in full["features"]],
                                   atol=1e-5)


def test_lines_end_at_newline_only(tmp_path):
    # google reads with readline(): only "\n" ends a line. Other Unicode separators stay
    # inside the line (only the outer ones are stripped), so linex_index counts "\n" lines.
    path = tmp_path / "lines.txt"
    path.write_bytes("a\u2028b\r\n\u2028\nc ||| d\x0ce ||| f\n\n".encode("utf-8"))
    assert extract_features.read_examples(str(path)) == [
        ("a\u2028b", None), ("", None), ("c ||| d\x0ce", "f"), ("", None)]
    path.write_bytes(b"")
    assert extract_features.read_examples(str(path)) == []


def test_pairs_are_truncated_from_the_longer_side():
    ids, segments = extract_features.pack(list(range(10, 20)), [1, 2, 3], 10, 101, 102)
    # Room for 10 - 3 = 7 pieces: the longer (A) loses its last ones until 4 + 3 fit.
    assert ids == [101, 10, 11, 12, 13, 102, 1, 2, 3, 102]
    assert segments == [0] * 6 + [1] * 4
    ids, segments = extract_features.pack(list(range(10, 20)), None, 6, 101, 102)
    assert ids == [101, 10, 11, 12, 13, 102] and segments == [0] * 6


@pytest.mark.parametrize("flags, message", [
    (["--layers=-1,7"], "index 7 is outside the encoder's 6 layers"),
    (["--layers=last"], "--layers must be comma-separated integers"),
    (["--max_seq_length", "1000"], "exceeds the model's 512 positions"),
])
def test_bad_flags_exit_with_one_line(tmp_path, capsys, minilm_dir, flags, message):
    input_file = tmp_path / "in.txt"
    input_file.write_text("hello\n")
    with pytest.raises(SystemExit) as exit_info:
        extract_features.main(["--input_file", str(input_file), "--output_file",
                               str(tmp_path / "out.jsonl"), "--init_checkpoint",
                               str(minilm_dir)] + flags)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not os.path.exists(tmp_path / "out.jsonl")


def test_missing_input_file(tmp_path, capsys, minilm_dir):
    with pytest.raises(SystemExit):
        extract_features.main(["--input_file", str(tmp_path / "nope.txt"), "--output_file",
                               str(tmp_path / "o.jsonl"), "--init_checkpoint", str(minilm_dir)])
    assert "nope.txt: No such file or directory" in capsys.readouterr().err


@pytest.mark.slow
def test_a_long_text_in_windows_equals_the_windowed_reference(tmp_path, minilm_dir):
    """--doc_stride: a text of several windows gives every piece (not google's cut), each
    with transformers' hidden states of the window where it has the most context, written
    here from run_squad.py's rule on its own; [CLS] from the first window, [SEP] from the
    last. Short lines and pairs give what they give without the flag, byte for byte."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from bert_tf.text.tokenization import BertTokenizer
    long_text = " ".join(json.__doc__.split())             # about 600 pieces of English
    assert "|||" not in long_text
    lines = LINES + [long_text]
    input_file = tmp_path / "input.txt"
    input_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    records = {}
    for name, flags in (("cut", []), ("windows", ["--doc_stride", "10"])):
        out = str(tmp_path / f"{name}.jsonl")
        extract_features.main(["--input_file", str(input_file), "--output_file", out,
                               "--init_checkpoint", str(minilm_dir), "--layers=-1,0",
                               "--max_seq_length", "32", "--batch_size", "3", *flags])
        with open(out, encoding="utf-8") as f:
            records[name] = f.read().splitlines()
    assert records["cut"][:-1] == records["windows"][:-1]
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"))
    pieces = tokenizer.encode([long_text])[0]
    assert len(pieces) > 10 * 30
    windowed = json.loads(records["windows"][-1])["features"]
    assert [t["token"] for t in windowed] == \
        ["[CLS]"] + [tokenizer.vocab[i] for i in pieces] + ["[SEP]"]
    assert len(json.loads(records["cut"][-1])["features"]) == 32
    # The reference: windows of 30 pieces every 10, each run alone through transformers.
    model = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()
    starts, start = [], 0
    while True:
        starts.append(start)
        if start + 30 >= len(pieces):
            break
        start += 10
    hidden = []
    for start in starts:
        ids = [tokenizer.cls_id] + pieces[start:start + 30] + [tokenizer.sep_id]
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
        hidden.append([out.hidden_states[-1][0].numpy(), out.hidden_states[1][0].numpy()])
    rows = [[hidden[0][0][0]], [hidden[0][1][0]]]                  # [CLS]
    for p in range(len(pieces)):
        best, score = None, None
        for w, start in enumerate(starts):
            length = min(30, len(pieces) - start)
            if start <= p < start + length:
                context = min(p - start, start + length - 1 - p) + 0.01 * length
                if score is None or context > score:
                    best, score = w, context
        for k in range(2):
            rows[k].append(hidden[best][k][1 + p - starts[best]])
    last = min(30, len(pieces) - starts[-1]) + 1
    for k in range(2):
        rows[k].append(hidden[-1][k][last])                            # [SEP]
        ours = np.array([t["layers"][k]["values"] for t in windowed])
        np.testing.assert_allclose(ours, np.array(rows[k]), atol=2e-4)


@pytest.mark.slow
def test_beam_engine_writes_the_local_bytes_and_resumes_after_kill_9(tmp_path, random_tiny,
                                                                    capsys, monkeypatch):
    """--runner=DirectRunner with two worker processes (RunInference, the encoder loaded
    once per worker) writes the local engine's bytes, windows of long texts and pairs
    included; a Beam run killed with SIGKILL once a window's part is written is finished
    by the same command with those bytes, and a Beam flag we do not know is refused.
    Input and output at URLs give the same bytes. (The one-layer random encoder: the
    bytes are the point, not the model's size; MiniLM's 384-wide layers made a run's
    JSON ten times larger and each pass seven times the CPU.)"""
    import signal
    import subprocess
    import sys
    import time
    lines = (LINES + [" ".join(json.__doc__.split()[:80])]) * 32  # windows of 32: 5
    input_file = tmp_path / "input.txt"
    input_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    flags = ["--input_file", str(input_file), "--init_checkpoint", random_tiny,
             "--layers=-1,0", "--max_seq_length", "32", "--batch_size", "2",
             "--doc_stride", "12"]
    local = str(tmp_path / "local.jsonl")
    assert extract_features.main([*flags, "--output_file", local]) == len(lines)
    data = open(local, "rb").read()
    beam = str(tmp_path / "beam.jsonl")
    extract_features.main([*flags, "--output_file", beam, "--runner=DirectRunner",
                           "--direct_running_mode=multi_processing",
                           "--direct_num_workers=2"])
    assert open(beam, "rb").read() == data
    assert not os.path.exists(beam + ".tmp.parts") and not os.path.exists(beam + ".tmp")
    killed = str(tmp_path / "killed.jsonl")
    parts = killed + ".tmp.parts"
    argv = [*flags, "--output_file", killed, "--runner=DirectRunner"]
    process = subprocess.Popen([sys.executable, "-m", "bert_tf.extract_features", *argv],
                               cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (os.path.isdir(parts) and any(p.endswith(".jsonl") for p in os.listdir(parts))):
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    kept = sorted(p for p in os.listdir(parts) if p.endswith(".jsonl"))
    assert 1 <= len(kept) < 5
    capsys.readouterr()
    extract_features.main(argv)
    assert f"{len(kept)} of 5 windows already written" in capsys.readouterr().err
    assert open(killed, "rb").read() == data
    with pytest.raises(SystemExit):
        extract_features.main([*flags, "--output_file", str(tmp_path / "x.jsonl"),
                               "--runner=DirectRunner", "--no_such_beam_flag=1"])
    err = capsys.readouterr().err.strip()
    assert err == ("error: --no_such_beam_flag: not a flag of extract_features, nor one of "
                   "Apache Beam's pipeline options")
    assert not os.path.exists(tmp_path / "x.jsonl.tmp.parts")
    # At URLs of a Beam file system (bertfs://, tests/beam_urlfs.py: a stand-in for gs://),
    # on the in-process runner: the same bytes; the local engine refuses a URL.
    from tests import beam_urlfs  # noqa: F401  (registers bertfs:// with Beam)
    bucket = tmp_path / "bucket"
    monkeypatch.setenv("BERT_TF_URLFS_ROOT", str(bucket))
    os.makedirs(bucket / "in")
    (bucket / "in" / "input.txt").write_text("\n".join(lines[:64]) + "\n", encoding="utf-8")
    url_flags = [f if f != str(input_file) else "bertfs://in/input.txt" for f in flags]
    extract_features.main([*url_flags, "--output_file", "bertfs://out/features.jsonl",
                           "--runner=DirectRunner"])          # its first two windows
    assert open(bucket / "out" / "features.jsonl", "rb").read() == b"".join(
        data.splitlines(keepends=True)[:64])
    assert [os.path.relpath(os.path.join(d, f), bucket / "out")      # (an object store
            for d, _, files in os.walk(bucket / "out") for f in files] == [  # has no folders)
        "features.jsonl"]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        extract_features.main([*url_flags, "--output_file", str(tmp_path / "y.jsonl")])
    assert capsys.readouterr().err.strip() == (
        "error: --input_file: bertfs://in/input.txt is a URL: only the Beam engine "
        "(--runner=..., Apache Beam's file systems) reads and writes URLs; give a local path")


def test_a_beam_worker_refuses_an_input_that_changed_since_the_plan(tmp_path, minilm_dir):
    """A Beam worker reads the input again: a file that is no longer the one the run
    fingerprinted stops it with the one line the pipeline's caller re-raises."""
    from bert_tf.base.files import fingerprint
    from bert_tf.data.beam import worker_errors_in_one_line
    from bert_tf.data.errors import InputError
    input_file = tmp_path / "input.txt"
    input_file.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    settings = {"init_checkpoint": str(minilm_dir), "bert_config_file": None,
                "vocab_file": os.path.join(minilm_dir, "vocab.txt"), "do_lower_case": True,
                "input_file": str(input_file), "input_fingerprint": fingerprint(str(input_file)),
                "layers": "-1", "max_seq_length": 32, "batch_size": 2, "doc_stride": None,
                "output_format": "json", "window": 32, "parts": str(tmp_path)}
    assert len(extract_features.Extractor(settings).examples) == len(LINES)
    with open(input_file, "a", encoding="utf-8") as f:
        f.write("one more line\n")
    message = f"--input_file: {input_file} changed while the run read it; run the same " \
              f"command again"
    with pytest.raises(InputError, match="^" + re.escape(message) + "$"):
        extract_features.Extractor(settings)
    # As the runner wraps it, and as the command then says it.
    with pytest.raises(InputError) as caught, worker_errors_in_one_line():
        raise RuntimeError(f"Traceback ...\nInputError: {message} [while running "
                           f"'RunInference/BeamML_RunInference']")
    assert str(caught.value) == message
    with pytest.raises(RuntimeError), worker_errors_in_one_line():
        raise RuntimeError("a worker's own failure")


# --------------------------------------- the same bytes wherever a run starts (issue 68)

@pytest.fixture(scope="module")
def random_tiny(tmp_path_factory, minilm_dir):
    """A one-layer encoder over MiniLM's vocabulary with every weight random, its biases
    and LayerNorm offsets included, as an HF folder. (A fresh model, its biases 0, gave
    the same floats on both graphs in our trials and would hide what these tests look
    for; random biases do not.)"""
    from bert_tf.checkpoints import dispatch as checkpoints
    from bert_tf.base.config import BertConfig
    from bert_tf.base.input_names import INPUT_NAMES
    from bert_tf.models.encoder import BertEncoder
    encoder = BertEncoder.from_config_object(BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64))
    encoder({name: np.ones((1, 4), np.int32) for name in INPUT_NAMES})
    rng = np.random.default_rng(68)
    for weight in encoder.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype(np.float32))
    folder = str(tmp_path_factory.mktemp("random_tiny") / "hf")
    return checkpoints.save_checkpoint(encoder, folder, "hf",
                                       os.path.join(minilm_dir, "vocab.txt"))


def varied_lines(count):
    """`count` lines of 1 to 14 words, pairs among them: batches of many widths, and
    each window of 32 lines (batches of 2) with shorter lines than the next, so a run
    that starts at a later window starts with a batch of another shape."""
    words = " ".join(json.__doc__.split()).replace("|", "").split()
    return [" ".join(words[i % 40:i % 40 + 1 + 2 * (i // 32) + (i * 5) % 10])
            + (f" ||| {words[i % 23]} {words[i % 7]}" if i % 4 == 3 else "")
            for i in range(count)]


@pytest.mark.slow
def test_a_run_started_mid_file_writes_the_bytes_of_a_run_from_line_0(
        random_tiny, tmp_path, capsys, monkeypatch):
    """Records do not depend on where a run starts: a run stopped by SIGTERM after its
    first window and resumed by the same command, and `extract` started at each later
    window, give the bytes of one run from line 0, in both formats. (Keras'
    predict_on_batch computed a run's first batch on a graph traced for its exact shape
    and later ones on a graph of open shapes, floats up to 2e-7 apart here: the resumed
    file differed.)"""
    import signal

    from bert_tf.checkpoints.dispatch import load_encoder
    from bert_tf.text.tokenization import BertTokenizer
    lines = varied_lines(80)                     # batches of 2, windows of 32: 0, 32, 64
    input_file = tmp_path / "input.txt"
    input_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    flags = ["--input_file", str(input_file), "--init_checkpoint", random_tiny,
             "--layers=-1,0", "--max_seq_length=16", "--batch_size=2"]
    for output_format in ("tfrecord", "json"):
        whole = str(tmp_path / f"whole.{output_format}")
        assert extract_features.main([*flags, f"--output_format={output_format}",
                                      "--output_file", whole]) == 80
        resumed = str(tmp_path / f"resumed.{output_format}")
        line = extract_features.FORMATS[output_format]

        def stopping(*args, line=line):          # SIGTERM while the first window runs
            os.kill(os.getpid(), signal.SIGTERM)
            return line(*args)
        argv = [*flags, f"--output_format={output_format}", "--output_file", resumed]
        with monkeypatch.context() as patch:
            patch.setitem(extract_features.FORMATS, output_format, stopping)
            with pytest.raises(SystemExit):
                extract_features.main(argv)
        assert "error: SIGTERM: stopped after 32 of 80 examples" in capsys.readouterr().err
        assert extract_features.main(argv) == 80
        assert "resuming" in capsys.readouterr().err
        assert open(resumed, "rb").read() == open(whole, "rb").read()
    # The library: `extract` from each window, in one process, after other runs.
    encoder = load_encoder(random_tiny)
    tokenizer = BertTokenizer(os.path.join(random_tiny, "vocab.txt"))
    examples = extract_features.read_examples(str(input_file))
    whole = list(extract_features.read_tfrecord_features(str(tmp_path / "whole.tfrecord")))
    for start in (64, 32):
        got = list(extract_features.extract(encoder, tokenizer, examples, [-1, 0], 16, 2,
                                            start=start))
        assert [g[0] for g in got] == list(range(start, 80))
        for (_, tokens, values), record in zip(got, whole[start:]):
            assert tokens == record["token_ids"].tolist()
            np.testing.assert_array_equal(np.stack(values, axis=1), record["values"])


@pytest.mark.slow
def test_beam_writes_the_local_tfrecord_bytes_in_parts_named_by_format(
        random_tiny, tmp_path, monkeypatch):
    """--output_format=tfrecord on Beam: each window's part is named `.tfrecord` (the
    format it holds), and the joined parts are the local engine's bytes (each window's
    first batch was the first call of a new Keras predict function there)."""
    lines = varied_lines(80)
    input_file = tmp_path / "input.txt"
    input_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    flags = ["--input_file", str(input_file), "--init_checkpoint", random_tiny,
             "--layers=-1,0", "--max_seq_length=16", "--batch_size=2",
             "--output_format=tfrecord"]
    local = str(tmp_path / "local.tfrecord")
    extract_features.main([*flags, "--output_file", local])
    beam = str(tmp_path / "beam.tfrecord")
    kept = []
    monkeypatch.setattr(extract_features, "remove_parts",   # the parts, as the run ends
                        lambda parts: os.path.isdir(parts) and kept.extend(os.listdir(parts)))
    extract_features.main([*flags, "--output_file", beam, "--runner=DirectRunner"])
    assert open(beam, "rb").read() == open(local, "rb").read()
    assert sorted(kept) == [f"part-{start:012d}.tfrecord" for start in (0, 32, 64)] + [
        "plan.json"]


def test_refusals_that_need_only_flags_and_files_come_before_tensorflow(tmp_path,
                                                                        minilm_dir):
    """Each refusal a flag or a file decides is said before TensorFlow is imported and
    the model loaded (they waited 12-27 s for both), and leaves the folder as it was."""
    from tests.testing import refusals_before_tensorflow
    checkpoint = tmp_path / "ck"                 # a checkpoint folder, never loaded here
    checkpoint.mkdir()
    for name in ("vocab.txt", "config.json"):
        shutil.copy(os.path.join(minilm_dir, name), checkpoint / name)
    (tmp_path / "in.txt").write_text("hello world\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    (tmp_path / "blank_vocab.txt").write_text("[PAD]\n\n[UNK]\n", encoding="utf-8")
    (tmp_path / "folder").mkdir()

    def argv(*flags, input_file="in.txt", output="out.jsonl"):
        return [f"--input_file={tmp_path / input_file}", f"--init_checkpoint={checkpoint}",
                f"--output_file={output if '://' in output else tmp_path / output}", *flags]
    refusals_before_tensorflow("bert_tf.extract_features", [
        (argv(output="folder"), "Is a directory (expected a file name to write)"),
        (argv(output="in.txt"), "is the input --input_file="),
        (argv(output="in.txt/out.jsonl"), "in.txt is a file, not a folder"),
        (argv(output="ck/out.jsonl"), "lies inside the input --init_checkpoint="),
        (argv(output="bertfs://b/out.jsonl"), "is a URL: only the Beam engine"),
        (argv("--layers=last"), "--layers must be comma-separated integers"),
        (argv("--max_seq_length=2"), "--max_seq_length must be >= 3"),
        (argv("--batch_size=0"), "--batch_size must be a positive"),
        (argv(input_file="empty.txt"), "empty.txt: empty file"),
        (argv(input_file="missing.txt"), "missing.txt: No such file or directory"),
        (argv("--do_lower_case=false"), "an uncased vocabulary"),
        (argv(f"--vocab_file={tmp_path / 'blank_vocab.txt'}"), "line 2 is blank"),
    ], tmp_path)
