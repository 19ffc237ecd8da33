"""The NER family's export (tasks/families/ner/serving.py): the vectorised chunker against
conlleval, the signatures against the Keras model and the family's Python path (windows
included), and hostile inputs. The run is conftest.py's (`ner_run`, tests/task_runs.py);
every family's exports together: tests/export/test_export_tasks.py."""

import json
import os
import shutil

import numpy as np
import tensorflow as tf

from export.saved_model import build_module
from tests import span_oracles
from tests.task_runs import (HOSTILE, NER_LABELS, NER_TEXTS, SEQ, entity_rows, example,
                             features_dict, hostile_batch, loaded_export, python_entities,
                             task_model, traced)


def test_ner_chunks_equal_conlleval():
    """The vectorised chunker against tasks.families.ner.conlleval.chunks on random tag sequences."""
    from tasks.families.ner.serving import chunk_spans, chunk_tables
    from tasks.families.ner import conlleval
    starts, ends, _ = chunk_tables(NER_LABELS)
    rng = np.random.default_rng(0)
    sequences = [rng.integers(0, len(NER_LABELS), rng.integers(0, 12)) for _ in range(400)]
    splits = np.concatenate([[0], np.cumsum([len(s) for s in sequences])])
    first, end = chunk_spans(tf.constant(np.concatenate(sequences), tf.int64),
                             tf.constant(splits, tf.int64), tf.constant(starts),
                             tf.constant(ends), len(NER_LABELS))
    got = list(zip(first.numpy().tolist(), end.numpy().tolist()))
    want = [(splits[i] + a, splits[i] + b) for i, s in enumerate(sequences)
            for a, b, _ in conlleval.chunks([NER_LABELS[t] for t in s])]
    assert got == want and len(want) > 300


def test_ner_signatures_equal_keras_and_python(ner_run):
    run, path = ner_run
    signatures = loaded_export(path).signatures
    want = python_entities(run, NER_TEXTS)
    got = signatures["serving_default"](text=tf.constant(NER_TEXTS))
    assert entity_rows(got) == want
    assert sum(len(w) for w in want) > 5          # the random tagger does find entities
    assert len(want[5]) > 0                       # ... in the text split into parts
    for text, entities in zip(NER_TEXTS, want):
        for e in entities:
            assert text[e["start_char"]:e["end_char"]] == e["text"]
    from_examples = signatures["serve_examples"](
        examples=tf.constant([example(text=t) for t in NER_TEXTS]))
    assert entity_rows(from_examples) == want
    # serve_tokenized: per-piece logits of the Keras model.
    from tasks.families.ner import task as ner
    model, config, tokenizer = task_model("ner", run)
    sentence = ner.Sentence(NER_TEXTS[0].split(), None, [], [])
    features, _ = ner.create_features([sentence], tokenizer, NER_LABELS, SEQ)
    tokenized = signatures["serve_tokenized"](**features_dict(features))
    np.testing.assert_allclose(tokenized["logits"], model(features_dict(features))["logits"],
                               atol=1e-5)


def test_ner_windows_equal_keras_and_python(ner_run, tmp_path):
    """A run that recorded a doc_stride: the signature reads long texts in overlapping
    windows, each word where it has the most context, as tasks.ner's Python path does,
    and answers otherwise than the consecutive parts of a run without one."""
    from tasks.families.ner import task as ner
    run = str(tmp_path / "windows")
    shutil.copytree(ner_run[0], run)
    with open(os.path.join(run, "ner_config.json")) as f:
        config = json.load(f)
    config["doc_stride"] = 7                               # windows of 22 pieces
    with open(os.path.join(run, "ner_config.json"), "w") as f:
        json.dump(config, f)
    texts = NER_TEXTS + ["john smith lives in new york and paris " * 12]
    got = entity_rows(traced(build_module("ner", run, None, True))(tf.constant(texts)))
    want = python_entities(run, texts)
    assert got == want
    plain = python_entities(ner_run[0], texts)
    assert want[:5] == plain[:5]                           # short texts: one window
    assert want[-1] != plain[-1]                           # a long one: other contexts
    tokenizer = task_model("ner", run)[2]
    sentence = ner.Sentence(texts[-1].split(), None)
    assert len(span_oracles.windows(
        [len(p) for p in tokenizer.encode(sentence.units)], SEQ - 2, 7)) > 10


def test_ner_hostile_inputs(ner_run):
    f = loaded_export(ner_run[1]).signatures["serving_default"]
    texts = hostile_batch()
    out = f(text=texts)
    counts = out["num_entities"].numpy()
    assert counts.shape == (len(texts),) and counts[0] == counts[1] == 0
    assert counts[2] > 100               # the 100 KB text is tagged all along, in parts
    ends = out["end_char"].numpy()
    assert ends.max() > 90_000           # ... up to its end
    for i in range(len(texts)):          # padding after the count, spans inside the text
        assert (out["start_char"].numpy()[i, counts[i]:] == -1).all()
        assert (out["start_char"].numpy()[i, :counts[i]] >= 0).all()
        assert (ends[i, :counts[i]] > out["start_char"].numpy()[i, :counts[i]]).all()
    want = python_entities(ner_run[0], [HOSTILE[3], HOSTILE[4], HOSTILE[5]])
    assert entity_rows(f(text=tf.constant([HOSTILE[3], HOSTILE[4], HOSTILE[5]]))) == want
    empty = f(text=tf.constant([], tf.string))
    assert empty["num_entities"].shape == (0,) and empty["label"].shape[0] == 0
