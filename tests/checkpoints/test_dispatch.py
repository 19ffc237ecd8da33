"""Checkpoint converters: parity with HF transformers on real weights (MiniLM), bit-exact
round trips through google TF1 and HF files, heads, both GELU variants, strict errors.

The reference implementation is `transformers` on torch CPU; google's TF1 loader is
stood in for by `tf.compat.v1.train.init_from_checkpoint` on variables created under
google's names, which is how run_pretraining.py / run_classifier.py read checkpoints.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.checkpoints import dispatch as checkpoints
from bert_tf.checkpoints.dispatch import CheckpointMismatchError
from bert_tf.base.config import BertConfig
from bert_tf.convert_checkpoint import main as convert_main
from bert_tf.models.encoder import BertEncoder
from bert_tf.models.pretrainer import BertPretrainer
from tests import ROOT
from tests.testing import lazy_module, torch_inputs

torch = lazy_module("torch")
transformers = lazy_module("transformers")
safetensors_numpy = lazy_module("safetensors.numpy")

TINY = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)


def google_names(num_layers, heads=True):
    """google-research/bert's variable names, spelled out (not derived from the code under
    test) so a renamed variable fails here."""
    names = ["bert/embeddings/word_embeddings", "bert/embeddings/token_type_embeddings",
             "bert/embeddings/position_embeddings", "bert/embeddings/LayerNorm/gamma",
             "bert/embeddings/LayerNorm/beta"]
    for i in range(num_layers):
        p = f"bert/encoder/layer_{i}/"
        for w in ("query", "key", "value"):
            names += [p + f"attention/self/{w}/kernel", p + f"attention/self/{w}/bias"]
        names += [p + "attention/output/dense/kernel", p + "attention/output/dense/bias",
                  p + "attention/output/LayerNorm/gamma", p + "attention/output/LayerNorm/beta",
                  p + "intermediate/dense/kernel", p + "intermediate/dense/bias",
                  p + "output/dense/kernel", p + "output/dense/bias",
                  p + "output/LayerNorm/gamma", p + "output/LayerNorm/beta"]
    names += ["bert/pooler/dense/kernel", "bert/pooler/dense/bias"]
    if heads:
        names += ["cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
                  "cls/predictions/transform/LayerNorm/gamma",
                  "cls/predictions/transform/LayerNorm/beta", "cls/predictions/output_bias",
                  "cls/seq_relationship/output_weights", "cls/seq_relationship/output_bias"]
    return names


def randomize(model, seed):
    """Random values in every variable (heads included: their init has zero biases and unit
    gammas, which would hide a swapped or untransposed tensor)."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        value = rng.normal(0.0, 0.2, tuple(w.shape)).astype("float32")
        if w.path.endswith("gamma"):
            value += 1.0
        w.assign(value)
    return model


def tiny_inputs(config, seed=0, batch=3, seq=12):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, config.vocab_size, (batch, seq)).astype("int32")
    mask = np.ones((batch, seq), "int32")
    mask[1, 8:] = 0
    mask[2, 4:] = 0
    segments = np.zeros((batch, seq), "int32")
    segments[0, 6:] = 1
    ids = ids * mask
    positions = np.array([[1, 3, 5], [0, 2, 7], [1, 2, 3]], "int32")
    return {"token_ids": ids, "segment_ids": segments, "padding_mask": mask}, positions


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def model_arrays(model):
    return {w.path: np.asarray(w.numpy()) for w in model.weights}


def save_v2(prefix, tensors):
    """Writes an arbitrary TF1 checkpoint (the op tf.compat.v1.train.Saver uses)."""
    names = list(tensors)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[n]) for n in names])


# -- real weights: all-MiniLM-L6-v2 against transformers --------------------------------

def check_against_reference(encoder, minilm, tol=1e-4):
    """Every position, padded ones included (their keys are masked the same way in both
    implementations, so their outputs must agree too), and the pooled [CLS] vector."""
    out = encoder(minilm["inputs"])
    seq_diff = max_diff(out["sequence_output"], minilm["hidden"])
    pooled_diff = max_diff(out["pooled_output"], minilm["pooled"])
    print(f"MiniLM vs transformers: sequence {seq_diff:.2e}, pooled {pooled_diff:.2e}")
    assert seq_diff < tol and pooled_diff < tol
    return out


def test_minilm_matches_transformers(minilm):
    encoder = checkpoints.load_encoder(minilm["path"])
    check_against_reference(encoder, minilm)
    # Sanity that the comparison has teeth: real, non-trivial activations.
    assert np.abs(minilm["hidden"]).max() > 1.0


def test_minilm_round_trip_hf_google_hf_is_bit_exact(minilm, tmp_path):
    encoder = checkpoints.load_encoder(minilm["path"])
    google_dir = checkpoints.save_checkpoint(encoder, tmp_path / "google", "google")
    assert sorted(os.listdir(google_dir)) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "checkpoint"]
    reader = tf.train.load_checkpoint(os.path.join(google_dir, "bert_model.ckpt"))
    assert sorted(reader.get_variable_to_shape_map()) == sorted(google_names(6, heads=False))

    again = checkpoints.load_encoder(google_dir)
    check_against_reference(again, minilm)
    hf_dir = checkpoints.save_checkpoint(again, tmp_path / "hf", "hf")

    original = safetensors_numpy.load_file(os.path.join(minilm["path"], "model.safetensors"))
    original = {k: v for k, v in original.items() if not k.endswith("position_ids")}
    written = safetensors_numpy.load_file(os.path.join(hf_dir, "model.safetensors"))
    assert sorted(written) == sorted(original)
    for name, value in original.items():
        assert written[name].dtype == value.dtype, name
        assert np.array_equal(written[name], value), name

    reloaded, info = transformers.BertModel.from_pretrained(hf_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with torch.no_grad():
        out = reloaded.eval()(**torch_inputs(minilm["inputs"]))
    assert np.array_equal(out.last_hidden_state.numpy(), minilm["hidden"])
    assert np.array_equal(out.pooler_output.numpy(), minilm["pooled"])


# -- heads -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pretrainer():
    return randomize(BertPretrainer.from_config_object(TINY), seed=1)


def test_pretrainer_exported_to_hf_matches_bert_for_pretraining(pretrainer, tmp_path):
    directory = checkpoints.save_checkpoint(pretrainer, tmp_path / "hf", "hf")
    reference, info = transformers.BertForPreTraining.from_pretrained(
        directory, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    # BertModel has no heads: the cls.* tensors are its only unexpected keys, nothing missing.
    _, info = transformers.BertModel.from_pretrained(directory, output_loading_info=True)
    assert not info["missing_keys"]
    assert info["unexpected_keys"] and all(k.startswith("cls.") for k in info["unexpected_keys"])

    inputs, positions = tiny_inputs(TINY)
    ours = pretrainer({**inputs, "masked_lm_positions": positions})
    with torch.no_grad():
        out = reference.eval()(**torch_inputs(inputs))
    # HF scores every position; ours only the masked ones: gather HF's at the same places.
    hf_mlm = np.take_along_axis(out.prediction_logits.numpy(), positions[:, :, None], axis=1)
    mlm_diff = max_diff(ours["mlm_logits"], hf_mlm)
    nsp_diff = max_diff(ours["nsp_logits"], out.seq_relationship_logits.numpy())
    print(f"heads vs BertForPreTraining: mlm {mlm_diff:.2e}, nsp {nsp_diff:.2e}")
    assert mlm_diff < 1e-4 and nsp_diff < 1e-4
    assert np.abs(hf_mlm).max() > 0.5 and np.abs(ours["nsp_logits"]).max() > 0.1


def test_google_round_trip_preserves_every_variable(pretrainer, tmp_path):
    directory = checkpoints.save_checkpoint(pretrainer, tmp_path / "google", "google",
                                            vocab_file=None)
    prefix = os.path.join(directory, "bert_model.ckpt")
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    assert sorted(shapes) == sorted(google_names(TINY.num_hidden_layers))
    H = TINY.hidden_size
    assert shapes["cls/seq_relationship/output_weights"] == [2, H]
    assert shapes["bert/encoder/layer_1/attention/self/key/kernel"] == [H, H]
    assert shapes["cls/predictions/output_bias"] == [TINY.vocab_size]
    # The stored NSP matrix is our kernel transposed; the key kernel the middle third of qkv.
    assert np.array_equal(reader.get_tensor("cls/seq_relationship/output_weights"),
                          pretrainer.nsp_head.kernel.numpy().T)
    assert np.array_equal(reader.get_tensor("bert/encoder/layer_1/attention/self/key/kernel"),
                          pretrainer.encoder.blocks[1].qkv.kernel.numpy()[:, H:2 * H])
    with open(os.path.join(directory, "bert_config.json")) as f:
        assert json.load(f)["num_hidden_layers"] == TINY.num_hidden_layers

    loaded = checkpoints.load_pretrainer(directory)
    before, after = model_arrays(pretrainer), model_arrays(loaded)
    assert sorted(before) == sorted(after)
    for name in before:
        assert np.array_equal(before[name], after[name]), name
    inputs, positions = tiny_inputs(TINY)
    a = pretrainer({**inputs, "masked_lm_positions": positions})
    b = loaded({**inputs, "masked_lm_positions": positions})
    assert np.array_equal(a["mlm_logits"], b["mlm_logits"])
    assert np.array_equal(a["nsp_logits"], b["nsp_logits"])


def test_google_checkpoint_loads_in_tf1_init_from_checkpoint(pretrainer, tmp_path):
    """google's run_pretraining.py creates these variables and calls init_from_checkpoint."""
    directory = checkpoints.save_checkpoint(pretrainer, tmp_path / "google", "google")
    prefix = os.path.join(directory, "bert_model.ckpt")
    expected = checkpoints.google_variables(pretrainer)
    with tf.Graph().as_default():
        variables = {name: tf.compat.v1.get_variable(name, shape=value.shape,
                                                     initializer=tf.compat.v1.zeros_initializer())
                     for name, value in expected.items()}
        tf.compat.v1.train.init_from_checkpoint(prefix, {"bert/": "bert/", "cls/": "cls/"})
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            values = session.run(variables)
    for name, value in expected.items():
        assert np.array_equal(values[name], value), name


def test_hf_pretraining_layout_with_decoder_and_legacy_names_loads(pretrainer, tmp_path):
    """transformers 4.x checkpoints may carry the tied decoder tensors, old LayerNorm
    gamma/beta names and a position_ids buffer; all read to the same model."""
    state = checkpoints.hf_state_dict(pretrainer)
    state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"]
    state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
    state["bert.embeddings.position_ids"] = np.arange(TINY.max_position_embeddings)[None]
    state["bert.embeddings.LayerNorm.gamma"] = state.pop("bert.embeddings.LayerNorm.weight")
    state["bert.embeddings.LayerNorm.beta"] = state.pop("bert.embeddings.LayerNorm.bias")
    os.makedirs(tmp_path / "hf")
    safetensors_numpy.save_file(state, str(tmp_path / "hf" / "model.safetensors"))
    TINY.to_json_file(str(tmp_path / "hf" / "config.json"), "hf")
    loaded = checkpoints.load_pretrainer(str(tmp_path / "hf"))
    before, after = model_arrays(pretrainer), model_arrays(loaded)
    for name in before:
        assert np.array_equal(before[name], after[name]), name

    # An untied decoder cannot be represented: refuse rather than drop it.
    state["cls.predictions.decoder.weight"] = state["cls.predictions.decoder.weight"] + 1.0
    safetensors_numpy.save_file(state, str(tmp_path / "hf" / "model.safetensors"))
    with pytest.raises(CheckpointMismatchError, match="decoder.weight differs"):
        checkpoints.load_pretrainer(str(tmp_path / "hf"))


# -- GELU variants -----------------------------------------------------------------------

@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new", "gelu_tanh"])
def test_gelu_variant_matches_transformers(hidden_act, tmp_path):
    config = TINY.replace(hidden_act=hidden_act)
    encoder = randomize(BertEncoder.from_config_object(config), seed=2)
    directory = checkpoints.save_checkpoint(encoder, tmp_path / "hf", "hf")
    with open(os.path.join(directory, "config.json")) as f:
        hf_act = json.load(f)["hidden_act"]
    # HF has no "gelu_tanh"; its tanh GELU is "gelu_new".
    assert hf_act == {"gelu_tanh": "gelu_new"}.get(hidden_act, hidden_act)
    reference = transformers.BertModel.from_pretrained(directory).eval()

    inputs, _ = tiny_inputs(config)
    mask = inputs["padding_mask"].astype(bool)
    ours = encoder(inputs)["sequence_output"].numpy()[mask]
    with torch.no_grad():
        theirs = reference(**torch_inputs(inputs)).last_hidden_state.numpy()[mask]
    diff = max_diff(ours, theirs)
    print(f"{hidden_act}: ours vs transformers {diff:.2e}")
    assert diff < 1e-5

    # The other variant, same weights, gives a visibly different answer: the comparison
    # above would catch a model that used the wrong GELU.
    other = "gelu" if hidden_act != "gelu" else "gelu_new"
    twin = BertEncoder.from_config_object(config.replace(hidden_act=other))
    checkpoints.restore(twin, checkpoints.read_checkpoint(directory))
    twin_diff = max_diff(twin(inputs)["sequence_output"].numpy()[mask], theirs)
    print(f"{hidden_act}: the {other} twin vs transformers {twin_diff:.2e}")
    assert twin_diff > 10 * 1e-5


# -- strictness --------------------------------------------------------------------------

def test_missing_unexpected_and_misshaped_are_reported_together(pretrainer, tmp_path):
    tensors = checkpoints.google_variables(pretrainer)
    del tensors["bert/encoder/layer_1/intermediate/dense/bias"]
    tensors["bert/pooler/dense/kernel"] = np.zeros((TINY.hidden_size, 7), "float32")
    tensors["output_weights"] = np.zeros((3, TINY.hidden_size), "float32")  # a classifier
    os.makedirs(tmp_path / "bad")
    save_v2(str(tmp_path / "bad" / "bert_model.ckpt"), tensors)
    TINY.to_json_file(str(tmp_path / "bad" / "bert_config.json"))

    with pytest.raises(CheckpointMismatchError) as caught:
        checkpoints.load_pretrainer(str(tmp_path / "bad"))
    error = caught.value
    assert error.missing == ["bert/encoder/layer_1/intermediate/dense/bias"]
    assert error.unexpected == ["output_weights"]
    assert error.mismatched == [("bert/pooler/dense/kernel", (32, 32), (32, 7))]
    message = str(error)
    for text in ("1 missing", "1 unexpected", "1 shape mismatches",
                 "layer_1/intermediate/dense/bias", "output_weights", "pooler/dense/kernel"):
        assert text in message
    assert "\n" not in message


def test_failed_load_leaves_the_model_untouched(pretrainer, tmp_path):
    tensors = checkpoints.google_variables(randomize(BertPretrainer.from_config_object(TINY), 5))
    tensors["bert/pooler/dense/bias"] = np.zeros((3,), "float32")
    os.makedirs(tmp_path / "bad")
    save_v2(str(tmp_path / "bad" / "bert_model.ckpt"), tensors)
    TINY.to_json_file(str(tmp_path / "bad" / "bert_config.json"))
    target = BertPretrainer.from_config_object(TINY)
    before = model_arrays(target)
    with pytest.raises(CheckpointMismatchError, match="pooler/dense/bias"):
        checkpoints.restore(target, str(tmp_path / "bad"))
    after = model_arrays(target)
    assert all(np.array_equal(before[n], after[n]) for n in before)


def test_hf_shape_mismatch_names_hf_tensor(pretrainer, tmp_path):
    state = checkpoints.hf_state_dict(pretrainer)
    state["bert.encoder.layer.0.intermediate.dense.weight"] = np.zeros((64, 31), "float32")
    os.makedirs(tmp_path / "hf")
    safetensors_numpy.save_file(state, str(tmp_path / "hf" / "model.safetensors"))
    TINY.to_json_file(str(tmp_path / "hf" / "config.json"), "hf")
    with pytest.raises(CheckpointMismatchError) as caught:
        checkpoints.load_pretrainer(str(tmp_path / "hf"))
    assert caught.value.mismatched == [
        ("encoder.layer.0.intermediate.dense.weight", (64, 32), (64, 31))]


def test_optimizer_state_is_ignored(pretrainer, tmp_path):
    tensors = checkpoints.google_variables(pretrainer)
    extra = {"global_step": np.array(7, "int64")}
    for name in ("bert/pooler/dense/kernel", "cls/predictions/output_bias"):
        extra[name + "/adam_m"] = np.zeros_like(tensors[name])
        extra[name + "/adam_v"] = np.zeros_like(tensors[name])
    os.makedirs(tmp_path / "train")
    save_v2(str(tmp_path / "train" / "bert_model.ckpt"), {**tensors, **extra})
    TINY.to_json_file(str(tmp_path / "train" / "bert_config.json"))
    checkpoint = checkpoints.read_checkpoint(str(tmp_path / "train"))
    assert sorted(checkpoint.ignored) == sorted(extra)
    target = BertPretrainer.from_config_object(TINY)
    report = checkpoints.restore(target, checkpoint)
    assert report.loaded == len(tensors)
    assert np.array_equal(target.mlm_head.output_bias.numpy(),
                          pretrainer.mlm_head.output_bias.numpy())


def test_encoder_checkpoint_into_pretrainer_needs_explicit_flag(pretrainer, tmp_path):
    directory = checkpoints.save_checkpoint(pretrainer.encoder, tmp_path / "enc", "google")
    with pytest.raises(CheckpointMismatchError) as caught:
        checkpoints.load_pretrainer(directory)
    assert sorted(caught.value.missing) == sorted(google_names(0)[7:])  # the 7 head tensors

    target = BertPretrainer.from_config_object(TINY)
    fresh_heads = target.nsp_head.kernel.numpy()
    report = checkpoints.restore(target, directory, allow_missing_heads=True)
    assert len(report.missing_heads) == 7 and "kept their initialisation" in str(report)
    assert np.array_equal(target.nsp_head.kernel.numpy(), fresh_heads)
    assert np.array_equal(target.encoder.pooler.kernel.numpy(),
                          pretrainer.encoder.pooler.kernel.numpy())

    # The other way round is the usual fine-tuning start: heads are reported, not loaded.
    full = checkpoints.save_checkpoint(pretrainer, tmp_path / "full", "google")
    encoder = BertEncoder.from_config_object(TINY)
    report = checkpoints.restore(encoder, full)
    assert len(report.unused_heads) == 7


def test_detect_format(pretrainer, tmp_path):
    google = checkpoints.save_checkpoint(pretrainer, tmp_path / "g", "google")
    hf = checkpoints.save_checkpoint(pretrainer, tmp_path / "h", "hf")
    keras_file = checkpoints.save_checkpoint(pretrainer, tmp_path / "m.keras", "keras")
    assert checkpoints.detect_format(google) == "google"
    assert checkpoints.detect_format(os.path.join(google, "bert_model.ckpt")) == "google"
    assert checkpoints.detect_format(os.path.join(google, "bert_model.ckpt.index")) == "google"
    assert checkpoints.detect_format(hf) == "hf"
    assert checkpoints.detect_format(keras_file) == "keras"
    with pytest.raises(FileNotFoundError):
        checkpoints.detect_format(str(tmp_path / "nothing"))
    os.makedirs(tmp_path / "empty")
    with pytest.raises(ValueError, match="no checkpoint found"):
        checkpoints.detect_format(str(tmp_path / "empty"))


# -- the command line --------------------------------------------------------------------

def test_cli_converts_google_to_hf_to_keras_and_back(pretrainer, tmp_path, capsys):
    google = checkpoints.save_checkpoint(pretrainer, tmp_path / "g", "google")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"tok{i}\n" for i in range(TINY.vocab_size)))
    # main returns the output path (exit status 0); a bad input raises SystemExit(1).
    assert convert_main(["--input", google, "--output", str(tmp_path / "h"),
                         "--output_format", "hf", "--vocab_file", str(vocab)]) == \
        str(tmp_path / "h")
    assert convert_main(["--input", str(tmp_path / "h"), "--output", str(tmp_path / "k.keras"),
                         "--output_format", "keras"]) == str(tmp_path / "k.keras")
    assert convert_main(["--input", str(tmp_path / "k.keras"), "--output", str(tmp_path / "g2"),
                         "--output_format", "google", "--vocab_file", str(vocab)]) == \
        str(tmp_path / "g2")
    out = capsys.readouterr().out
    assert "heads: yes" in out and out.count("done: ") == 3
    assert (tmp_path / "h" / "vocab.txt").read_text() == vocab.read_text()
    assert (tmp_path / "g2" / "vocab.txt").exists()
    # Nothing but the outputs: the temporary folders were renamed or removed.
    assert sorted(os.listdir(tmp_path)) == ["g", "g2", "h", "k.keras", "vocab.txt"]
    reader = tf.train.load_checkpoint(str(tmp_path / "g2" / "bert_model.ckpt"))
    for name, value in checkpoints.google_variables(pretrainer).items():
        assert np.array_equal(reader.get_tensor(name), value), name

    # Refuses to overwrite, with one line and a non-zero status.
    with pytest.raises(SystemExit) as exit_info:
        convert_main(["--input", google, "--output", str(tmp_path / "h"),
                      "--output_format", "hf"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "already exists" in err and "\n" not in err


def test_cli_mismatch_is_one_line(pretrainer, tmp_path, capsys):
    tensors = checkpoints.google_variables(pretrainer)
    del tensors["bert/embeddings/LayerNorm/beta"]
    os.makedirs(tmp_path / "bad")
    save_v2(str(tmp_path / "bad" / "bert_model.ckpt"), tensors)
    TINY.to_json_file(str(tmp_path / "bad" / "bert_config.json"))
    with pytest.raises(SystemExit) as exit_info:
        convert_main(["--input", str(tmp_path / "bad"), "--output", str(tmp_path / "out"),
                      "--output_format", "hf"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "bert/embeddings/LayerNorm/beta" in err
    assert "\n" not in err and not (tmp_path / "out").exists()


def test_cli_bad_path_exits_non_zero_with_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "bert_tf.convert_checkpoint", "--input", str(tmp_path / "nope"),
         "--output", str(tmp_path / "out"), "--output_format", "hf"],
        capture_output=True, text=True, cwd=ROOT,
        timeout=60)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "nope" in lines[0]
    assert not (tmp_path / "out").exists()


def test_vocab_beside_finds_the_checkpoints_vocab_or_names_the_flag(tmp_path):
    from bert_tf.checkpoints.dispatch import vocab_beside
    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    want = str(tmp_path / "vocab.txt")
    assert vocab_beside(str(tmp_path)) == want                            # a directory
    assert vocab_beside(str(tmp_path / "bert_model.ckpt")) == want        # a TF1 prefix
    assert vocab_beside(str(tmp_path), "other.txt") == "other.txt"        # given wins
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=f"^--checkpoint_dir {empty}: no vocab.txt beside"):
        vocab_beside(str(empty), flag="--checkpoint_dir")
    with pytest.raises(ValueError, match=r"^--init_checkpoint \(not given\): .*--vocab_file"):
        vocab_beside(None)


def test_bf16_and_f16_safetensors_are_read_without_torch(tmp_path):
    """numpy has no bfloat16: such files are read from the safetensors layout and widened
    to float32, bit-equal to torch's own widening."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    from bert_tf.checkpoints.formats.hf import _load_hf_tensors, _read_safetensors_widened
    g = torch.Generator().manual_seed(0)
    tensors = {"a.weight": torch.randn(3, 5, generator=g).to(torch.bfloat16),
               "b.bias": torch.randn(7, generator=g).to(torch.float16),
               "c.ids": torch.arange(4, dtype=torch.int64)}
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    out = _load_hf_tensors(str(tmp_path))
    assert out["a.weight"].dtype == np.float32 and out["a.weight"].shape == (3, 5)
    np.testing.assert_array_equal(out["a.weight"], tensors["a.weight"].float().numpy())
    np.testing.assert_array_equal(out["b.bias"], tensors["b.bias"].float().numpy())
    np.testing.assert_array_equal(out["c.ids"], np.arange(4))
    assert float(np.abs(out["a.weight"]).max()) > 0.1   # not all zeros
    # The layout reader (safetensors versions whose numpy reader refuses bfloat16).
    raw = _read_safetensors_widened(str(tmp_path / "model.safetensors"))
    assert {k: (v.dtype, v.tolist()) for k, v in raw.items()} == \
        {k: (v.dtype, v.tolist()) for k, v in out.items()}
