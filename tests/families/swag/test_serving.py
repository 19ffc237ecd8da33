"""The SWAG family's export (tasks/families/swag/serving.py): its signatures against the
Keras model and the family's Python path, and hostile inputs. The run is conftest.py's
(`swag_run`, tests/task_runs.py); every family's exports together:
tests/export/test_export_tasks.py."""

import numpy as np
import pytest
import tensorflow as tf

from tests.task_runs import (CONTEXTS, ENDINGS, SEQ, assert_invalid_argument, example,
                             hostile_batch, loaded_export, python_swag, task_model)


def test_swag_signatures_equal_keras_and_python(swag_run):
    run, path = swag_run
    signatures = loaded_export(path).signatures
    want, inputs = python_swag(run, CONTEXTS, ENDINGS)
    got = signatures["serving_default"](context=tf.constant(CONTEXTS),
                                        endings=tf.constant(ENDINGS))
    np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=1e-5)
    assert got["choice"].numpy().tolist() == want["label_ids"].tolist()
    tokenized = signatures["serve_tokenized"](**inputs)
    np.testing.assert_allclose(tokenized["probabilities"], want["probabilities"], atol=1e-5)
    examples = [example(context=c, endings=e) for c, e in zip(CONTEXTS, ENDINGS)]
    from_examples = signatures["serve_examples"](examples=tf.constant(examples))
    np.testing.assert_allclose(from_examples["probabilities"], want["probabilities"],
                               atol=1e-5)
    # SWAG's own layout: sent2 + " " + ending packs as the joined ending.
    from tasks.families.swag import task as swag
    model, config, tokenizer = task_model("swag", run)
    split = swag.MultipleChoicePreprocessor(tokenizer, SEQ)(
        tf.constant(["the fox"]), tf.constant(["it is"]), tf.constant([["quick", "lazy",
                                                                         "long", "."]]))
    joined = signatures["serving_default"](
        context=tf.constant(["the fox"]),
        endings=tf.constant([["it is quick", "it is lazy", "it is long", "it is ."]]))
    np.testing.assert_allclose(joined["probabilities"],
                               tf.nn.softmax(model(split)["logits"]), atol=1e-5)


def test_swag_hostile_inputs(swag_run):
    f = loaded_export(swag_run[1]).signatures["serving_default"]
    texts = hostile_batch()
    endings = tf.stack([texts, tf.reverse(texts, [0]), tf.roll(texts, 1, 0),
                        tf.fill(tf.shape(texts), "")], axis=1)
    out = f(context=texts, endings=endings)
    assert out["probabilities"].shape == (len(texts), 4)
    np.testing.assert_allclose(out["probabilities"].numpy().sum(1), 1.0, atol=1e-6)
    empty = f(context=tf.constant([], tf.string), endings=tf.zeros([0, 4], tf.string))
    assert empty["probabilities"].shape == (0, 4) and empty["choice"].shape == (0,)
    assert_invalid_argument(f, context=tf.constant(["a", "b"]),
                            endings=tf.constant([["a", "b", "c", "d"]]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=(
            r"endings: expected strings of shape \[batch, 4\], got shape \[1,3\]")):
        f(context=tf.constant(["a"]), endings=tf.constant([["a", "b", "c"]]))
