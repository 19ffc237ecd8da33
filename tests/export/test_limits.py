"""What one request may cost, and the requests a signature refuses: the NER and SQuAD
exports answer a text at the export's --max_text_bytes within a memory budget, in a
fresh process that imports only tensorflow and tensorflow_text (TF Serving's view), and
refuse a longer one; bad shapes and out-of-range ids fail with one InvalidArgument error
naming the input, before any other op meets them.

The exports are the tiny task models of tests/export/test_export_tasks.py at the sequence
length and stride where the unbounded memory was first seen (seq 48, SQuAD stride 16).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.models.task_models import BertSpanLabeler, BertTokenClassifier
from export.limits import MAX_TEXT_BYTES
from export.saved_model import build_module, export
from tests.task_runs import NER_LABELS, VOCAB, make_run_dir

SEQ = 48
# Peak resident memory of the process that loads one export and answers one text at the
# limit (TensorFlow's own ~1.1 GB included). Before the span helpers were made linear, a
# 1 MB text took more than 24 GB (NER 12 GB and still growing at 1 MB when stopped).
PEAK_BUDGET_BYTES = 2 << 30
# What that one request may add to the loaded, warmed-up process.
GROWTH_BUDGET_BYTES = 512 << 20

LINE = "the quick brown fox jumps over the lazy dog. john smith lives in new york. "


def long_text(size):
    """`size` bytes of words of the test vocabulary (ASCII: bytes = characters)."""
    return (LINE * (size // len(LINE) + 1))[:size]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("limits")
    # NER reads a long text in overlapping windows (each word in two): twice the parts.
    ner = make_run_dir(str(root / "run_ner"), "ner", {
        "task": "ner", "labels": NER_LABELS, "feature_based": False, "doc_stride": 16},
        lambda e: BertTokenClassifier(e, len(NER_LABELS)), seed=6)
    squad = make_run_dir(str(root / "run_squad"), "squad", {
        "task": "squad", "doc_stride": 16, "max_query_length": 8, "n_best_size": 4,
        "max_answer_length": 4, "version_2_with_negative": False,
        "null_score_diff_threshold": 0.0}, BertSpanLabeler, seed=5)
    return {"ner": export(build_module("ner", ner, None, True, max_seq_length=SEQ),
                          str(root / "models" / "ner")),
            "squad": export(build_module("squad", squad, None, True, max_seq_length=SEQ),
                            str(root / "models" / "squad"))}


@pytest.fixture(scope="module")
def loaded(exports):
    return {name: tf.saved_model.load(path) for name, path in exports.items()}


# One export, one request at the limit and one a byte over it, in a process with only
# tensorflow and tensorflow_text. Peak RSS is the kernel's VmHWM of this process's memory:
# its ru_maxrss starts at the RSS of the pytest process that started it (Linux carries
# the maximum across fork and exec), which would count pytest's exports.
FRESH_LIMITS = r"""
import json, resource, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tf-text ops)
assert not any(m.split(".")[0] in ("bert_tf", "export", "tasks") for m in sys.modules)
path, task, text_file, out_file = sys.argv[1:]
text = open(text_file, encoding="utf-8").read()
model = tf.saved_model.load(path)
f = model.signatures["serving_default"]
question = "where does john smith live?"
inputs = lambda *t: ({"text": list(t)} if task == "ner" else
                     {"question": [question] * len(t), "context": list(t)})
call = lambda *t: f(**{k: tf.constant(v) for k, v in inputs(*t).items()})
call("john smith lives in new york.")             # loaded and warmed up
def peak():
    try:
        with open("/proc/self/status") as status:
            return 1024 * int(next(l for l in status if l.startswith("VmHWM:")).split()[1])
    except OSError:     # not Linux: there ru_maxrss is this process's own (bytes on macOS)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = {"limit": int(model.max_text_bytes.numpy()), "before": peak()}
out = call(text)
result["outputs"] = {k: (v.numpy().astype(str) if v.dtype == tf.string else v.numpy())
                     .tolist() for k, v in out.items()}
# The text beside one word as long: spans of very different lengths in one batch.
pair = call("a" * len(text), text)
result["pair_rows"] = sorted({int(v.shape[0]) for v in pair.values()})
result["peak"] = peak()
try:
    call(text + "x")
    result["refused"] = None
except tf.errors.InvalidArgumentError as e:
    result["refused"] = [l for l in e.message.splitlines() if "assertion failed" in l]
json.dump(result, open(out_file, "w"))
"""


@pytest.mark.slow
@pytest.mark.parametrize("task", ["ner", "squad"])
def test_a_text_at_the_limit_is_answered_within_the_memory_budget(exports, task, tmp_path):
    """A 1 MiB text (the default --max_text_bytes) is answered with peak RSS under 2 GB,
    and so is a batch of it and a 1 MiB word (a [spans, longest span] tensor would take
    2e11 entries there); one byte more is refused with one line naming the input and the
    limit."""
    size = MAX_TEXT_BYTES
    text = long_text(size)
    (tmp_path / "text.txt").write_text(text, encoding="utf-8")
    (tmp_path / "fresh.py").write_text(FRESH_LIMITS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    done = subprocess.run([sys.executable, "-P", "fresh.py", exports[task], task, "text.txt",
                           "out.json"], cwd=str(tmp_path), env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads((tmp_path / "out.json").read_text())
    assert got["limit"] == size and got["pair_rows"] == [2]
    assert got["peak"] < PEAK_BUDGET_BYTES, got
    assert got["peak"] - got["before"] < GROWTH_BUDGET_BYTES, got
    name = "text" if task == "ner" else "context"
    assert got["refused"] == [f"assertion failed: [{name}: text of {size + 1} bytes exceeds "
                              f"the export limit of {size} bytes (--max_text_bytes)]"]
    out = got["outputs"]
    if task == "ner":
        # Every part of the text was tagged, up to its end, and spans point into it.
        n = out["num_entities"][0]
        assert n > 10_000 and max(out["end_char"][0][:n]) > size - 100
        for k in range(0, n, 997):
            start, end = out["start_char"][0][k], out["end_char"][0][k]
            assert text[start:end] == out["text"][0][k]
    else:
        start, end = out["start_char"][0], out["end_char"][0]
        assert 0 <= start < end and text[start:end] == out["answer"][0]


def assertion(fn, **inputs):
    """The one assertion line of the InvalidArgumentError fn(**inputs) raises."""
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        fn(**{k: tf.constant(v) for k, v in inputs.items()})
    lines = [l for l in info.value.message.splitlines() if "assertion failed" in l]
    assert len(lines) == 1, info.value.message
    return lines[0][len("assertion failed: ["):-1]


def test_bad_shapes_are_refused_naming_the_input(loaded):
    squad = loaded["squad"].signatures["serving_default"]
    assert assertion(squad, question=["a", "b"], context=["x", "y", "z"]) == \
        "question and context: batch sizes differ (2 and 3)"
    assert assertion(squad, question=["a", "b"], context=[["a", "b", "c"]] * 2) == \
        "context: expected a 1-D batch of strings, got shape [2,3]"
    assert assertion(squad, question="a", context=["b"]) == \
        "question: expected a 1-D batch of strings, got shape []"
    ner = loaded["ner"].signatures["serving_default"]
    assert assertion(ner, text=[["a"], ["b"]]) == \
        "text: expected a 1-D batch of strings, got shape [2,1]"
    examples = loaded["ner"].signatures["serve_examples"]
    assert assertion(examples, examples=[["a", "b"]]) == \
        "examples: expected a 1-D batch of strings, got shape [1,2]"
    tokenized = loaded["ner"].signatures["serve_tokenized"]
    ones = np.ones([2, 5], "int32")
    assert assertion(tokenized, token_ids=ones[0], segment_ids=ones[0] * 0,
                     padding_mask=ones[0]) == \
        "token_ids: expected int32 ids of shape [batch, seq], got shape [5]"
    assert assertion(tokenized, token_ids=ones, segment_ids=ones[:, :4] * 0,
                     padding_mask=ones) == \
        "token_ids and segment_ids: shapes differ ([2,5] and [2,4])"
    long = np.ones([1, 65], "int32")
    assert assertion(tokenized, token_ids=long, segment_ids=long * 0, padding_mask=long) == \
        "token_ids: 65 positions exceed max_position_embeddings of the model (64)"
    # The batch sizes agree and the shapes are right: answered.
    assert squad(question=tf.constant(["who?"]),
                 context=tf.constant(["john smith"]))["answer"].shape == (1,)


def test_tokenized_ids_outside_the_tables_are_refused(loaded):
    """A negative id would index the embedding table from its end (Keras' take): -5 gave
    the output of id vocab_size - 5. Refused like ids past the table, naming the input."""
    vocab = len(VOCAB)
    for name in ("ner", "squad"):
        f = loaded[name].signatures["serve_tokenized"]
        ids = np.array([[2, 20, 30, 3]], "int32")
        zeros, ones = np.zeros_like(ids), np.ones_like(ids)
        for bad, want in ((-5, -5), (vocab, vocab), (-1, -1)):
            wrong = ids.copy()
            wrong[0, 2] = bad
            assert assertion(f, token_ids=wrong, segment_ids=zeros, padding_mask=ones) == \
                f"token_ids: id {want} is outside [0, {vocab}) (vocab_size of the model)"
        segments = zeros.copy()
        segments[0, 1] = -1
        assert assertion(f, token_ids=ids, segment_ids=segments, padding_mask=ones) == \
            "segment_ids: id -1 is outside [0, 2) (type_vocab_size of the model)"
        # A mask value other than 0 or 1 weighs attention wrongly (2 or -1 changed the
        # answer): refused too.
        for bad in (2, -1):
            mask = ones.copy()
            mask[0, 2] = bad
            assert assertion(f, token_ids=ids, segment_ids=zeros, padding_mask=mask) == \
                f"padding_mask: value {bad} is not 0 (padding) or 1 (a token)"
        # In range, including both ends of the table: answered.
        edge = ids.copy()
        edge[0, 1:3] = [0, vocab - 1]
        out = f(token_ids=tf.constant(edge), segment_ids=tf.constant(zeros),
                padding_mask=tf.constant(ones))
        assert all(v.shape[0] == 1 for v in out.values())
