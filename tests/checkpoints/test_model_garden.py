"""TensorFlow Model Garden's TF2 encoder checkpoints, read as Model Garden's users hold
them. The fixtures were written by Model Garden 2.20 itself, with its outputs on fixed
ids (tests/fixtures/make_model_garden_fixtures.py, in a venv of its own)."""

import logging
import os
import shutil

import numpy as np
import pytest

from bert_tf.checkpoints.dispatch import CheckpointMismatchError, detect_format, load_encoder
from bert_tf.convert_checkpoint import main as convert_main
from tests import TESTS
from tests.testing import model_garden_outputs

FIXTURES = os.path.join(TESTS, "fixtures", "model_garden")
KINDS = ("encoder", "encoder_model_key", "encoder_v2")


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


def test_convert_checkpoint_reads_model_garden_and_writes_hf(tmp_path):
    """`convert_checkpoint --input` takes the Model Garden directory (auto-detected); the
    HF copy computes the same numbers."""
    out = tmp_path / "hf"
    assert convert_main(["--input", os.path.join(FIXTURES, "encoder"), "--output", str(out),
                         "--output_format", "hf"]) == str(out)
    x, want = model_garden_outputs()
    again = load_encoder(str(out))
    assert again.bert_config.hidden_act in ("gelu_new", "gelu_tanh")  # HF's name for it
    np.testing.assert_allclose(np.asarray(again(x)["pooled_output"]),
                               want["encoder/pooled_output"], atol=1e-5)


@pytest.mark.parametrize("kind", ("encoder", "encoder_v2", "trainer"))
def test_model_garden_to_ours_to_model_garden_keeps_every_tensor(kind, tmp_path):
    """Model Garden -> ours -> `--output_format model_garden` -> ours: the same tensors,
    bit for bit, and the same config; the written files are BertEncoder's layout under
    `encoder` (and BertPretrainerV2's items when there are heads), "gelu" in
    bert_config.json as Model Garden reads it. (That Model Garden itself restores them and
    computes our numbers: make_model_garden_fixtures.py --restore, in its venv.)"""
    import json
    import tensorflow as tf
    from bert_tf.checkpoints.dispatch import read_checkpoint
    out = tmp_path / "mg"
    convert_main(["--input", os.path.join(FIXTURES, kind), "--output", str(out),
                  "--output_format", "model_garden"])
    before, after = read_checkpoint(os.path.join(FIXTURES, kind)), read_checkpoint(str(out))
    assert after.format == "model_garden" and after.config == before.config
    assert sorted(after.tensors) == sorted(before.tensors)
    for name, value in before.tensors.items():
        assert np.array_equal(after.tensors[name], value), name
    assert json.loads((out / "bert_config.json").read_text())["hidden_act"] == "gelu"
    names = {n for n, _ in tf.train.list_variables(str(out / "bert_model.ckpt"))}
    assert "encoder/layer_with_weights-4/_attention_layer/_query_dense/kernel/" \
           ".ATTRIBUTES/VARIABLE_VALUE" in names
    assert "save_counter/.ATTRIBUTES/VARIABLE_VALUE" in names
    heads = {"masked_lm/dense/kernel", "next_sentence..pooler_dense/kernel",
             "model/classification_heads/0/out_proj/kernel"}
    written = {n.rsplit("/.ATTRIBUTES", 1)[0] for n in names}
    assert heads <= written if kind == "trainer" else not heads & written


def test_an_exact_gelu_model_is_written_with_a_warning(tmp_path, minilm_dir, caplog):
    """MiniLM computes the exact GELU, which Model Garden cannot: the write says so."""
    with caplog.at_level(logging.WARNING):
        convert_main(["--input", str(minilm_dir), "--output", str(tmp_path / "mg"),
                      "--output_format", "model_garden"])
    assert any("uses the exact form" in r.getMessage() for r in caplog.records)
    assert load_encoder(str(tmp_path / "mg")).bert_config.hidden_act == "gelu_tanh"


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
    size = data.stat().st_size
    data.write_bytes(data.read_bytes()[: size // 2])
    with pytest.raises(ValueError) as e:
        load_encoder(str(path))
    assert str(e.value) == (f"{path}/bert_model.ckpt: unreadable checkpoint: bert_model.ckpt."
                            f"data-00000-of-00001 is cut short ({size // 2:,} bytes; its "
                            f"index expects {size:,})")


def pretraining_inputs(found):
    x, _ = model_garden_outputs()
    return x, dict(x, masked_lm_positions=found["masked_lm_positions"])


def test_trainer_checkpoint_computes_model_gardens_pretraining_outputs(caplog):
    """What Model Garden's trainer leaves after a step of its masked_lm task (ckpt-1 +
    `checkpoint`, optimizer slots beside, params.yaml the only config): read whole, heads
    included, the config from the YAML; the masked-LM and next-sentence logits and the
    sequence output within 1e-5 of Model Garden's. The next-sentence head's dense layer
    becomes the pooler, and the load says so."""
    from bert_tf.checkpoints.dispatch import load_pretrainer, read_checkpoint
    path = os.path.join(FIXTURES, "trainer")
    assert not os.path.exists(os.path.join(path, "bert_config.json"))
    assert detect_format(path) == "model_garden"
    checkpoint = read_checkpoint(path)
    assert checkpoint.config.num_hidden_layers == 2 and checkpoint.config.vocab_size == 60
    assert checkpoint.config.initializer_range == 0.3
    assert any("/.OPTIMIZER_SLOT/" in n for n in checkpoint.ignored)
    assert any("layer_with_weights-6/kernel" in n for n in checkpoint.ignored)  # its pooler
    with caplog.at_level(logging.WARNING):
        model = load_pretrainer(path)  # strict: every head tensor is there
    assert any("next-sentence head's dense layer" in r.getMessage() for r in caplog.records)
    found = np.load(os.path.join(FIXTURES, "outputs.npz"))
    x, xm = pretraining_inputs(found)
    out = model(xm)
    np.testing.assert_allclose(np.asarray(out["mlm_logits"]), found["trainer/mlm_logits"],
                               atol=1e-5)
    np.testing.assert_allclose(np.asarray(out["nsp_logits"]), found["trainer/next_sentence"],
                               atol=1e-5)
    mask = x["padding_mask"][..., None].astype(bool)
    got = np.asarray(model.encoder(x)["sequence_output"])
    np.testing.assert_allclose(np.where(mask, got, 0),
                               np.where(mask, found["trainer/sequence_output"], 0), atol=1e-5)


def test_converted_pretrainer_has_the_masked_lm_and_no_next_sentence_head(tmp_path):
    """tf2_bert_encoder_checkpoint_converter's pretrainer (checkpoint items `encoder`,
    `masked_lm` and `model` beside): the masked LM matches Model Garden; it has no
    next-sentence head, so a strict load names those tensors and allow_missing_heads
    loads the rest."""
    from bert_tf.checkpoints.dispatch import load_pretrainer
    path = os.path.join(FIXTURES, "pretrainer")
    with pytest.raises(CheckpointMismatchError, match="cls/seq_relationship/output_weights"):
        load_pretrainer(path)
    model = load_pretrainer(path, allow_missing_heads=True)
    found = np.load(os.path.join(FIXTURES, "outputs.npz"))
    x, xm = pretraining_inputs(found)
    np.testing.assert_allclose(np.asarray(model(xm)["mlm_logits"]),
                               found["pretrainer/mlm_logits"], atol=1e-5)
    np.testing.assert_allclose(np.asarray(model.encoder(x)["pooled_output"]),
                               found["pretrainer/pooled_output"], atol=1e-5)


def test_trainer_checkpoint_converts_to_google_with_its_heads(tmp_path):
    """`convert_checkpoint` takes the trainer's model_dir and writes a google TF1
    checkpoint that computes the same pretraining logits."""
    from bert_tf.checkpoints.dispatch import load_pretrainer
    out = tmp_path / "google"
    convert_main(["--input", os.path.join(FIXTURES, "trainer"), "--output", str(out),
                  "--output_format", "google"])
    found = np.load(os.path.join(FIXTURES, "outputs.npz"))
    _, xm = pretraining_inputs(found)
    out = load_pretrainer(str(out), input_format="google")(xm)
    np.testing.assert_allclose(np.asarray(out["nsp_logits"]), found["trainer/next_sentence"],
                               atol=1e-5)


@pytest.mark.parametrize("edit, message", [
    (lambda y: y.replace("norm_first: false", "norm_first: true"), "norm_first: true"),
    (lambda y: y.replace("embedding_size: null", "embedding_size: 16"),
     "embedding_size 16 differs from hidden_size 32"),
    (lambda y: y.replace("      type: bert", "      type: mobilebert"),
     "encoder type 'mobilebert' is not BERT"),
    (lambda y: y.replace("mlm_activation: gelu", "mlm_activation: relu"),
     "mlm_activation 'relu' differs"),
    (lambda y: y.replace("task:", "task: [", 1), "not valid YAML"),
    (lambda y: "runtime: {}\n", "no BERT encoder config"),
])
def test_a_foreign_params_yaml_is_one_error(tmp_path, edit, message):
    path = tmp_path / "trainer"
    shutil.copytree(os.path.join(FIXTURES, "trainer"), path)
    yaml_file = path / "params.yaml"
    yaml_file.write_text(edit(yaml_file.read_text()))
    with pytest.raises(ValueError, match=message) as e:
        load_encoder(str(path))
    assert "\n" not in str(e.value) and "params.yaml" in str(e.value)


def test_an_encoder_yaml_given_as_the_config_file(tmp_path):
    """An encoder config in YAML (`type: bert` + its block), named with
    bert_config_file, stands in for bert_config.json."""
    path = tmp_path / "mg"
    shutil.copytree(os.path.join(FIXTURES, "encoder"), path)
    (path / "bert_config.json").unlink()
    config = tmp_path / "encoder.yaml"
    config.write_text("type: bert\nbert:\n  vocab_size: 60\n  hidden_size: 32\n"
                      "  num_layers: 2\n  num_attention_heads: 4\n  intermediate_size: 64\n"
                      "  max_position_embeddings: 16\n")
    x, want = model_garden_outputs()
    encoder = load_encoder(str(path), bert_config_file=str(config))
    np.testing.assert_allclose(np.asarray(encoder(x)["pooled_output"]),
                               want["encoder/pooled_output"], atol=1e-5)
