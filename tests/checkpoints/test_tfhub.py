"""TF Hub's BERT SavedModels, read as tfhub.dev's BERTs were made: the fixtures were
written by Model Garden 2.20's own official.nlp.tools.export_tfhub (encoder,
model_with_mlm, preprocessing; tests/fixtures/make_model_garden_fixtures.py), with the
SavedModels' own outputs on fixed ids."""

import os
import shutil

import numpy as np
import pytest

from bert_tf.checkpoints.dispatch import detect_format, load_encoder, load_pretrainer, read_checkpoint
from bert_tf.convert_checkpoint import main as convert_main
from tests import TESTS
from tests.testing import model_garden_outputs as expected

FIXTURES = os.path.join(TESTS, "fixtures", "model_garden")


def assert_encoder_outputs(encoder, kind):
    x, found = expected()
    out = encoder(x)
    mask = x["padding_mask"][..., None].astype(bool)
    got = np.asarray(out["sequence_output"])
    np.testing.assert_allclose(np.where(mask, got, 0),
                               np.where(mask, found[f"{kind}/sequence_output"], 0), atol=1e-5)
    np.testing.assert_allclose(np.asarray(out["pooled_output"]), found[f"{kind}/pooled_output"],
                               atol=1e-5)


@pytest.mark.parametrize("kind", ("tfhub_encoder", "tfhub_mlm"))
def test_saved_model_read_computes_what_the_saved_model_computes(kind):
    """Detected; the sizes read off the variables (no config file anywhere), the vocabulary
    and lower-casing from the SavedModel; sequence and pooled outputs within 1e-5 of the
    SavedModel's own."""
    path = os.path.join(FIXTURES, kind)
    assert not any(n.endswith(".json") for n in os.listdir(path))
    assert detect_format(path) == "tfhub"
    checkpoint = read_checkpoint(path)
    c = checkpoint.config
    assert (c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
            c.intermediate_size, c.max_position_embeddings, c.type_vocab_size) == \
        (60, 32, 2, 4, 64, 16, 2)
    assert c.hidden_act == "gelu_tanh"
    assert checkpoint.vocab_file == os.path.join(path, "assets", "vocab.txt")
    assert checkpoint.do_lower_case is True
    assert checkpoint.has_heads == (kind == "tfhub_mlm")
    assert_encoder_outputs(load_encoder(path), kind)


def test_model_with_mlm_gives_the_saved_models_masked_lm_logits():
    """`--export_type model_with_mlm`: the `mlm` sub-object's head, read; its logits within
    1e-5. It has no next-sentence head, so a strict load names those tensors."""
    from bert_tf.checkpoints.dispatch import CheckpointMismatchError
    path = os.path.join(FIXTURES, "tfhub_mlm")
    with pytest.raises(CheckpointMismatchError, match="cls/seq_relationship/output_weights"):
        load_pretrainer(path)
    model = load_pretrainer(path, allow_missing_heads=True)
    x, found = expected()
    out = model(dict(x, masked_lm_positions=found["masked_lm_positions"]))
    np.testing.assert_allclose(np.asarray(out["mlm_logits"]), found["tfhub_mlm/mlm_logits"],
                               atol=1e-5)


def test_the_vocabulary_comes_from_the_preprocessing_model_beside(tmp_path):
    """An encoder SavedModel without the vocabulary in its assets takes the one of the
    preprocessing SavedModel next to it, and asks it whether it lower-cases."""
    from bert_tf.checkpoints.formats.tfhub import _preprocessing_lower_case
    encoder = tmp_path / "encoder"
    shutil.copytree(os.path.join(FIXTURES, "tfhub_encoder"), encoder)
    (encoder / "assets" / "vocab.txt").unlink()
    shutil.copytree(os.path.join(FIXTURES, "tfhub_preprocess"), tmp_path / "preprocess")
    checkpoint = read_checkpoint(str(encoder))
    assert checkpoint.vocab_file == str(tmp_path / "preprocess" / "assets" / "vocab.txt")
    assert _preprocessing_lower_case(str(tmp_path / "preprocess")) is True


def test_convert_checkpoint_takes_a_saved_model(tmp_path):
    """TF Hub -> google TF1 with convert_checkpoint: the same numbers, and the vocabulary
    travels with it."""
    out = tmp_path / "google"
    convert_main(["--input", os.path.join(FIXTURES, "tfhub_encoder"), "--output", str(out),
                  "--output_format", "google"])
    assert (out / "vocab.txt").read_text() == \
        open(os.path.join(FIXTURES, "vocab.txt")).read()
    assert_encoder_outputs(load_encoder(str(out)), "tfhub_encoder")


def test_a_preprocessing_model_or_a_damaged_one_is_one_error(tmp_path):
    with pytest.raises(ValueError, match="a SavedModel without a BERT encoder's variables "
                                         r"\(a TF Hub preprocessing model\?"):
        load_encoder(os.path.join(FIXTURES, "tfhub_preprocess"))
    path = tmp_path / "encoder"
    shutil.copytree(os.path.join(FIXTURES, "tfhub_encoder"), path)
    data = path / "variables" / "variables.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:data.stat().st_size // 10])
    with pytest.raises(ValueError, match="unreadable SavedModel variables") as e:
        load_encoder(str(path))
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- writing

@pytest.fixture(scope="module")
def our_export(tmp_path_factory):
    """TF Hub's model_with_mlm -> ours (a pretrainer with its masked-LM head and, as TF
    Hub's, no next-sentence head) -> `--output_format tfhub`."""
    out = tmp_path_factory.mktemp("tfhub") / "bert"
    convert_main(["--input", os.path.join(FIXTURES, "tfhub_mlm"), "--output", str(out),
                  "--output_format", "tfhub"])
    model = load_pretrainer(str(out), next_sentence="auto")
    assert model.nsp_head is None
    return str(out), model


def test_tfhub_to_ours_to_tfhub_keeps_every_tensor(our_export):
    """Read back, our SavedModel holds TF Hub's tensors bit for bit, its config and its
    vocabulary and casing."""
    path, _ = our_export
    before, after = read_checkpoint(os.path.join(FIXTURES, "tfhub_mlm")), read_checkpoint(path)
    assert detect_format(path) == "tfhub" and after.config == before.config
    for name, value in before.tensors.items():
        assert np.array_equal(after.tensors[name], value), name
    assert after.do_lower_case is True
    assert open(after.vocab_file).read() == open(before.vocab_file).read()


def test_our_export_answers_as_tf_hub_users_call_it(our_export):
    """tf.saved_model.load: `__call__` (training False and True) and the serving_default
    signature give our encoder's outputs within 1e-5, `encoder_outputs` one per layer,
    `default` the pooled output; `mlm` gives our masked-LM logits; and Keras 3's
    TFSMLayer runs it (on `__call__`: a signature takes keyword inputs, a layer a dict)."""
    import keras
    import tensorflow as tf
    path, model = our_export
    x, found = expected()
    hub_inputs = {"input_word_ids": tf.constant(x["token_ids"], tf.int32),
                  "input_mask": tf.constant(x["padding_mask"], tf.int32),
                  "input_type_ids": tf.constant(x["segment_ids"], tf.int32)}
    want = model.encoder(x)
    loaded = tf.saved_model.load(path)
    for out in (loaded(hub_inputs), loaded(hub_inputs, training=False),
                loaded.signatures["serving_default"](**hub_inputs),
                keras.layers.TFSMLayer(path, call_endpoint="__call__")(hub_inputs)):
        np.testing.assert_allclose(out["pooled_output"], want["pooled_output"], atol=1e-5)
        np.testing.assert_allclose(out["default"], want["pooled_output"], atol=1e-5)
        np.testing.assert_allclose(out["sequence_output"], want["sequence_output"], atol=1e-5)
    assert len(loaded(hub_inputs)["encoder_outputs"]) == 2
    mlm = loaded.mlm(dict(hub_inputs, masked_lm_positions=tf.constant(
        found["masked_lm_positions"], tf.int32)))
    np.testing.assert_allclose(mlm["mlm_logits"], found["tfhub_mlm/mlm_logits"], atol=1e-5)
    assert len(loaded.trainable_variables) == len(model.encoder.trainable_weights)


def test_our_preprocessing_model_packs_as_our_preprocessor(our_export):
    """`preprocess/`: the default call on single texts, `tokenize` and `bert_pack_inputs`
    on pairs at another seq_length give what this project's tokenizer and packer give
    (google's FullTokenizer ids and truncation), Chinese included."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the ops a TF Hub user's process registers)
    from bert_tf.text.preprocessor import BertPreprocessor
    from bert_tf.text.tokenization import BertTokenizer
    path, _ = our_export
    pre = tf.saved_model.load(os.path.join(path, "preprocess"))
    texts = tf.constant(["The cat sat on the mat.", "Dogs ran, the SKY is blue!",
                         "中文 好 cats", ""])
    ours = BertTokenizer(os.path.join(FIXTURES, "vocab.txt"), do_lower_case=True)
    want = BertPreprocessor(ours, 16)(texts)
    got = pre(texts)  # 128, cut to the model's 16 positions
    assert got["input_word_ids"].shape == (4, 16)
    for hub, name in (("input_word_ids", "token_ids"), ("input_mask", "padding_mask"),
                      ("input_type_ids", "segment_ids")):
        assert np.array_equal(got[hub], want[name]), hub
    pair = pre.bert_pack_inputs([pre.tokenize(texts), pre.tokenize(texts[::-1])],
                                seq_length=9)
    want = BertPreprocessor(ours, 9)(texts, texts[::-1])
    assert np.array_equal(pair["input_word_ids"], want["token_ids"])
    assert np.array_equal(pair["input_type_ids"], want["segment_ids"])
    # Model Garden's own preprocessing model gives the same ids on these texts.
    _, found = expected()
    np.testing.assert_array_equal(pre(texts[:3])["input_word_ids"],
                                  found["tfhub_preprocess/input_word_ids"])


def test_hub_keras_layer_loads_and_fine_tunes_our_export(our_export):
    """Where TF Hub users load BERT: `hub.KerasLayer` under tf-keras, the preprocessing
    model in front, the encoder trainable. Its outputs are ours within 1e-5, and two
    fine-tuning steps of a classifier on top train the encoder's own weights."""
    import tensorflow as tf
    import tensorflow_hub as hub
    import tensorflow_text  # noqa: F401
    import tf_keras
    path, model = our_export
    x, _ = expected()
    encoder = hub.KerasLayer(path, trainable=True)
    out = encoder({"input_word_ids": tf.constant(x["token_ids"], tf.int32),
                   "input_mask": tf.constant(x["padding_mask"], tf.int32),
                   "input_type_ids": tf.constant(x["segment_ids"], tf.int32)})
    np.testing.assert_allclose(out["pooled_output"], model.encoder(x)["pooled_output"],
                               atol=1e-5)
    text = tf_keras.layers.Input(shape=(), dtype=tf.string)
    pooled = encoder(hub.KerasLayer(os.path.join(path, "preprocess"))(text))["pooled_output"]
    classifier = tf_keras.Model(text, tf_keras.layers.Dense(2)(pooled))
    classifier.compile(optimizer=tf_keras.optimizers.Adam(1e-2),
                       loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert len(encoder.trainable_weights) == len(model.encoder.trainable_weights)
    before = [w.numpy() for w in encoder.trainable_weights]
    texts = tf.constant(["the cat sat", "the dog ran", "blue sky", "hot sun"] * 2)
    history = classifier.fit(texts, tf.constant([0, 1, 0, 1] * 2), batch_size=4, epochs=1,
                             verbose=0)
    assert len(history.history["loss"]) == 1 and np.isfinite(history.history["loss"][0])
    moved = [not np.array_equal(b, w.numpy())
             for b, w in zip(before, encoder.trainable_weights)]
    assert sum(moved) > len(moved) // 2, moved
