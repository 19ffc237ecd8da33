"""The fast CPU inference path recommended in BertEncoder's docstring (Keras' own
`compile(jit_compile=True)` + `predict_on_batch`, i.e. XLA) computes the same numbers as
the plain call, and Keras does not silently fall back to the non-XLA graph."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.base.config import BertConfig
from bert_tf.models.encoder import BertEncoder
from tests.testing import random_inputs

TINY = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64)


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new"])
def test_xla_predict_matches_plain_call(hidden_act):
    config = BertConfig(**{**TINY.to_dict(), "hidden_act": hidden_act})
    encoder = BertEncoder.from_config_object(config)
    inputs = random_inputs(3, 12, TINY.vocab_size, pad_from=7)
    expected = encoder(inputs)
    encoder.compile(jit_compile=True)
    assert encoder.jit_compile is True  # Keras turns it off if a layer cannot be compiled
    got = encoder.predict_on_batch(inputs)
    # XLA fuses the LayerNorm and softmax reductions in another order: a few float32 ulps.
    for name in ("sequence_output", "pooled_output", "embedding_output"):
        np.testing.assert_allclose(got[name], expected[name].numpy(), atol=1e-6, rtol=1e-6,
                                   err_msg=name)
    assert len(got["encoder_outputs"]) == TINY.num_hidden_layers
    np.testing.assert_allclose(got["encoder_outputs"][0],
                               expected["encoder_outputs"][0].numpy(), atol=1e-6, rtol=1e-6)


def test_xla_predict_under_mixed_bfloat16():
    encoder = BertEncoder.from_config_object(TINY, dtype="mixed_bfloat16")
    inputs = random_inputs(3, 12, TINY.vocab_size, pad_from=7)
    expected = tf.cast(encoder(inputs)["sequence_output"], tf.float32).numpy()
    encoder.compile(jit_compile=True)
    got = encoder.predict_on_batch(inputs)["sequence_output"]
    assert got.dtype == tf.bfloat16.as_numpy_dtype
    # XLA keeps some fused intermediates in float32: equal up to bfloat16 rounding.
    assert np.abs(got.astype(np.float32) - expected).max() < 0.05


def test_importing_bert_tf_turns_on_onednn_unless_the_user_chose():
    import os
    import subprocess
    import sys
    code = "import os, bert_tf; print(os.environ['TF_ENABLE_ONEDNN_OPTS'])"
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "1"
    env["TF_ENABLE_ONEDNN_OPTS"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "0"
