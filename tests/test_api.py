"""The public Python API (`import bert_tf`): a classifier built, trained, saved, reloaded
and exported with nothing but `bert_tf`, Keras and the exporter; the docstring examples
of the task models run as written."""

import doctest
import os

import numpy as np
import pytest

import bert_tf
from tests.testing import WORDS, texts_and_labels

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS


def test_public_names_resolve():
    for name in bert_tf.__all__:
        assert getattr(bert_tf, name) is not None, name
    with pytest.raises(AttributeError):
        bert_tf.NoSuchThing  # noqa: B018


def test_classifier_train_save_reload_export_through_the_public_api(tmp_path, minilm_dir):
    import keras
    import tensorflow as tf

    from export.saved_model import build_module, export

    vocab = os.path.join(minilm_dir, "vocab.txt")
    tokenizer = bert_tf.BertTokenizer(vocab, do_lower_case=True)
    packer = bert_tf.BertPacker.from_tokenizer(tokenizer, seq_length=16)
    texts, labels = texts_and_labels(64, seed=0)
    inputs = packer(tokenizer(tf.constant(texts)))

    keras.utils.set_random_seed(1)
    model = bert_tf.BertClassifier(bert_tf.load_encoder(minilm_dir), num_classes=2)
    steps = 24
    optimizer = bert_tf.create_optimizer("adamw", 2e-4, steps, 2, model.trainable_variables)
    model.compile(optimizer=optimizer, loss={"logits": keras.losses.SparseCategoricalCrossentropy(
        from_logits=True)})
    history = model.fit(inputs, {"logits": labels}, batch_size=16, epochs=steps // 4,
                        verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.3 < losses[0], losses

    held_texts, held_labels = texts_and_labels(32, seed=7)
    held = packer(tokenizer(tf.constant(held_texts)))
    logits = np.asarray(model.predict_on_batch(held)["logits"])
    assert (logits.argmax(-1) == held_labels).mean() >= 0.9

    # .keras round trip: the class, the head's settings and the weights.
    model.save(tmp_path / "classifier.keras")
    reloaded = keras.saving.load_model(tmp_path / "classifier.keras")
    assert isinstance(reloaded, bert_tf.BertClassifier) and reloaded.num_classes == 2
    np.testing.assert_allclose(reloaded.predict_on_batch(held)["logits"], logits, atol=1e-6)

    # A run directory (what the tasks.* commands leave), read back by the loader.
    run = str(tmp_path / "run")
    bert_tf.save_task_model(model, run, vocab, max_seq_length=16,
                            labels=["negative", "positive"])
    loaded, config, loaded_tokenizer = bert_tf.load_task_model(run)
    assert config["labels"] == ["negative", "positive"] and config["task"] == "glue"
    assert not [f for f in os.listdir(run) if "tmp" in f]
    np.testing.assert_allclose(loaded.predict_on_batch(held)["logits"], logits, atol=1e-6)

    # Exported: raw text in, the same probabilities out.
    path = export(build_module("classification", run), str(tmp_path / "models"))
    served = tf.saved_model.load(path).signatures["serving_default"]
    out = served(text_a=tf.constant(held_texts))
    expected = tf.nn.softmax(logits).numpy()
    np.testing.assert_allclose(out["probabilities"].numpy(), expected, atol=1e-5)
    assert [s.decode() for s in out["label"].numpy()] == \
        [["negative", "positive"][i] for i in expected.argmax(-1)]


def test_save_task_model_checks_labels(tmp_path):
    encoder = bert_tf.BertEncoder(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32)
    model = bert_tf.BertClassifier(encoder, num_classes=3)
    with pytest.raises(ValueError, match="expected 3 names"):
        bert_tf.save_task_model(model, str(tmp_path / "run"), "vocab.txt", 16,
                                labels=["a", "b"])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("module", ["bert_tf.models.task_models", "bert_tf.models.encoder", "bert_tf.base.config",
                                    "bert_tf.text.packing", "bert_tf.models.pretrainer"])
def test_docstring_examples_run(module):
    import importlib
    failures, tried = doctest.testmod(importlib.import_module(module),
                                      optionflags=doctest.ELLIPSIS)
    assert tried >= 4 and failures == 0


@pytest.mark.parametrize("name,args,shape", [
    ("BertClassifier", {"num_classes": 1, "output_bias": 2.5}, (2, 5)),
    ("BertMultipleChoice", {"num_choices": 3}, (2, 3, 5)),
    ("BertTokenClassifier", {"num_labels": 4, "feature_based": True}, (2, 5)),
    ("BertSpanLabeler", {}, (2, 5))])
def test_task_models_round_trip(tmp_path, name, args, shape):
    """.keras and .weights.h5 round trips give the same outputs, class and settings."""
    import keras
    keras.utils.set_random_seed(3)
    encoder = bert_tf.BertEncoder(vocab_size=50, hidden_size=16, num_hidden_layers=4,
                                  num_attention_heads=2, intermediate_size=32)
    model = getattr(bert_tf, name)(encoder, **args)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 50, shape).astype("int32")
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids),
              "padding_mask": np.ones_like(ids)}
    expected = model.predict_on_batch(inputs)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert type(loaded) is type(model) and loaded.get_config() == model.get_config()
    model.save_weights(tmp_path / "m.weights.h5")
    keras.utils.set_random_seed(4)
    fresh = getattr(bert_tf, name)(bert_tf.BertEncoder(
        vocab_size=50, hidden_size=16, num_hidden_layers=4, num_attention_heads=2,
        intermediate_size=32), **args)
    fresh.load_weights(tmp_path / "m.weights.h5")
    for other in (loaded, fresh):
        got = other.predict_on_batch(inputs)
        assert sorted(got) == sorted(expected)
        for key in expected:
            np.testing.assert_allclose(got[key], expected[key], atol=1e-6)
