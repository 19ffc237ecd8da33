import numpy as np
import tensorflow as tf

from bert_tf.base.config import BertConfig
from bert_tf.models.pretrainer import BertPretrainer
from tests.testing import random_inputs

TINY = BertConfig(vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64)


def _inputs():
    inputs = random_inputs(2, 10, TINY.vocab_size)
    inputs["masked_lm_positions"] = np.array([[1, 3, 0], [2, 4, 4]], "int32")
    return inputs


def test_masked_lm_head_matches_the_formula():
    model = BertPretrainer.from_config_object(TINY)
    inputs = _inputs()
    out = model(inputs)
    assert out["mlm_logits"].shape == (2, 3, 90) and out["nsp_logits"].shape == (2, 2)
    assert out["mlm_logits"].dtype == tf.float32

    seq = model.encoder({k: inputs[k] for k in ("token_ids", "segment_ids",
                                                "padding_mask")})["sequence_output"].numpy()
    head = model.mlm_head
    gathered = np.take_along_axis(seq, inputs["masked_lm_positions"][:, :, None], axis=1)
    h = gathered @ head.transform.kernel.numpy() + head.transform.bias.numpy()
    from scipy.special import erf
    h = 0.5 * h * (1 + erf(h / np.sqrt(2)))
    mean, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
    h = (h - mean) / np.sqrt(var + 1e-12) * head.layer_norm.gamma.numpy() + \
        head.layer_norm.beta.numpy()
    logits = h @ model.encoder.word_embeddings.numpy().T + head.output_bias.numpy()
    np.testing.assert_allclose(out["mlm_logits"].numpy(), logits, atol=1e-4)

    pooled = model.encoder({k: inputs[k] for k in ("token_ids", "segment_ids",
                                                   "padding_mask")})["pooled_output"].numpy()
    nsp = pooled @ model.nsp_head.kernel.numpy() + model.nsp_head.bias.numpy()
    np.testing.assert_allclose(out["nsp_logits"].numpy(), nsp, atol=1e-5)


def test_output_embedding_is_tied():
    model = BertPretrainer.from_config_object(TINY)
    inputs = _inputs()
    # No separate vocabulary projection: the only [vocab, hidden] variable is the word table.
    vocab_shaped = [v.path for v in model.weights if tuple(v.shape) == (90, 32)]
    assert vocab_shaped == ["embeddings/word_embeddings"]
    before = model(inputs)["mlm_logits"].numpy()
    table = model.encoder.word_embeddings
    table.assign(table.numpy() * 2.0)
    assert np.abs(model(inputs)["mlm_logits"].numpy() - before).max() > 1e-3
    # Gradients reach the table from the MLM loss through the output projection too.
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(inputs)["mlm_logits"][:, :, 17])
    grad = tape.gradient(loss, table)
    grad = tf.convert_to_tensor(grad).numpy()
    assert np.abs(grad[17]).sum() > 0


def test_pretrainer_save_load(tmp_path):
    import keras
    model = BertPretrainer.from_config_object(TINY)
    inputs = _inputs()
    out = model(inputs)
    model.save(str(tmp_path / "p.keras"))
    loaded = keras.saving.load_model(str(tmp_path / "p.keras"))
    for k in ("mlm_logits", "nsp_logits"):
        np.testing.assert_allclose(loaded(inputs)[k], out[k], atol=1e-6)
    # The tie survives loading.
    assert loaded.mlm_head.embeddings is loaded.encoder.embeddings
