"""TF Hub's BERT SavedModels, read as tfhub.dev's BERTs were made: the fixtures were
written by Model Garden 2.20's own official.nlp.tools.export_tfhub (encoder,
model_with_mlm, preprocessing; tests/fixtures/make_model_garden_fixtures.py), with the
SavedModels' own outputs on fixed ids."""

import os
import shutil

import numpy as np
import pytest

from bert_tf.checkpoints import detect_format, load_encoder, load_pretrainer, read_checkpoint
from bert_tf.convert_checkpoint import main as convert_main

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "model_garden")


def expected():
    found = np.load(os.path.join(FIXTURES, "outputs.npz"))
    x = {"token_ids": found["input_word_ids"], "segment_ids": found["input_type_ids"],
         "padding_mask": found["input_mask"]}
    return x, found


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
    from bert_tf.checkpoints import CheckpointMismatchError
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
    from bert_tf.checkpoint_formats.tfhub import _preprocessing_lower_case
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
