"""The classification family's export (tasks/families/classification/serving.py): a pair
classifier's and a regressor's signatures against the Keras model and the family's Python
post-processing, short texts at their own length, hostile inputs, bfloat16, frozen
weights, and saved_model_cli on string inputs. The runs are conftest.py's
(`classifier_runs`, tests/task_runs.py); every family's exports together:
tests/export/test_export_tasks.py."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from export.saved_model import build_module
from tests.task_runs import (CONTEXTS, ENDINGS, SAVED_MODEL_CLI, SEQ, TEXTS_A, TEXTS_B,
                             assert_invalid_argument, example, hostile_batch,
                             loaded_export, python_classify, python_swag, traced)


def test_classification_signatures_equal_keras_and_python(classifier_runs):
    run, path = classifier_runs["pair"]
    loaded = loaded_export(path)
    assert set(loaded.signatures) == {"serving_default", "serve_tokenized", "serve_examples"}
    want, inputs = python_classify(run, TEXTS_A, TEXTS_B)
    got = loaded.signatures["serving_default"](text_a=tf.constant(TEXTS_A),
                                               text_b=tf.constant(TEXTS_B))
    np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=1e-5)
    assert got["label_id"].numpy().tolist() == want["label_ids"].tolist()
    assert [x.decode() for x in got["label"].numpy()] == want["labels"]
    assert len(set(want["labels"])) > 1          # the random model does decide
    tokenized = loaded.signatures["serve_tokenized"](**inputs)
    np.testing.assert_allclose(tokenized["probabilities"], want["probabilities"], atol=1e-5)
    examples = [example(text_a=a, text_b=b) for a, b in zip(TEXTS_A, TEXTS_B)]
    from_examples = loaded.signatures["serve_examples"](examples=tf.constant(examples))
    np.testing.assert_allclose(from_examples["probabilities"], want["probabilities"],
                               atol=1e-5)

    run, signatures = classifier_runs["single"]
    want, _ = python_classify(run, TEXTS_A)
    score = signatures(text_a=tf.constant(TEXTS_A))
    assert set(score) == {"score"}
    np.testing.assert_allclose(score["score"], want["scores"], atol=1e-5)


def test_short_texts_run_at_their_longest_with_the_probabilities_of_max_padding(
        classifier_runs):
    """The text signature cuts padding that no text of the batch reaches; the
    probabilities equal those of the same texts padded to max_seq_length."""
    run, path = classifier_runs["pair"]
    loaded = loaded_export(path)
    texts_a = ["the dog", "paris is the capital", "who lives in new york?"]
    texts_b = ["a fox", "", "john smith"]
    want, inputs = python_classify(run, texts_a, texts_b)        # padded to SEQ
    lengths = inputs["padding_mask"].numpy().sum(1)
    assert inputs["padding_mask"].shape[1] == SEQ and lengths.max() <= 16 < SEQ
    got = loaded.signatures["serving_default"](text_a=tf.constant(texts_a),
                                               text_b=tf.constant(texts_b))
    np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=1e-5)
    # Alone, each text runs at its own width (one graph, no retracing): same answers.
    for i in range(3):
        one = loaded.signatures["serving_default"](text_a=tf.constant(texts_a[i:i + 1]),
                                                   text_b=tf.constant(texts_b[i:i + 1]))
        np.testing.assert_allclose(one["probabilities"][0], want["probabilities"][i],
                                   atol=1e-5)


def test_classification_hostile_inputs(classifier_runs):
    """Listed inputs -> defined outputs; batch of 0 -> empty outputs; mismatched pair
    sizes and a tf.Example missing a feature -> InvalidArgument."""
    signatures = loaded_export(classifier_runs["pair"][1]).signatures
    f = signatures["serving_default"]
    texts = hostile_batch()
    out = f(text_a=texts, text_b=tf.reverse(texts, [0]))
    probabilities = out["probabilities"].numpy()
    assert probabilities.shape == (len(texts), 3) and np.isfinite(probabilities).all()
    np.testing.assert_allclose(probabilities.sum(1), 1.0, atol=1e-6)
    empty = f(text_a=tf.constant([], tf.string), text_b=tf.constant([], tf.string))
    assert empty["probabilities"].shape == (0, 3) and empty["label"].shape == (0,)
    assert_invalid_argument(f, text_a=tf.constant(["a", "b"]), text_b=tf.constant(["a"]))
    assert_invalid_argument(signatures["serve_examples"],
                            examples=tf.constant([example(text_a="only a")]))
    single = classifier_runs["single"][1]
    assert np.isfinite(single(text_a=texts)["score"].numpy()).all()


def test_classification_bfloat16_export_is_close_to_float32(classifier_runs):
    """--dtype bfloat16: the run's float32 weights computing in bfloat16, float32 out.
    (The accuracy delta on real weights is measured by bench/serving.py --bf16_accuracy,
    see docs/serving.md.)"""
    run, _ = classifier_runs["pair"]
    module = build_module("classification", run, None, True, dtype="bfloat16")
    assert module.model.get_layer("classifier").compute_dtype == "bfloat16"
    got = traced(module)(text_a=tf.constant(TEXTS_A), text_b=tf.constant(TEXTS_B))
    want, _ = python_classify(run, TEXTS_A, TEXTS_B)
    assert got["probabilities"].dtype == tf.float32
    np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=0.05)
    assert not np.allclose(got["probabilities"], want["probabilities"], atol=1e-6)


def test_frozen_weights_export_answers_as_the_variables_one(classifier_runs, swag_run,
                                                           frozen_pair_export):
    """--freeze_weights: the weights as constants. The SavedModel, loaded by TF Serving's
    session loader, answers as the Keras model; it saves no variable of the model; the
    bfloat16 one is as close to float32 as the bfloat16 export with variables; and a
    model with [batch, choices, seq] inputs (SWAG) freezes the same way."""
    run, _ = classifier_runs["pair"]
    path = frozen_pair_export
    saved = [name for name, _ in tf.train.list_variables(
        os.path.join(path, "variables", "variables"))]
    assert not any("kernel" in n or "embeddings" in n for n in saved), saved
    want, _ = python_classify(run, TEXTS_A, TEXTS_B)
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        sig = meta.signature_def["serving_default"]
        got = session.run(sig.outputs["probabilities"].name,
                          {sig.inputs["text_a"].name: np.array(TEXTS_A, object),
                           sig.inputs["text_b"].name: np.array(TEXTS_B, object)})
    np.testing.assert_allclose(got, want["probabilities"], atol=1e-5)

    frozen = traced(build_module("classification", run, None, True, dtype="bfloat16",
                                 freeze_weights=True))
    plain = traced(build_module("classification", run, None, True, dtype="bfloat16"))
    texts = dict(text_a=tf.constant(TEXTS_A), text_b=tf.constant(TEXTS_B))
    frozen_error = np.abs(frozen(**texts)["probabilities"] - want["probabilities"]).max()
    plain_error = np.abs(plain(**texts)["probabilities"] - want["probabilities"]).max()
    # As close to float32 as the bfloat16 export with variables, and really bfloat16.
    assert 1e-6 < frozen_error < 0.05 and frozen_error <= plain_error + 0.01

    swag, _ = swag_run
    want, _ = python_swag(swag, CONTEXTS, ENDINGS)
    got = traced(build_module("swag", swag, freeze_weights=True))(
        context=tf.constant(CONTEXTS), endings=tf.constant(ENDINGS))
    np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=1e-5)


@pytest.mark.slow
def test_saved_model_cli_runs_classification_with_string_inputs(classifier_runs, tmp_path):
    run, path = classifier_runs["pair"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-c", SAVED_MODEL_CLI, "run", "--dir", path, "--tag_set", "serve",
         "--signature_def", "serving_default", "--input_exprs",
         f"text_a={TEXTS_A[:2]!r};text_b={TEXTS_B[:2]!r}", "--outdir", str(tmp_path / "cli")],
        capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    want, _ = python_classify(run, TEXTS_A[:2], TEXTS_B[:2])
    np.testing.assert_allclose(np.load(tmp_path / "cli" / "probabilities.npy"),
                               want["probabilities"], atol=1e-5)
    labels = np.load(tmp_path / "cli" / "label.npy", allow_pickle=True)
    assert [x.decode() for x in labels] == want["labels"]
