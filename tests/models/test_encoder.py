import random

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.base.config import BertConfig
from bert_tf.models.encoder import BertEncoder
from tests.testing import random_inputs, run_model_test

TINY = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64)


def test_encoder_model_contract(tmp_path):
    inputs = random_inputs(3, 12, TINY.vocab_size)
    outputs, low = run_model_test(
        BertEncoder, TINY.to_dict(), inputs,
        {"sequence_output": (3, 12, 32), "pooled_output": (3, 32),
         "embedding_output": (3, 12, 32)}, tmp_path)
    assert len(outputs["encoder_outputs"]) == TINY.num_hidden_layers
    np.testing.assert_array_equal(outputs["encoder_outputs"][-1], outputs["sequence_output"])
    assert low["mixed_bfloat16"]["sequence_output"].dtype == tf.bfloat16
    assert low["mixed_float16"]["sequence_output"].dtype == tf.float16
    # Low precision stays close to float32 (LayerNorm keeps values O(1)).
    for policy, tol in (("mixed_bfloat16", 0.1), ("mixed_float16", 0.01)):
        got = tf.cast(low[policy]["sequence_output"], tf.float32).numpy()
        assert np.abs(got - outputs["sequence_output"]).max() < tol, policy


def test_config_object_and_kwargs_agree():
    a = BertEncoder.from_config_object(TINY)
    assert a.bert_config == TINY
    assert {k: a.get_config()[k] for k in TINY.to_dict()} == TINY.to_dict()
    # Parameter count of BERT's formula: embeddings + L blocks + pooler.
    h, i, v, p, t = 32, 64, 120, 64, 2
    block = 4 * h * h + 4 * h + 2 * h * i + i + h + 4 * h
    assert a.count_params() == (v + p + t) * h + 2 * h + 2 * block + h * h + h


def test_bert_base_has_110m_parameters():
    base = BertEncoder.from_config_object(BertConfig.preset("base"))
    assert 109_000_000 < base.count_params() < 110_000_000  # 109,482,240 in the paper's model


def test_padding_does_not_change_real_tokens():
    enc = BertEncoder.from_config_object(TINY)
    inputs = random_inputs(2, 10, TINY.vocab_size, pad_from=6)
    out = enc(inputs)["sequence_output"].numpy()
    # Row 1 again, truncated to its 6 real tokens: identical real-token outputs.
    short = {k: v[1:2, :6] for k, v in inputs.items()}
    np.testing.assert_allclose(enc(short)["sequence_output"].numpy()[0], out[1, :6], atol=1e-5)
    # Changing a padded token's id changes nothing for the real tokens.
    changed = {k: v.copy() for k, v in inputs.items()}
    changed["token_ids"][1, 8] = 7
    np.testing.assert_allclose(enc(changed)["sequence_output"].numpy()[1, :6], out[1, :6],
                               atol=1e-6)


def test_variable_sequence_length_and_pooler():
    enc = BertEncoder.from_config_object(TINY)
    for seq in (1, 5, 64):
        out = enc(random_inputs(2, seq, TINY.vocab_size, pad_from=seq))
        assert out["sequence_output"].shape == (2, seq, 32)
        cls = out["sequence_output"][:, 0, :].numpy()
        expected = np.tanh(cls @ enc.pooler.kernel.numpy() + enc.pooler.bias.numpy())
        np.testing.assert_allclose(out["pooled_output"].numpy(), expected, atol=1e-5)


def test_gelu_variants_differ_and_match_formulas():
    x = tf.constant(np.linspace(-4, 4, 101), tf.float32)
    from bert_tf.models.layers import activation_fn
    from scipy.special import erf
    xs = x.numpy().astype(np.float64)
    exact = 0.5 * xs * (1 + erf(xs / np.sqrt(2)))
    tanh = 0.5 * xs * (1 + np.tanh(np.sqrt(2 / np.pi) * (xs + 0.044715 * xs ** 3)))
    np.testing.assert_allclose(activation_fn("gelu")(x).numpy(), exact, atol=1e-6)
    for name in ("gelu_new", "gelu_tanh"):
        np.testing.assert_allclose(activation_fn(name)(x).numpy(), tanh, atol=1e-6)
    assert np.abs(exact - tanh).max() > 1e-4


def test_dropout_only_in_training():
    enc = BertEncoder.from_config_object(TINY.replace(hidden_dropout_prob=0.5))
    inputs = random_inputs(2, 8, TINY.vocab_size)
    a, b = enc(inputs)["sequence_output"], enc(inputs)["sequence_output"]
    np.testing.assert_array_equal(a, b)
    c = enc(inputs, training=True)["sequence_output"]
    assert np.abs(c.numpy() - a.numpy()).max() > 1e-3


def test_invalid_config_is_one_error():
    with pytest.raises(ValueError, match="Invalid BertConfig: hidden_size 30 is not a multiple"):
        BertEncoder(hidden_size=30, num_attention_heads=4)


def test_attention_implementation_is_checked_and_set_on_every_block():
    enc = BertEncoder.from_config_object(TINY)
    with pytest.raises(ValueError, match="attention_implementation: expected one of plain, "
                                         "fused, got 'flash'"):
        enc.set_attention_implementation("flash")
    assert {b.attention_implementation for b in enc.blocks} == {"plain"}
    state = random.getstate()
    inputs = random_inputs(2, 8, TINY.vocab_size)
    plain = enc(inputs)["sequence_output"].numpy()
    assert random.getstate() == state  # plain blocks draw no seed from Python's generator
    enc.set_attention_implementation("fused")
    assert {b.attention_implementation for b in enc.blocks} == {"fused"}
    # TensorFlow has no fused kernel: the blocks' own ops, the same numbers
    # (the other backends' kernels: tests/models/test_backends.py).
    np.testing.assert_array_equal(enc(inputs)["sequence_output"].numpy(), plain)
    seeds = [b.fused_dropout_seed for b in enc.blocks]
    assert len(set(seeds)) == len(seeds) and None not in seeds  # a seed per block
    block = enc.blocks[0]
    again = type(block).from_config(block.get_config())
    assert again.attention_implementation == "fused" and again.fused_dropout_seed is None


def test_last_block_at_cls_only_equals_its_full_rows():
    """TransformerBlock(query_rows=n): the first n positions' outputs of the full block
    (every position still attended to, padded keys still masked)."""
    from bert_tf.models.layers import MASK_LOGIT
    enc = BertEncoder.from_config_object(TINY)
    block = enc.blocks[-1]
    x = tf.constant(np.random.default_rng(0).standard_normal((3, 9, 32)), tf.float32)
    mask = np.ones((3, 9), "float32")
    mask[1, 5:] = 0
    bias = tf.constant(((1.0 - mask) * MASK_LOGIT)[:, None, None, :])
    full = block(x, bias).numpy()
    for rows in (1, 3):
        part = block(x, bias, query_rows=rows).numpy()
        assert part.shape == (3, rows, 32)
        np.testing.assert_allclose(part, full[:, :rows], atol=1e-5)


def test_a_pooled_head_needs_only_the_last_blocks_cls_row():
    """What TensorFlow runs for a classifier's logits (the graph pruned to them, as its
    runtime prunes a function) holds no full-width last block: the token-type
    embedding's one-hot MatMul, 4 for the first block (query/key/value, attention output,
    feed-forward in and out), 5 for the last block's [CLS] path (keys and values, the
    [CLS] query, the rest), the pooler's and the head's. The sequence output still takes
    the full last block."""
    from tensorflow.python.framework.convert_to_constants import \
        convert_variables_to_constants_v2

    from bert_tf.models.task_models import BertClassifier
    encoder = BertEncoder.from_config_object(TINY)
    model = BertClassifier(encoder, 3)
    spec = {k: tf.TensorSpec([2, 7], tf.int32, name=k) for k in random_inputs(2, 7, 10)}

    def matmuls(fn):
        frozen = convert_variables_to_constants_v2(tf.function(fn).get_concrete_function(spec))
        graph = frozen.graph.as_graph_def()
        needed = tf.compat.v1.graph_util.extract_sub_graph(
            graph, [t.name.split(":")[0] for t in frozen.outputs])
        return sum(node.op == "MatMul" for node in needed.node)

    assert matmuls(lambda x: model(x)["logits"]) == 1 + 4 + 5 + 1 + 1
    assert matmuls(lambda x: encoder(x)["sequence_output"]) == 1 + 4 + 4
