"""TensorFlow Model Garden's TF2 encoder checkpoints, read as Model Garden's users hold
them. The fixtures were written by Model Garden 2.20 itself, with its outputs on fixed
ids (tests/fixtures/make_model_garden_fixtures.py, in a venv of its own)."""

import logging
import os
import shutil

import numpy as np
import pytest

from bert_tf.checkpoints import (CheckpointMismatchError, detect_format, load_encoder,
                                 writable_format_names)
from bert_tf.convert_checkpoint import main as convert_main

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "model_garden")
KINDS = ("encoder", "encoder_model_key", "encoder_v2")


def model_garden_outputs():
    found = np.load(os.path.join(FIXTURES, "outputs.npz"))
    x = {"token_ids": found["input_word_ids"], "segment_ids": found["input_type_ids"],
         "padding_mask": found["input_mask"]}
    return x, found


@pytest.mark.parametrize("kind", KINDS)
def test_encoder_computes_what_model_garden_computes(kind, caplog):
    """BertEncoder (positional names, under `encoder` or the older `model` key) and
    BertEncoderV2 (named attributes): detected, read, and within 1e-5 of Model Garden's
    own sequence and pooled outputs, padding included. Model Garden's "gelu" is its tanh
    form, and the load says so."""
    path = os.path.join(FIXTURES, kind)
    assert detect_format(path) == "model_garden"
    with caplog.at_level(logging.WARNING):
        encoder = load_encoder(path)
    assert encoder.bert_config.hidden_act == "gelu_tanh"
    assert any("tanh approximation" in r.getMessage() for r in caplog.records)
    x, want = model_garden_outputs()
    out = encoder(x)
    mask = x["padding_mask"][..., None].astype(bool)
    got = np.asarray(out["sequence_output"])
    np.testing.assert_allclose(np.where(mask, got, 0),
                               np.where(mask, want[f"{kind}/sequence_output"], 0), atol=1e-5)
    np.testing.assert_allclose(np.asarray(out["pooled_output"]), want[f"{kind}/pooled_output"],
                               atol=1e-5)


def test_the_exact_gelu_would_compute_other_numbers():
    """The GELU note matters: read as the erf form, the same weights differ from Model
    Garden by more than the tolerance above."""
    x, want = model_garden_outputs()
    encoder = load_encoder(os.path.join(FIXTURES, "encoder_v2"))
    exact = type(encoder).from_config_object(encoder.bert_config.replace(hidden_act="gelu"))
    exact.set_weights(encoder.get_weights())
    mask = x["padding_mask"][..., None].astype(bool)
    diff = np.abs(np.asarray(exact(x)["sequence_output"]) - want["encoder_v2/sequence_output"])
    assert np.where(mask, diff, 0).max() > 1e-4


def test_convert_checkpoint_reads_model_garden_and_writes_hf(tmp_path, capsys):
    """`convert_checkpoint --input` takes the Model Garden directory (auto-detected); the
    HF copy computes the same numbers. Model Garden is read, not written, so it is no
    --output_format."""
    out = tmp_path / "hf"
    assert convert_main(["--input", os.path.join(FIXTURES, "encoder"), "--output", str(out),
                         "--output_format", "hf"]) == str(out)
    x, want = model_garden_outputs()
    again = load_encoder(str(out))
    assert again.bert_config.hidden_act in ("gelu_new", "gelu_tanh")  # HF's name for it
    np.testing.assert_allclose(np.asarray(again(x)["pooled_output"]),
                               want["encoder/pooled_output"], atol=1e-5)
    assert "model_garden" not in writable_format_names()
    with pytest.raises(SystemExit):
        convert_main(["--input", os.path.join(FIXTURES, "encoder"), "--output",
                      str(tmp_path / "mg"), "--output_format", "model_garden"])
    assert "invalid choice: 'model_garden'" in capsys.readouterr().err


def test_a_config_with_more_layers_than_the_checkpoint_lists_what_is_missing(tmp_path):
    """The strict restore still decides: a bert_config.json that says 3 layers over a
    2-layer checkpoint names layer 2's tensors, and nothing is loaded."""
    import json
    path = tmp_path / "mg"
    shutil.copytree(os.path.join(FIXTURES, "encoder_v2"), path)
    config = json.loads((path / "bert_config.json").read_text())
    config["num_hidden_layers"] = 3
    (path / "bert_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointMismatchError, match="bert/encoder/layer_2/"):
        load_encoder(str(path))


def test_a_damaged_data_file_is_one_error(tmp_path):
    path = tmp_path / "mg"
    shutil.copytree(os.path.join(FIXTURES, "encoder"), path)
    data = path / "bert_model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"unreadable checkpoint, variable .*damaged") as e:
        load_encoder(str(path))
    assert "\n" not in str(e.value)
