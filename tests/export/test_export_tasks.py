"""Every fine-tuned family's export together (classification, swag, ner, squad; the
windowed classifiers and multi-label): a fresh process with only tensorflow +
tensorflow_text after the directories moved, a C program on the TensorFlow C API that
loads and runs every export as TF Serving does (no Python), versions written at once or
killed midway, docs/serving.md's requests and the warm-up files, and `export.batch_predict`
on every export kind (the signature's answers, dead-letter rows, kill -9 and rerun,
refusals) and on Beam's DirectRunner.

The runs are tiny random encoders (L=2, H=32) with a small vocab, saved the way a
fine-tuning run leaves them (tests/task_runs.py); conftest.py exports each once per test
session (a SavedModel save costs seconds). Each family's own signatures are tested in its
folder (tests/families/<family>/test_serving.py)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.models.task_models import BertClassifier
from export.saved_model import build_module, export, main
from tests import ROOT, TESTS
from tests.task_runs import (CONTEXTS, CONTEXTS_SQ, ENDINGS, HOSTILE, HOSTILE_BYTES,
                             NER_TEXTS, QUESTIONS, TEXTS_A, TEXTS_B, VOCAB,
                             assert_same_answers, entity_rows, loaded_export, make_run_dir,
                             python_classify, python_entities, python_squad, python_swag,
                             shared_loads)


@pytest.fixture(autouse=True, scope="module")
def one_load_per_export():
    """The batch_predict runs of this module, in its process, deserialize each unchanged
    export once (tests/task_runs.py's shared_loads)."""
    with shared_loads():
        yield


# Runs the text signature of several SavedModels in a process that imports only
# tensorflow and tensorflow_text (TF Serving's view); writes the outputs as JSON.
FRESH_ALL = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tf-text ops)
assert not any(m.split(".")[0] in ("bert_tf", "export", "tasks") for m in sys.modules)
jobs = json.loads(open(sys.argv[1], encoding="utf-8").read())
results = {}
for name, (path, inputs) in jobs.items():
    outputs = tf.saved_model.load(path).signatures["serving_default"](
        **{k: tf.constant(v) for k, v in inputs.items()})
    decode = np.vectorize(lambda b: b.decode("utf-8", "replace"), otypes=[object])
    results[name] = {k: (decode(v.numpy()) if v.dtype == tf.string else v.numpy()).tolist()
                     for k, v in outputs.items()}
open(sys.argv[2], "w", encoding="utf-8").write(json.dumps(results))
"""


@pytest.mark.slow
def test_moved_exports_run_in_a_fresh_process(classifier_runs, swag_run, ner_run, squad_runs,
                                              tmp_path):
    """Every task's SavedModel, moved to another directory, in a process without the
    project on its path (python -P, cwd elsewhere, no PYTHONPATH)."""
    exported = {"classification": (classifier_runs["pair"][1],
                                   {"text_a": TEXTS_A, "text_b": TEXTS_B}),
                "swag": (swag_run[1], {"context": CONTEXTS, "endings": ENDINGS}),
                "ner": (ner_run[1], {"text": NER_TEXTS}),
                "squad": (squad_runs["v1"][1], {"question": QUESTIONS,
                                                "context": CONTEXTS_SQ})}
    jobs, moved = {}, []
    for name, (path, inputs) in exported.items():
        target = tmp_path / "moved" / name / "1"
        shutil.move(path, target)
        moved.append((target, path))
        jobs[name] = (str(target), inputs)
    try:
        (tmp_path / "jobs.json").write_text(json.dumps(jobs))
        (tmp_path / "fresh.py").write_text(FRESH_ALL)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        result = subprocess.run([sys.executable, "-P", "fresh.py", "jobs.json", "out.json"],
                                cwd=str(tmp_path), env=env, capture_output=True, text=True,
                                timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        got = json.loads((tmp_path / "out.json").read_text())
    finally:
        for target, path in moved:
            shutil.move(target, path)
    want, _ = python_classify(classifier_runs["pair"][0], TEXTS_A, TEXTS_B)
    np.testing.assert_allclose(got["classification"]["probabilities"],
                               want["probabilities"], atol=1e-5)
    assert got["classification"]["label"] == want["labels"]
    want, _ = python_swag(swag_run[0], CONTEXTS, ENDINGS)
    assert got["swag"]["choice"] == want["label_ids"].tolist()
    ner = {k: tf.constant(v) for k, v in got["ner"].items()}
    assert entity_rows(ner) == python_entities(ner_run[0], NER_TEXTS)
    want, _ = python_squad(squad_runs["v1"][0], QUESTIONS, CONTEXTS_SQ)
    assert_same_answers({k: tf.constant(v) for k, v in got["squad"].items()}, want, v2=False)


def test_task_export_bad_input_is_one_line(tmp_path, swag_run, capsys):
    """A directory that is not a fine-tuning run, or a --max_seq_length the model cannot
    take: one line on stderr, exit code 1, nothing written."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--task", "classification", "--checkpoint_dir", swag_run[0],
              "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 1 and len(err) == 1 and \
        "glue_config.json: not found (point --checkpoint_dir at the --output_dir of a " \
        "tasks.glue run" in err[0]
    with pytest.raises(SystemExit) as exit_info:
        main(["--task", "swag", "--checkpoint_dir", swag_run[0], "--max_seq_length",
              "65", "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 1 and len(err) == 1 and "--max_seq_length 65" in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_two_exports_into_one_folder_at_once_take_two_versions(ner_run, tmp_path):
    """Both exports start before either has a version (the command's own work takes
    seconds), so both would pick version 1: the one that finishes second takes 2."""
    models = tmp_path / "models"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, "-m", "export.saved_model", "--task", "ner",
               "--checkpoint_dir", ner_run[0], "--output_dir", str(models)]
    root = ROOT
    runs = [subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=600) for run in runs]
    for run, (out, err) in zip(runs, outputs):
        assert run.returncode == 0, err[-3000:]
    printed = sorted(out.strip().splitlines()[-1] for out, _ in outputs)
    assert printed == [f"exported ner to {models / v}" for v in ("1", "2")]
    assert sorted(os.listdir(models)) == ["1", "2"]            # no .tmp-* left behind
    for version in ("1", "2"):
        assert (models / version / "saved_model.pb").is_file()
        assert (models / version / "assets.extra" / "tf_serving_warmup_requests").is_file()


def test_an_export_killed_midway_leaves_no_version(ner_run, tmp_path):
    """kill -9 while the SavedModel is being written: no version folder appears (a
    server never loads half a model), and the next export takes version 1."""
    import signal
    import time
    models = tmp_path / "models"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, "-m", "export.saved_model", "--task", "ner",
               "--checkpoint_dir", ner_run[0], "--output_dir", str(models)]
    root = ROOT
    run = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and run.poll() is None and not (
            models.is_dir() and any(n.startswith(".tmp-") for n in os.listdir(models))):
        time.sleep(0.05)
    assert run.poll() is None, "the export ended before it could be killed"
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert not [n for n in os.listdir(models) if not n.startswith(".tmp-")]
    again = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.strip().splitlines()[-1] == f"exported ner to {models / '1'}"


def test_claim_version_takes_the_next_free_number(tmp_path, monkeypatch):
    """A version completed by another export after this one looked (simulated: the
    look says 1 while 1 and 2 exist) is not overwritten: the rename fails, 3 is taken."""
    from export import saved_model
    for version in ("1", "2"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "saved_model.pb").write_text(version)
    tmp = tmp_path / ".tmp-mine"
    tmp.mkdir()
    (tmp / "saved_model.pb").write_text("mine")
    monkeypatch.setattr(saved_model, "next_version", lambda folder: 1)
    assert saved_model.claim_version(str(tmp), str(tmp_path)) == str(tmp_path / "3")
    assert [(tmp_path / v / "saved_model.pb").read_text() for v in "123"] == \
        ["1", "2", "mine"]
    assert not tmp.exists()


def doc_requests():
    """(model name, signature, {input: value}, documented output names) of every REST
    (curl) and gRPC (`predict(...)`) example in docs/serving.md."""
    import ast
    import re
    root = ROOT
    doc = open(os.path.join(root, "docs", "serving.md"), encoding="utf-8").read()
    rest = doc.split("### REST", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    requests = []
    # One curl per request; "# -> {...}" comments after it name its outputs. The
    # serve_examples request is built by a shell variable and is left out here.
    for curl in re.split(r"(?=^curl )", rest.replace("\\\n", " "), flags=re.M)[1:]:
        match = re.match(r"curl -d '(.*?)'\s+localhost:8501/v1/models/(\w+):predict", curl,
                         re.S)
        if not match:
            assert "serve_examples" in curl, curl
            continue
        body = json.loads(match.group(1))
        if "instances" in body:         # row form -> columns
            inputs = {k: [row[k] for row in body["instances"]] for k in body["instances"][0]}
        else:
            inputs = body["inputs"]
        documented = set(re.findall(r'"(\w+)":', "".join(
            line for line in curl.splitlines() if line.lstrip().startswith("#")))) - \
            {"outputs", "predictions"}
        requests.append((match.group(2), body.get("signature_name", "serving_default"),
                         inputs, documented))
    grpc = doc.split("### gRPC", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    tree = ast.parse(grpc)
    keys = {id(node.value): {ast.literal_eval(node.slice)} for node in ast.walk(tree)
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "predict":
            try:
                args = [ast.literal_eval(a) for a in node.args]
            except ValueError:     # a serialized tf.Example built in the doc's code
                assert ast.literal_eval(node.args[2]) == "serve_examples"
                continue
            requests.append((args[0], args[2] if len(args) > 2 else "serving_default",
                             args[1], keys.get(id(node), set())))
    return requests


def test_serving_doc_examples_match_the_signatures(all_exports):
    """Every request in docs/serving.md names exactly the inputs of its signature, runs on
    the exported model, and the outputs it documents exist."""
    paths = all_exports
    requests = doc_requests()
    assert {name for name, *_ in requests} == set(paths)
    assert len(requests) >= 15
    loaded = {name: loaded_export(path) for name, path in paths.items()}
    for name, signature, inputs, documented in requests:
        fn = loaded[name].signatures[signature]
        spec = fn.structured_input_signature[1]
        assert set(inputs) == set(spec), (name, signature, sorted(inputs), sorted(spec))
        tensors = {}
        for key, value in inputs.items():
            value = np.asarray(value)
            if key == "token_ids":       # the doc's ids are bert-base's; the model is tiny
                value = np.minimum(value, len(VOCAB) - 1)
            tensors[key] = tf.constant(value, dtype=spec[key].dtype)
        outputs = fn(**tensors)
        assert documented <= set(outputs), (name, signature, documented, sorted(outputs))
        assert all(int(v.shape[0]) == len(next(iter(inputs.values())))
                   for v in outputs.values()), name


def test_exports_carry_tf_serving_warmup_requests(all_exports):
    """assets.extra/tf_serving_warmup_requests, read with TF Serving's own protos: two real
    rows for each of the three signatures, replayed on the export; the text and the
    tf.Example forms of the same rows give the same outputs."""
    prediction_log_pb2 = pytest.importorskip("tensorflow_serving.apis.prediction_log_pb2")
    from export.warmup import WARMUP_FILE
    for name, path in all_exports.items():
        loaded = loaded_export(path)
        replies = {}
        for record in tf.data.TFRecordDataset(os.path.join(path, WARMUP_FILE)):
            log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
            request = log.predict_log.request
            model_dir = os.path.basename(os.path.dirname(path))
            assert request.model_spec.name == model_dir, (name, request.model_spec.name)
            fn = loaded.signatures[request.model_spec.signature_name]
            inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
            assert set(inputs) == set(fn.structured_input_signature[1]), name
            outputs = fn(**{k: tf.constant(v) for k, v in inputs.items()})
            assert all(int(v.shape[0]) == 2 for v in outputs.values()), name
            replies[request.model_spec.signature_name] = outputs
        assert set(replies) == {"serving_default", "serve_tokenized", "serve_examples"}, name
        for key, value in replies["serving_default"].items():
            got = replies["serve_examples"][key].numpy()
            if value.dtype == tf.string:
                assert (got == value.numpy()).all(), (name, key)
            else:
                np.testing.assert_allclose(got, value.numpy(), atol=1e-6, err_msg=name)


# tf-text's op libraries that TF Serving's model server links
# (tensorflow/serving model_servers/BUILD: @org_tensorflow_text//tensorflow_text:ops_lib,
# whose deps tensorflow_text/BUILD lists); the pip wheel ships each as python/ops/_NAME.so.
TF_TEXT_OPS_LIB = (
    "boise_offset_converter", "byte_splitter", "constrained_sequence_op",
    "fast_bert_normalizer", "fast_sentencepiece_tokenizer", "fast_wordpiece_tokenizer",
    "mst_ops", "ngrams_op", "normalize_ops", "phrase_tokenizer", "regex_split_ops",
    "sentence_breaking_ops", "sentencepiece_tokenizer", "split_merge_from_logits_tokenizer",
    "split_merge_tokenizer", "state_based_sentence_breaker_op", "text_similarity_metric_ops",
    "trimmer_ops", "unicode_script_tokenizer", "utf8_binarize_op", "whitespace_tokenizer",
    "whitespace_tokenizer_v2", "wordpiece_tokenizer")


@pytest.fixture(scope="module")
def c_client(tmp_path_factory):
    """tests/c_api_serve.c built against the wheel's TensorFlow C API, and the tf-text op
    libraries to load: (binary, [library paths])."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler (cc, gcc or clang) on PATH to build tests/c_api_serve.c")
    import tensorflow_text
    lib = tf.sysconfig.get_lib()
    binary = str(tmp_path_factory.mktemp("c_api") / "c_api_serve")
    source = os.path.join(TESTS, "c_api_serve.c")
    command = [compiler, "-O1", "-o", binary, source, "-I" + tf.sysconfig.get_include(),
               "-L" + lib, "-l:libtensorflow_cc.so.2", "-l:libtensorflow_framework.so.2",
               "-Wl,-rpath," + lib]
    # GNU ld takes ~10 s to read libtensorflow_cc's symbol tables (~100 MB), gold a few:
    # gold where the toolchain has it, else the default linker.
    built = subprocess.run(command + ["-fuse-ld=gold"], capture_output=True, text=True)
    if built.returncode != 0:
        built = subprocess.run(command, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    ops = os.path.join(os.path.dirname(tensorflow_text.__file__), "python", "ops")
    libraries = [os.path.join(ops, f"_{name}.so") for name in TF_TEXT_OPS_LIB
                 if os.path.exists(os.path.join(ops, f"_{name}.so"))]
    assert len(libraries) >= 20 and any("fast_bert_normalizer" in p for p in libraries)
    return binary, libraries


def run_c_client(c_client, model_dir, requests_file):
    """Runs the C client -> [(signature, {output: np.ndarray} or an error line)]."""
    binary, libraries = c_client
    done = subprocess.run([binary, model_dir, requests_file] + libraries,
                          capture_output=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr.decode(errors="replace")[-3000:]
    dtypes = {1: np.float32, 2: np.float64, 3: np.int32, 9: np.int64, 10: np.bool_}
    replies = []
    for line in done.stdout.decode().splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "request":
            replies.append((rest.split(" ", 1)[1], {}))
        elif kind == "error":
            replies[-1] = (replies[-1][0], rest)
        elif kind == "output":
            head, _, values = rest.partition(" : ")
            key, dtype, ndims, *dims = head.split()
            shape = [int(d) for d in dims[:int(ndims)]]
            values = values.split() if values.strip() else []
            if int(dtype) == 7:
                array = np.array([b"" if v == "-" else bytes.fromhex(v) for v in values],
                                 dtype=object)
            else:
                array = np.array([float(v) if int(dtype) in (1, 2) else int(v)
                                  for v in values], dtype=dtypes[int(dtype)])
            replies[-1][1][key] = array.reshape(shape)
    return replies


def assert_same_outputs(c_outputs, python_outputs, where):
    assert isinstance(c_outputs, dict), (where, c_outputs)
    assert set(c_outputs) == set(python_outputs), where
    for key, want in python_outputs.items():
        want, got = np.asarray(want), c_outputs[key]
        assert got.shape == want.shape, (where, key, got.shape, want.shape)
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"{where} {key}")
        else:
            assert (got == want).all(), (where, key)


def c_requests(name):
    """Real and hostile rows for the text signature of export `name`: a list of
    {input: np.ndarray} batches (a batch of 0 included)."""
    hostile = [t.encode("utf-8") for t in HOSTILE] + HOSTILE_BYTES
    strings = lambda rows: np.array(rows, dtype=object)
    if name == "mrpc":
        real = {"text_a": strings(TEXTS_A), "text_b": strings(TEXTS_B)}
        bad = {"text_a": strings(hostile), "text_b": strings(hostile[::-1])}
        empty = {"text_a": strings([]), "text_b": strings([])}
    elif name == "stsb":
        real, bad, empty = ({"text_a": strings(TEXTS_A)}, {"text_a": strings(hostile)},
                            {"text_a": strings([])})
    elif name == "swag":
        real = {"context": strings(CONTEXTS), "endings": strings(ENDINGS)}
        bad = {"context": strings(hostile[:4]), "endings": strings([hostile[i:i + 4]
                                                                   for i in range(4)])}
        empty = {"context": strings([]), "endings": np.zeros([0, 4], object)}
    elif name == "squad":
        real = {"question": strings(QUESTIONS), "context": strings(CONTEXTS_SQ)}
        bad = {"question": strings(hostile), "context": strings(hostile[::-1])}
        empty = {"question": strings([]), "context": strings([])}
    else:        # ner, embeddings, fill-mask: one text input
        texts = NER_TEXTS + ["Paris is the [MASK] of France."]
        real, bad, empty = ({"text": strings(texts)}, {"text": strings(hostile)},
                            {"text": strings([])})
    return [real, bad, empty]


def test_c_api_client_loads_and_answers_like_python(all_exports, classifier_runs,
                                                    frozen_pair_export, tmp_path, c_client):
    """Every task's export, loaded by a C program with the TensorFlow C API and only
    tf-text's op libraries (TF Serving's loader and op set, no Python): real texts, the
    hostile rows and a batch of 0 through serving_default, each answer equal to the
    Python-loaded model's; then the export's own warm-up file, replayed by the same
    process as a server does at load (its Python replay: test_exports_carry_...). An
    export with its weights frozen into constants (--freeze_weights) and an int8 one
    (--dtype int8: oneDNN's quantized matmul, which TF's C API library has) load and
    answer the same way."""
    from export.warmup import WARMUP_FILE, prediction_log
    exports = dict(all_exports)
    exports["stsb"] = export(build_module("classification", classifier_runs["single"][0],
                                          None, True), str(tmp_path / "stsb"))
    exports["mrpc-frozen"] = frozen_pair_export
    exports["mrpc-int8"] = export(build_module(
        "classification", classifier_runs["pair"][0], None, True, dtype="int8"),
        str(tmp_path / "mrpc_int8"))
    assert len(exports) == 9
    for name, path in sorted(exports.items()):
        loaded = loaded_export(path).signatures
        requests = str(tmp_path / f"{name}.requests")
        batches = c_requests(name.split("-")[0])
        with tf.io.TFRecordWriter(requests) as writer:
            for inputs in batches:
                writer.write(prediction_log(name, "serving_default", inputs))
            for record in tf.data.TFRecordDataset(os.path.join(path, WARMUP_FILE)):
                writer.write(record.numpy())
        replies = run_c_client(c_client, path, requests)
        assert len(replies) == len(batches) + 3, name
        for inputs, (signature, outputs) in zip(batches, replies):
            want = loaded[signature](**{k: tf.constant(v, tf.string) if v.size == 0
                                        else tf.constant(v) for k, v in inputs.items()})
            assert_same_outputs(outputs, {k: v.numpy() for k, v in want.items()},
                                f"{name} {signature} {len(next(iter(inputs.values())))}")
        warmup = replies[len(batches):]
        assert [s for s, _ in warmup] == ["serving_default", "serve_tokenized",
                                          "serve_examples"], (name, warmup)
        for signature, outputs in warmup:
            assert isinstance(outputs, dict), (name, signature, outputs)
            assert outputs.keys() == loaded[signature].structured_outputs.keys()
            assert all(v.shape[0] == 2 for v in outputs.values()), (name, signature)
        # The text and tf.Example forms of the same two rows answer alike.
        assert_same_outputs(warmup[2][1], warmup[0][1], f"{name} warm-up forms")
    # Which ops the server must link: without tf-text the warm-up requests (which TF
    # Serving replays as it loads a version) fail on FastBertNormalize, whose kernels sit
    # in a branch the first request instantiates; its two libraries the exports use
    # (docs/serving.md) are enough.
    binary, libraries = c_client
    warmup = os.path.join(exports["ner"], WARMUP_FILE)
    bare = subprocess.run([binary, exports["ner"], warmup], capture_output=True, text=True)
    assert bare.returncode != 0, bare.stdout[-2000:]
    assert "Op type not registered 'FastBertNormalize'" in bare.stderr + bare.stdout, \
        (bare.stderr + bare.stdout)[-2000:]
    two = [p for p in libraries if os.path.basename(p) in (
        "_fast_bert_normalizer.so", "_fast_wordpiece_tokenizer.so")]
    replies = run_c_client((binary, two), exports["ner"], warmup)
    assert len(replies) == 3 and all(isinstance(out, dict) for _, out in replies)


BEAM_WORKERS = ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                "--direct_num_workers=2"]


# Two workers as threads of the test's own process: the same bundles and per-worker model
# loads without two processes starting TensorFlow and Beam (~15 CPU-s each).
BEAM_THREADS = ["--runner=DirectRunner", "--direct_running_mode=multi_threading",
                "--direct_num_workers=2"]


def batch_input(name, folder):
    """An input file of export `name`'s rows (c_requests' real rows) in the format its
    inputs take (.txt for one text, .csv for a pair or SWAG's endings, .jsonl for SQuAD),
    with one bad line of that format; returns (path, rows, the bad line's number)."""
    import csv
    real = c_requests(name.split("-")[0])[0]
    names = sorted(real)
    rows = [{k: (v.tolist() if real[k].ndim > 1 else v) for k, v in zip(names, values)}
            for values in zip(*(real[k] for k in names))]
    # Lines of text: no line ends inside a row, and no NUL byte (not text: refused).
    rows = [r for r in rows if not any(c in json.dumps(r) for c in ("\\n", "\\r",
                                                                    "\\u0000"))]
    rows = [{k: (v.decode() if isinstance(v, bytes) else
                 [x.decode() if isinstance(x, bytes) else x for x in v]
                 if isinstance(v, list) else v) for k, v in r.items()} for r in rows]
    rows = (rows * 3)[:max(7, len(rows))]
    if names == ["text"]:
        path = os.path.join(folder, f"{name}.txt")
        with open(path, "wb") as f:
            for row in rows[:3]:
                f.write(row["text"].encode() + b"\n")
            f.write(b"\xff\xfe not utf-8\n")
            for row in rows[3:]:
                f.write(row["text"].encode() + b"\n")
        return path, rows, 4
    if name == "squad":
        path = os.path.join(folder, f"{name}.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            lines = [json.dumps(r, ensure_ascii=False) for r in rows]
            lines.insert(3, '{"question": "no context here"}')
            f.write("\n".join(lines) + "\n")
        return path, rows, 4
    path = os.path.join(folder, f"{name}.csv")
    header = [n if real[n].ndim == 1 else f"{n}{i}" for n in names
              for i in range(1 if real[n].ndim == 1 else real[n].shape[1])]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        cells = [[c for n in names for c in ([r[n]] if isinstance(r[n], str) else r[n])]
                 for r in rows]
        cells.insert(3, ["one column only"])
        writer.writerows(cells)
    return path, rows, 5


def read_shards(prefix):
    """(the shards' bytes by name, their rows in order, the rejected rows)."""
    import glob
    files = {os.path.basename(p): open(p, "rb").read()
             for p in sorted(glob.glob(prefix + "-*.jsonl"))}
    rows = [json.loads(line) for name, data in files.items()
            if not name.endswith(".rejected.jsonl") for line in data.splitlines()]
    rejected = [json.loads(line) for name, data in files.items()
                if name.endswith(".rejected.jsonl") for line in data.splitlines()]
    return files, rows, rejected


def batch_predict(*argv):
    from export.batch_predict.__main__ import main as batch_main
    return batch_main(list(argv))


def assert_row_answers(outputs, want, label):
    """One row's outputs (JSON) against the signature's on that row alone: text and
    integers equal, numbers within 1e-5. NER's entity lists, padded by the signature to
    the call's largest count, are the row's own entries alone (a call of one row pads to
    its own count), so the same keys and lengths."""
    assert sorted(outputs) == sorted(want), label
    for key, value in want.items():
        value = np.asarray(value)
        text = value.dtype.kind in "OS"
        got = np.asarray(outputs[key], dtype=object if text else None)
        if text:
            value = np.asarray([v.decode() for v in value.ravel()], object).reshape(
                value.shape)
        if text or value.dtype.kind in "iub":
            assert got.tolist() == value.tolist(), (label, key)
        else:
            np.testing.assert_allclose(got.astype(np.float64), value, atol=1e-5,
                                       err_msg=f"{label} {key}")


def test_batch_predict_local_engine_answers_as_the_signature(all_exports, tmp_path):
    """python -m export.batch_predict on every export kind (classification pairs, SWAG,
    NER, SQuAD, embeddings, fill-mask) from its format (.txt, .csv, .jsonl): one JSONL
    line per row in input order across shards, each the signature's answer for that row
    alone; the bad line of each file in the shard's dead-letter file with its file, line
    and reason; the summary's counts; a rerun keeps every shard."""
    for name, path in sorted(all_exports.items()):
        source, rows, bad = batch_input(name, str(tmp_path))
        prefix = str(tmp_path / "out" / name)
        summary = batch_predict(f"--model_dir={path}", f"--input_file={source}",
                                f"--output_file={prefix}", "--shard_lines=3",
                                "--max_batch_size=2")
        files, got, rejected = read_shards(prefix)
        header = source.endswith(".csv")
        assert [r["line"] for r in got] == [n for n in range(1 + header, len(rows) + 2 +
                                                             header) if n != bad], name
        assert [(r["file"], r["line"]) for r in rejected] == [(source, bad)], name
        assert summary["predicted"] == len(rows) and summary["rejected"] == 1
        assert summary["shards_written"] == summary["shards"] >= 3
        signature = loaded_export(path).signatures["serving_default"]
        for row, answer in zip(rows, got):
            feed = {k: tf.constant([v]) for k, v in row.items()}
            want = {k: v.numpy()[0] for k, v in signature(**feed).items()}
            assert_row_answers(answer["outputs"], want, (name, answer["line"]))
        again = batch_predict(f"--model_dir={path}", f"--input_file={source}",
                              f"--output_file={prefix}", "--shard_lines=3",
                              "--max_batch_size=2")
        assert again["shards_kept"] == summary["shards"] and again["shards_written"] == 0
        assert read_shards(prefix)[0] == files
    # A row's entities do not depend on the rows it shared a call with.
    source = batch_input("ner", str(tmp_path))[0]
    lines = {}
    for size in (1, 5):
        prefix = str(tmp_path / f"ner-batch-{size}" / "ner")
        batch_predict(f"--model_dir={all_exports['ner']}", f"--input_file={source}",
                      f"--output_file={prefix}", f"--max_batch_size={size}")
        lines[size] = read_shards(prefix)[1]
    assert lines[1] == lines[5] and any(r["outputs"]["num_entities"] for r in lines[1])


def test_batch_predict_cuts_lists_padded_per_call_to_their_count():
    """Which outputs a row's count cuts: declared [batch, None] lists and lists of
    undeclared shape beside one num_... count; without a count, undeclared shapes are
    taken whole and a declared per-call width is refused in one line."""
    from types import SimpleNamespace
    from bert_tf.data.errors import InputError
    from export.batch_predict.signature import counted_outputs

    def signature(**shapes):
        return SimpleNamespace(structured_outputs={
            n: tf.TensorSpec(shape, tf.int32 if n.startswith("num_") else tf.string)
            for n, shape in shapes.items()})
    unknown = tf.TensorShape(None)
    assert counted_outputs(signature(label=[None, None], start=unknown, num_entities=[None],
                                     probabilities=[None, 3])) == (
        "num_entities", ("label", "start"))
    assert counted_outputs(signature(sequence_output=unknown, pooled=[None, 8])) == (None, ())
    with pytest.raises(InputError, match=r"outputs label are padded per call, and expected "
                                         r"one \[batch\] integer num_\.\.\. output"):
        counted_outputs(signature(label=[None, None], probabilities=[None, 3]))
    # A windowed classifier's outputs as its export declares them: [batch, K], taken
    # whole. The same export written when it declared [batch, None] is refused, and the
    # line says what to do.
    assert counted_outputs(signature(probabilities=[None, 3], label_id=[None],
                                     label=[None])) == (None, ())
    with pytest.raises(InputError, match=r"outputs probabilities are padded per call, .* "
                                         r"\(a windowed classifier exported before .*: "
                                         r"export it again\)$"):
        counted_outputs(signature(probabilities=[None, None], label_id=[None], label=[None]))


# Outputs whose width is the call's own, by signature: (export, signature) -> {output:
# (axis, why)}. Every other dimension but the batch's is declared in the SavedModel.
PER_CALL_DIMENSIONS = {
    # NER's entities: a text has as many as it has (counted by num_entities, padded to
    # the call's largest count, as TF Serving pads a dense list).
    **{("ner", s): {k: (1, "entities") for k in ("label", "text", "start_char", "end_char")}
       for s in ("serving_default", "serve_examples")},
    # serve_tokenized answers per token of the ids it is given: their sequence length is
    # the caller's (the text signatures pad to max_seq_length, declared).
    ("ner", "serve_tokenized"): {k: (1, "the input's sequence")
                                 for k in ("logits", "label_id", "label")},
    ("squad", "serve_tokenized"): {k: (1, "the input's sequence")
                                   for k in ("start_logits", "end_logits")},
    ("bert_embeddings", "serve_tokenized"): {k: (1, "the input's sequence")
                                             for k in ("sequence_output", "padding_mask")},
}
WINDOW_TEXTS = ["the quick brown fox jumps over the lazy dog . " * 6, "paris", "",
                "john smith lives in new york , the capital of the long river . " * 3,
                "héllo wörld 中文"]


@pytest.fixture(scope="module")
def windowed_exports(tmp_path_factory):
    """The exports all_exports leaves out: runs read in windows (classification,
    regression, multi-label: max_windows 0, doc_stride 5 of 22 pieces), a multi-label
    run that cuts, and the windowed classifier at int8."""
    root = tmp_path_factory.mktemp("windowed")
    windows = dict(max_windows=0, doc_stride=5, window_pooling="mean")
    glue_run = {"task": "glue", "task_name": "custom", "text_inputs": ["text_a"],
                "dropout": None}
    multi = {"task": "multilabel", "model": "BertClassifier", "labels": ["x", "y", "z", "w"],
             "num_classes": 4, "thresholds": [0.3, 0.5, 0.5, 0.7], "text_inputs": ["text_a"],
             "label_delimiter": ",", "dropout": None}
    runs = {
        "windowed_classification": ("classification", make_run_dir(
            str(root / "wc"), "glue", dict(glue_run, labels=["a", "b", "c"], regression=False,
                                            num_classes=3, **windows),
            lambda e: BertClassifier(e, 3), seed=7)),
        "windowed_regression": ("classification", make_run_dir(
            str(root / "wr"), "glue", dict(glue_run, task_name="stsb", labels=None,
                                            regression=True, num_classes=1, **windows),
            lambda e: BertClassifier(e, 1, output_bias=2.5), seed=8)),
        "windowed_multilabel": ("multilabel", make_run_dir(
            str(root / "wm"), "multilabel", dict(multi, **windows),
            lambda e: BertClassifier(e, 4), seed=9)),
        "multilabel": ("multilabel", make_run_dir(
            str(root / "ml"), "multilabel", multi, lambda e: BertClassifier(e, 4), seed=10)),
    }
    exports = {name: export(build_module(task, run, None, True), str(root / "models" / name))
               for name, (task, run) in runs.items()}
    exports["windowed_classification_int8"] = export(build_module(
        "classification", runs["windowed_classification"][1], None, True, dtype="int8"),
        str(root / "models" / "int8"))
    return exports


@pytest.mark.slow
def test_every_export_declares_its_shapes_and_runs_through_batch_predict(
        all_exports, windowed_exports, tmp_path):
    """Every kind of export the project writes (classification pairs, regression,
    multi-label, each read in windows or cut, int8, SWAG, NER, SQuAD, embeddings,
    fill-mask): each signature declares every output dimension but the batch's, the
    per-call ones of PER_CALL_DIMENSIONS aside (a windowed classifier's probabilities
    are [batch, K], not [batch, None]), its answers have the declared shapes, and
    export.batch_predict predicts with it, each row's line the signature's answer."""
    exports = dict(all_exports, **windowed_exports)
    for name, path in sorted(exports.items()):
        loaded = loaded_export(path)
        for signature, fn in sorted(loaded.signatures.items()):
            open_dims = PER_CALL_DIMENSIONS.get((name.split("-")[0], signature), {})
            for key, spec in fn.structured_outputs.items():
                shape = spec.shape
                assert shape.rank is not None, (name, signature, key)
                unknown = [axis for axis, size in enumerate(shape.as_list())
                           if size is None and axis > 0]
                allowed = [open_dims[key][0]] if key in open_dims else []
                assert unknown == allowed, (name, signature, key, shape)
        signature = loaded.signatures["serving_default"]
        if name in windowed_exports:
            source = str(tmp_path / f"{name}.txt")
            with open(source, "w", encoding="utf-8") as f:
                f.write("\n".join(WINDOW_TEXTS) + "\n")
            rows = [{"text_a": text} for text in WINDOW_TEXTS]
        else:
            source, rows, _ = batch_input(name, str(tmp_path))
        answers = signature(**{k: tf.constant([row[k] for row in rows]) for k in rows[0]})
        for key, value in answers.items():
            assert signature.structured_outputs[key].shape.is_compatible_with(value.shape)
        prefix = str(tmp_path / "out" / name)
        # int8 quantizes a call's inputs over the call (ONNX Runtime's dynamic scheme):
        # its answer to a row is the signature's on that row alone in a call of one.
        summary = batch_predict(f"--model_dir={path}", f"--input_file={source}",
                                f"--output_file={prefix}",
                                f"--max_batch_size={1 if 'int8' in name else 2}")
        got = read_shards(prefix)[1]
        assert summary["predicted"] == len(rows) == len(got), name
        for row, answer in zip(rows, got):
            want = {k: v.numpy()[0] for k, v in
                    signature(**{k: tf.constant([v]) for k, v in row.items()}).items()}
            assert_row_answers(answer["outputs"], want, (name, answer["line"]))
    probabilities = loaded_export(exports["windowed_multilabel"]).signatures[
        "serving_default"].structured_outputs["probabilities"]
    assert probabilities.shape.as_list() == [None, 4]


def test_batch_predict_stops_on_an_input_that_changes_while_it_reads(all_exports, tmp_path,
                                                                    monkeypatch, capsys):
    """An input file appended to after the first shard: the job stops in one line naming
    it, before a shard of the new content is written, and leaves no temporary file."""
    from export.batch_predict import engines as module
    source = batch_input("ner", str(tmp_path))[0]
    real = module.run_shard

    def run_then_append(job, signature, plan):
        counts = real(job, signature, plan)
        with open(source, "ab") as f:
            f.write(b"Another line written while the job reads the file.\n")
        return counts
    monkeypatch.setattr(module, "run_shard", run_then_append)
    prefix = tmp_path / "out" / "ner"
    capsys.readouterr()
    with pytest.raises(SystemExit):
        batch_predict(f"--model_dir={all_exports['ner']}", f"--input_file={source}",
                      f"--output_file={prefix}", "--shard_lines=3")
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: --input_file: {source} changed while the job read it; the shards written "
        f"before are of its earlier content: predict into another --output_file, or pass "
        f"--overwrite to predict it again")
    names = sorted(os.listdir(prefix.parent))
    assert [n for n in names if n.startswith("ner-0")] == ["ner-00000-of-00004.jsonl"], names
    assert not [n for n in names if n.endswith(".tmp")]


def test_batch_predict_refuses_a_prefix_another_job_writes(all_exports, tmp_path, capsys):
    """Two jobs on one output prefix: while one holds it (a live process), a second is
    refused in one line naming it, under another spelling of the prefix too (a symlinked
    folder), with every file as it was; once the holder is gone the job runs."""
    from tests.testing import refused
    source = batch_input("ner", str(tmp_path))[0]
    os.makedirs(tmp_path / "out")
    os.symlink(tmp_path / "out", tmp_path / "alias")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from bert_tf.base.output_lock import OutputLock
        with OutputLock(sys.argv[1], "--output_file"):
            print("held", flush=True)
            time.sleep(120)
        """), str(tmp_path / "out" / "ner")], stdout=subprocess.PIPE, text=True,
        cwd=ROOT)
    flags = [f"--model_dir={all_exports['ner']}", f"--input_file={source}"]
    try:
        assert holder.stdout.readline().strip() == "held"
        for spelling in ("out", "alias"):
            prefix = str(tmp_path / spelling / "ner")
            refused(batch_predict_main, [*flags, f"--output_file={prefix}"], capsys,
                    [f"--output_file={prefix} is in use by another command",
                     f"(pid {holder.pid}: "], str(tmp_path / "out"))
    finally:
        holder.kill()
        holder.wait()
    assert batch_predict(*flags, f"--output_file={tmp_path / 'alias' / 'ner'}")["predicted"]


@pytest.mark.slow
def test_batch_predict_on_beam_writes_the_local_bytes(all_exports, tmp_path, monkeypatch,
                                                      capsys):
    """--runner=DirectRunner with two workers (RunInference, the export loaded once per
    worker): the local engine's bytes for every export kind: sentence-pair
    classification (.csv), embeddings and fill-mask (.txt), NER (.txt), SQuAD (.jsonl)
    and SWAG (.csv). SQuAD's run reads and writes at URLs of a Beam file system
    (bertfs://, tests/beam_urlfs.py) and takes two worker processes (the pickled DoFn
    loads the export in each, and each reaches the URLs); the other kinds two worker
    threads of this process."""
    from tests import beam_urlfs  # noqa: F401  (registers bertfs:// with Beam)
    pytest.importorskip("apache_beam")
    bucket = tmp_path / "bucket"
    monkeypatch.setenv("BERT_TF_URLFS_ROOT", str(bucket))
    os.makedirs(bucket / "in")
    for name in ("mrpc", "bert_embeddings", "bert_fill_mask", "ner", "swag", "squad"):
        source, _, _ = batch_input(name, str(tmp_path))
        flags = [f"--model_dir={all_exports[name]}", "--shard_lines=4",
                 "--max_batch_size=3"]
        batch_predict(*flags, f"--input_file={source}",
                      f"--output_file={tmp_path / 'local' / name}")
        local = read_shards(str(tmp_path / "local" / name))[0]
        if name != "squad":
            batch_predict(*flags, f"--input_file={source}",
                          f"--output_file={tmp_path / 'beam' / name}", *BEAM_THREADS)
            assert read_shards(str(tmp_path / "beam" / name))[0] == local, name
            continue
        shutil.copy(source, bucket / "in")
        url = f"bertfs://in/{os.path.basename(source)}"
        summary = batch_predict(*flags, f"--input_file={url}",
                                f"--output_file=bertfs://out/{name}", *BEAM_WORKERS)
        assert summary["predicted"] > 0
        files = read_shards(str(bucket / "out" / name))[0]
        assert sorted(files) == sorted(local) and all(
            files[k].replace(url.encode(), source.encode()) == local[k] for k in files)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        batch_predict(*flags, f"--input_file={url}", f"--output_file=bertfs://out/{name}2")
    assert "only the Beam engine" in capsys.readouterr().err


@pytest.mark.slow
def test_batch_predict_resumes_after_kill_9_and_refuses_other_runs(all_exports, tmp_path,
                                                                   capsys):
    """A job killed with SIGKILL once its first shard is written is finished by the same
    command with the uninterrupted job's bytes; a rerun with another --max_batch_size,
    --bad_lines=error on a file with a bad line, and an output that is an input are
    refused in one line with every file as it was."""
    import signal
    import time
    from tests.testing import refused
    source, _, bad = batch_input("ner", str(tmp_path))
    with open(source, "rb") as f:
        data = f.read()
    with open(source, "wb") as f:
        f.write(data * 40)
    flags = [f"--model_dir={all_exports['ner']}", f"--input_file={source}",
             "--shard_lines=5", "--max_batch_size=1"]
    batch_predict(*flags, f"--output_file={tmp_path / 'whole' / 'ner'}")
    prefix = tmp_path / "killed" / "ner"

    def shards():
        return [p for p in os.listdir(prefix.parent) if p.startswith("ner-0") and
                p.endswith(".jsonl") and "rejected" not in p] if prefix.parent.exists() else []
    process = subprocess.Popen([sys.executable, "-m", "export.batch_predict", *flags,
                                f"--output_file={prefix}"],
                               cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not shards():
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()
    written = len(shards())
    summary = batch_predict(*flags, f"--output_file={prefix}")
    assert summary["shards_kept"] >= 1 and summary["shards_written"] >= 1, (written,
                                                                           summary)
    assert read_shards(str(prefix))[0] == read_shards(str(tmp_path / "whole" / "ner"))[0]
    assert not [p for p in os.listdir(prefix.parent) if p.endswith(".tmp")]
    refused(batch_predict_main, [*flags[:-1], "--max_batch_size=2",
                                 f"--output_file={prefix}"], capsys,
            ["is the plan of a run with another max_batch_size"], str(prefix.parent))
    refused(batch_predict_main, [*flags, "--bad_lines=error",
                                 f"--output_file={tmp_path / 'strict' / 'ner'}"], capsys,
            [f"{source}:{bad}: not UTF-8"], str(tmp_path / "strict"))
    # Predictions written into the export they come from would change it.
    refused(batch_predict_main, [*flags, f"--output_file={all_exports['ner']}/preds"],
            capsys, ["lies inside the input --model_dir"], all_exports["ner"])
    # An input named as one of the output's files (a glob over earlier predictions).
    shutil.copy(source, tmp_path / "killed" / "ner-extra.txt")
    refused(batch_predict_main, [*flags[:1], f"--input_file={tmp_path / 'killed'}/*.txt",
                                 *flags[2:], f"--output_file={prefix}"], capsys,
            ["is one of its files", "choose another --output_file"], str(tmp_path))


def batch_predict_main(argv):
    from export.batch_predict.__main__ import main as batch_main
    return batch_main(argv)
