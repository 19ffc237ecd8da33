"""keras-hub's BERT to our models and back (bert_tf/checkpoints/formats/keras_hub.py), on real MiniLM
weights: weights bit-exact both ways, outputs equal to keras-hub's own on the same
weights, presets written and read, the HF -> ours -> keras-hub -> ours round trip."""

import os
import subprocess
import sys

import keras
import keras_hub
import numpy as np
import pytest

import bert_tf
from bert_tf.checkpoints import dispatch as checkpoints
from bert_tf.checkpoints.formats import keras_hub as khf
from bert_tf.base.config import BertConfig
from tests import ROOT



def numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def assert_same_weights(a, b, skip=()):
    """`a` and `b` have the same weights, in order, `a`'s under `skip` left out."""
    kept = [x for x in a.weights if not any(s in x.path for s in skip)]
    assert kept and len(kept) == len(b.weights)
    for x, y in zip(kept, b.weights):
        assert np.array_equal(numpy(x), numpy(y)), x.path


def test_backbone_both_ways_on_minilm(minilm):
    ours = checkpoints.load_encoder(minilm["path"])
    backbone = khf.to_keras_hub(ours)
    assert isinstance(backbone, keras_hub.models.BertBackbone)
    back = khf.from_keras_hub(backbone)
    assert back.bert_config.hidden_act == "gelu_tanh"     # what BertBackbone computes
    assert_same_weights(ours, back)
    theirs = backbone(minilm["inputs"])
    again = back(minilm["inputs"])
    for key in ("sequence_output", "pooled_output"):
        diff = np.abs(numpy(theirs[key]) - numpy(again[key])).max()
        assert diff < 1e-5 * max(1.0, np.abs(numpy(theirs[key])).max()), (key, diff)
    # keras-hub's tanh GELU is not MiniLM's exact one: its outputs really differ.
    assert np.abs(numpy(theirs["sequence_output"]) - minilm["hidden"]).max() > 1e-3


def test_preset_round_trip_keeps_the_model(minilm, tmp_path):
    """HF -> ours -> keras-hub preset -> ours: the same weights and the same outputs as
    HF's (our bert_config.json in the preset keeps MiniLM's exact GELU); the preset is one
    keras-hub reads, tokenizer included."""
    pretrainer = checkpoints.load_pretrainer(minilm["path"], allow_missing_heads=True)
    preset = checkpoints.save_checkpoint(pretrainer, str(tmp_path / "preset"), "keras_hub",
                                         vocab_file=os.path.join(minilm["path"], "vocab.txt"))
    assert checkpoints.detect_format(preset) == "keras_hub"
    reloaded = checkpoints.load_pretrainer(preset, next_sentence="auto")
    assert reloaded.nsp_head is None                                # keras-hub has no NSP
    assert_same_weights(pretrainer, reloaded, skip=("nsp_head",))
    out = reloaded.encoder(minilm["inputs"])
    assert np.abs(numpy(out["sequence_output"]) - minilm["hidden"]).max() < 1e-4
    assert np.abs(numpy(out["pooled_output"]) - minilm["pooled"]).max() < 1e-4
    # keras-hub's own loaders read it: backbone weights, masked-LM task, tokenizer.
    masked_lm = keras_hub.models.BertMaskedLM.from_preset(preset, preprocessor=None)
    assert np.array_equal(numpy(masked_lm.masked_lm_head._bias),
                          numpy(pretrainer.mlm_head.output_bias))
    tokenizer = keras_hub.models.BertTokenizer.from_preset(preset)
    assert numpy(tokenizer(["Hello world"])).tolist() == [[7592, 2088]]   # uncased vocab


def test_masked_lm_and_classifier_heads_both_ways(minilm):
    config = BertConfig.from_dict({**checkpoints.read_checkpoint(minilm["path"]).config
                                   .to_dict(), "hidden_act": "gelu_tanh"})
    pretrainer = bert_tf.BertPretrainer.from_config_object(config)
    checkpoints.restore(pretrainer, minilm["path"], allow_missing_heads=True)
    masked_lm = khf.to_keras_hub(pretrainer)
    assert isinstance(masked_lm, keras_hub.models.BertMaskedLM)
    back = khf.from_keras_hub(masked_lm)
    assert back.nsp_head is None      # keras-hub has no next-sentence head: none made up
    assert_same_weights(pretrainer, back, skip=("nsp_head",))
    positions = np.array([[1, 2], [3, 4], [0, 5], [2, 3]][:len(minilm["inputs"]["token_ids"])],
                         "int32")
    ours = numpy(pretrainer({**minilm["inputs"], "masked_lm_positions": positions})
                 ["mlm_logits"])
    theirs = numpy(masked_lm({**minilm["inputs"], "mask_positions": positions}))
    # keras-hub's head: exact GELU, LayerNorm epsilon 1e-5 (ours: tanh here, 1e-12).
    assert np.abs(ours - theirs).max() < 0.02 * np.abs(theirs).max()
    assert (ours.argmax(-1) == theirs.argmax(-1)).mean() > 0.9

    classifier = bert_tf.BertClassifier(pretrainer.encoder, num_classes=3)
    text_classifier = khf.to_keras_hub(classifier)
    assert isinstance(text_classifier, keras_hub.models.BertTextClassifier)
    again = khf.from_keras_hub(text_classifier)
    assert isinstance(again, bert_tf.BertClassifier) and again.num_classes == 3
    assert_same_weights(classifier, again)
    logits = numpy(text_classifier(minilm["inputs"]))
    assert np.abs(numpy(classifier(minilm["inputs"])["logits"]) - logits).max() < 1e-5
    assert np.abs(numpy(again(minilm["inputs"])["logits"]) - logits).max() < 1e-5


def test_a_preset_of_another_size_is_refused_whole(minilm, tmp_path):
    small = keras_hub.models.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2,
                                          hidden_dim=64, intermediate_dim=128)
    small.save_to_preset(str(tmp_path / "small"))
    encoder = checkpoints.load_encoder(minilm["path"])
    before = [numpy(w).copy() for w in encoder.weights]
    with pytest.raises(checkpoints.CheckpointMismatchError, match="shape"):
        checkpoints.restore(encoder, str(tmp_path / "small"))
    assert all(np.array_equal(b, numpy(w)) for b, w in zip(before, encoder.weights))


def test_convert_checkpoint_writes_keras_hub(minilm, tmp_path):
    preset = str(tmp_path / "preset")
    result = subprocess.run([sys.executable, "-m", "bert_tf.convert_checkpoint", "--input",
                             minilm["path"], "--output", preset, "--output_format", "keras_hub"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "tanh GELU" in result.stderr     # the warning about keras-hub's activation
    assert sorted(os.listdir(preset)) == ["assets", "bert_config.json", "config.json",
                                          "metadata.json", "model.weights.h5",
                                          "tokenizer.json"]
    checkpoint = checkpoints.read_checkpoint(preset)
    assert checkpoint.format == "keras_hub" and not checkpoint.has_heads
    assert checkpoint.config.hidden_act == "gelu"   # from our bert_config.json
    encoder = checkpoints.load_encoder(preset)
    assert np.abs(numpy(encoder(minilm["inputs"])["sequence_output"])
                  - minilm["hidden"]).max() < 1e-4
