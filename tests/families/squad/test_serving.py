"""The SQuAD family's export (tasks/families/squad/serving.py): v1.1 and v2.0 signatures
against the Keras model and the family's Python decoding, and hostile inputs. The runs are
conftest.py's (`squad_runs`, tests/task_runs.py); every family's exports together:
tests/export/test_export_tasks.py."""

import numpy as np
import tensorflow as tf

from tests.task_runs import (CONTEXTS_SQ, HOSTILE, QUESTIONS, assert_invalid_argument,
                             assert_same_answers, example, features_dict, hostile_batch,
                             loaded_export, python_squad, task_model)


def test_squad_signatures_equal_keras_and_python(squad_runs):
    run, path = squad_runs["v1"]
    signatures = loaded_export(path).signatures
    want, features = python_squad(run, QUESTIONS, CONTEXTS_SQ)
    assert max(np.bincount(features["example_index"])) >= 5     # windows do overlap
    got = signatures["serving_default"](question=tf.constant(QUESTIONS),
                                        context=tf.constant(CONTEXTS_SQ))
    assert "is_impossible" not in got
    assert_same_answers(got, want, v2=False)
    assert sum(bool(w and w["text"]) for w in want) >= 4         # real answers compared
    for context, result in zip(CONTEXTS_SQ, want):
        if result:
            assert context[result["start_char"]:result["end_char"]] == result["text"]
    from_examples = signatures["serve_examples"](examples=tf.constant(
        [example(question=q, context=c) for q, c in zip(QUESTIONS, CONTEXTS_SQ)]))
    assert_same_answers(from_examples, want, v2=False)
    model, _, _ = task_model("squad", run)
    tokenized = signatures["serve_tokenized"](**features_dict(features))
    # float32 through two graphs (the SavedModel's optimised one and Keras'): relative
    # (another initialisation gave 1.03e-5 at a logit of -1.04).
    np.testing.assert_allclose(tokenized["start_logits"],
                               model(features_dict(features))["start_logits"],
                               rtol=1e-5, atol=1e-5)

    run, v2 = squad_runs["v2"]
    want, _ = python_squad(run, QUESTIONS, CONTEXTS_SQ)
    got = v2(question=tf.constant(QUESTIONS), context=tf.constant(CONTEXTS_SQ))
    assert_same_answers(got, want, v2=True)
    scored = [i for i, result in enumerate(want) if result is not None]   # has pieces
    impossible = got["is_impossible"].numpy()[scored]
    assert 0 < impossible.sum() < len(scored)                   # both outcomes compared
    for i in scored:
        # A difference of two logit sums: absolute float32 rounding, not relative.
        np.testing.assert_allclose(got["null_score_diff"].numpy()[i],
                                   want[i]["null_score_diff"], rtol=1e-5, atol=1e-5)


def test_squad_hostile_inputs(squad_runs):
    f = loaded_export(squad_runs["v1"][1]).signatures["serving_default"]
    texts = hostile_batch()
    out = f(question=tf.reverse(texts, [0]), context=texts)
    starts, ends = out["start_char"].numpy(), out["end_char"].numpy()
    assert out["answer"].shape == (len(texts),)
    assert starts[0] == ends[0] == -1 and out["score"].numpy()[0] == -np.inf   # empty
    assert ends[2] > 0 and ends[2] - starts[2] < 100   # a span of the windowed 100 KB text
    answered = starts >= 0
    assert (ends[answered] > starts[answered]).all()
    want, _ = python_squad(squad_runs["v1"][0], HOSTILE[4:], HOSTILE[4:])
    got = f(question=tf.constant(HOSTILE[4:]), context=tf.constant(HOSTILE[4:]))
    assert_same_answers(got, want, v2=False)
    empty = f(question=tf.constant([], tf.string), context=tf.constant([], tf.string))
    assert empty["answer"].shape == (0,)
    assert_invalid_argument(f, question=tf.constant(["a"]), context=tf.constant(["a", "b"]))
    v2 = squad_runs["v2"][1](question=texts, context=texts)
    assert v2["is_impossible"].numpy()[0]
