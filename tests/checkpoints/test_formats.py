"""The checkpoint format registry (bert_tf/checkpoints/formats/core.py): the built-in formats'
order (what detection tries first and what convert_checkpoint lists), and a format defined
here, in one block and nothing else, converting a model end to end through
`python -m bert_tf.convert_checkpoint` and back with every tensor equal."""

import os

import numpy as np
import pytest

from bert_tf.checkpoints import dispatch as checkpoints
from bert_tf.checkpoints.formats.core import (
    GOOGLE_CONFIG_NAME, Checkpoint, CheckpointFormat, format_names, google_variables,
    register_format, split_model, unregister_format, writable_format_names)
from bert_tf.base.config import BertConfig
from bert_tf.convert_checkpoint import main as convert_main
from bert_tf.models.pretrainer import BertPretrainer

# -- a toy format: google's names in a numpy .npz beside google's bert_config.json ---------

NPZ_WEIGHTS = "weights.npz"


def _npz_detect(path):
    return os.path.isfile(os.path.join(path, NPZ_WEIGHTS))


def _npz_read(path, bert_config_file=None):
    config = BertConfig.from_json_file(bert_config_file or
                                       os.path.join(path, GOOGLE_CONFIG_NAME))
    with np.load(os.path.join(path, NPZ_WEIGHTS)) as f:
        tensors = {name: f[name] for name in f.files}
    return Checkpoint(path, "npz", config, tensors)


def _npz_write(model, path, vocab_file=None):
    os.makedirs(path, exist_ok=True)
    np.savez(os.path.join(path, NPZ_WEIGHTS), **google_variables(model))
    split_model(model)[0].bert_config.to_json_file(os.path.join(path, GOOGLE_CONFIG_NAME),
                                                   "google")
    return path


NPZ = CheckpointFormat("npz", detect=_npz_detect, read=_npz_read, write=_npz_write)

# -------------------------------------------------------------------------------------------

TINY = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)


@pytest.fixture
def npz_format():
    """The toy format, registered for one test only (the registry is process-wide)."""
    register_format(NPZ)
    try:
        yield NPZ
    finally:
        unregister_format(NPZ.name)


def random_pretrainer(seed):
    """Random values in every variable: the heads' initial zero biases and unit gammas
    would hide a swapped or dropped tensor."""
    model = BertPretrainer.from_config_object(TINY)
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(rng.normal(0.0, 0.2, tuple(w.shape)).astype("float32"))
    return model


def test_builtin_formats_in_the_order_the_command_lists_them():
    builtin = ("google", "hf", "keras", "keras_hub", "model_garden", "tfhub",
               "pretraining_run")
    assert format_names()[:7] == builtin
    assert checkpoints.FORMATS == builtin
    # A run_pretraining folder is read only: no --output_format choice.
    assert writable_format_names()[:6] == builtin[:6]
    # A read-only format (no writer) is no --output_format choice.
    register_format(CheckpointFormat("npz_read_only", _npz_detect, _npz_read, None))
    try:
        assert "npz_read_only" in format_names()
        assert "npz_read_only" not in writable_format_names()
    finally:
        unregister_format("npz_read_only")
    with pytest.raises(ValueError, match="already registered"):
        register_format(CheckpointFormat("hf", _npz_detect, _npz_read, _npz_write))
    assert format_names()[:7] == builtin


def test_a_registered_format_converts_end_to_end(npz_format, tmp_path, capsys):
    model = random_pretrainer(seed=3)
    expected = google_variables(model)
    google = checkpoints.save_checkpoint(model, tmp_path / "g", "google")

    # google -> npz: the registered name is an --output_format choice.
    assert convert_main(["--input", google, "--output", str(tmp_path / "n"),
                         "--output_format", "npz"]) == str(tmp_path / "n")
    assert checkpoints.detect_format(str(tmp_path / "n")) == "npz"
    written = np.load(tmp_path / "n" / NPZ_WEIGHTS)
    assert sorted(written.files) == sorted(expected)
    for name, value in expected.items():
        assert np.array_equal(written[name], value), name

    # npz -> google, the input format detected; then every tensor is the model's.
    assert convert_main(["--input", str(tmp_path / "n"), "--output", str(tmp_path / "g2"),
                         "--output_format", "google"]) == str(tmp_path / "g2")
    out = capsys.readouterr().out
    assert f"npz checkpoint, {len(expected)} tensors" in out and "heads: yes" in out
    back = checkpoints.read_checkpoint(str(tmp_path / "g2"))
    assert back.format == "google" and sorted(back.tensors) == sorted(expected)
    for name, value in expected.items():
        assert np.array_equal(back.tensors[name], value), name

    # The strict restore takes it too: a model loaded from it has the same weights.
    loaded = checkpoints.load_pretrainer(str(tmp_path / "n"), input_format="npz")
    for ours, theirs in zip(loaded.weights, model.weights):
        assert np.array_equal(ours.numpy(), theirs.numpy()), ours.path


def test_an_unregistered_format_is_refused(tmp_path):
    model = random_pretrainer(seed=4)
    with pytest.raises(ValueError, match=r"output_format must be one of \('google', 'hf', "
                                         r"'keras', 'keras_hub', 'model_garden', "
                                         r"'tfhub'\), got 'npz'"):
        checkpoints.save_checkpoint(model, tmp_path / "n", "npz")
    assert not (tmp_path / "n").exists()
    with pytest.raises(SystemExit):
        convert_main(["--input", str(tmp_path), "--output", str(tmp_path / "o"),
                      "--output_format", "npz"])
