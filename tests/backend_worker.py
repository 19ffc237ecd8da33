"""Runs the Keras model code on the backend KERAS_BACKEND names and writes what it computed
to OUT/<backend>.npz (and the .keras files it saved to OUT/<backend>/), for
tests/models/test_backends.py to compare across backends:

    KERAS_BACKEND=jax python -m tests.backend_worker OUT MINILM_INPUTS.npz MINILM_DIR

On jax and torch, TensorFlow is made unimportable first: the encoder, heads, pretrainer,
task models, HF checkpoint loading and the fit() pretraining step must not need it (the
lent GPU machines have no TensorFlow).

Weights are set from NumPy, seeded by each variable's path, so every backend starts from
the same numbers whatever its own initialisers draw. Dropout is off (its random masks are
each backend's own), so outputs, losses and trained weights must agree.
"""

import os
import sys
import zlib

BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")
if BACKEND != "tensorflow":
    sys.modules["tensorflow"] = None  # `import tensorflow` now raises ImportError
if __name__ == "__main__":  # the worker process only, not tests/models/test_backends.py's import
    # Keras imports scikit-learn (its optional sklearn wrappers) when installed, as it is
    # here for tests/tasks/test_metrics.py, and TensorFlow imports JAX (tf.lite's optional jit),
    # installed here for the JAX worker; the model code uses neither (~1 s of start-up).
    sys.modules["sklearn"] = None
    if BACKEND == "tensorflow":
        sys.modules["jax"] = None

import keras  # noqa: E402
import numpy as np  # noqa: E402

from bert_tf.checkpoints.dispatch import load_encoder  # noqa: E402
from bert_tf.base.config import BertConfig  # noqa: E402
from bert_tf.models.encoder import BertEncoder  # noqa: E402
from bert_tf.models.layers import MASK_LOGIT, TransformerBlock  # noqa: E402
from bert_tf.training import fit  # noqa: E402
from bert_tf.models.pretrainer import BertPretrainer  # noqa: E402
from bert_tf.training.optimization import create_optimizer  # noqa: E402
from bert_tf.models.task_models import (BertClassifier, BertMultipleChoice,  # noqa: E402
                                        BertSpanLabeler, BertTokenClassifier)

TINY = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=48, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
BATCH, SEQ, PREDICTIONS = 4, 12, 3


def fill(model):
    """Every weight from NumPy, seeded by its path (LayerNorm gammas near 1)."""
    for v in model.weights:
        rng = np.random.default_rng(zlib.crc32(v.path.encode()))
        value = rng.standard_normal(tuple(v.shape)) * 0.1
        if v.path.endswith("gamma"):
            value += 1.0
        v.assign(value.astype("float32"))
    return model


def inputs(seed=0, shape=(BATCH, SEQ)):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, TINY.vocab_size, shape).astype("int32")
    mask = np.ones(shape, "int32")
    mask[..., 1, SEQ - 4:] = 0  # one padded row per batch (per choice for SWAG)
    ids[mask == 0] = 0
    segments = np.zeros(shape, "int32")
    segments[..., SEQ // 2:] = 1
    return {"token_ids": ids, "segment_ids": segments * mask, "padding_mask": mask}


DROPOUT_DRAWS = 400


def attention_inputs():
    """query, key, value [2, 2, 6, 8] and a bias that masks the second row's last key."""
    rng = np.random.default_rng(11)
    q, k, v = (rng.standard_normal((2, 2, 6, 8)).astype("float32") for _ in range(3))
    bias = np.zeros((2, 1, 1, 6), "float32")
    bias[1, ..., -1] = MASK_LOGIT
    return q, k, v, bias


def pretraining_batch(seed):
    rng = np.random.default_rng(100 + seed)
    x = inputs(seed)
    positions = np.stack([rng.choice(np.arange(1, SEQ - 4), PREDICTIONS, replace=False)
                          for _ in range(BATCH)]).astype("int32")
    labels = np.take_along_axis(x["token_ids"], positions, axis=1)
    x["token_ids"] = x["token_ids"].copy()
    np.put_along_axis(x["token_ids"], positions, 4, axis=1)  # [MASK]
    x["masked_lm_positions"] = positions
    weights = np.ones((BATCH, PREDICTIONS), "float32")
    weights[0, -1] = 0.0  # a padded prediction slot
    y = {"masked_lm_ids": labels, "masked_lm_weights": weights,
         "next_sentence_labels": rng.integers(0, 2, BATCH).astype("int32")}
    return x, y


def numpy(tree):
    return keras.tree.map_structure(lambda t: np.asarray(keras.ops.convert_to_numpy(t)), tree)


def train(model, batches, loss=None):
    """fit() over `batches` (one step each): the per-step losses."""
    losses = []
    record = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: losses.append(logs["loss"]))

    def stream():
        while True:
            yield from batches
    # On TensorFlow the steps run eagerly: tracing fit()'s graph for seven tiny models
    # cost more than the steps (tests/training/test_pretraining.py checks the traced fit()).
    model.run_eagerly = BACKEND == "tensorflow"
    model.fit(stream(), epochs=len(batches), steps_per_epoch=1, shuffle=False, verbose=0,
              callbacks=[record])
    return losses


def main(out_dir, minilm_inputs, minilm_dir):
    results = {}
    saved = os.path.join(out_dir, BACKEND)
    os.makedirs(saved, exist_ok=True)

    def keep(prefix, tree):
        flat = keras.tree.flatten_with_path(numpy(tree))
        for path, value in flat:
            results[prefix + "/" + "/".join(map(str, path))] = value

    def save_and_reload(model, name, x):
        """The model's outputs, after a .keras round trip on this backend too."""
        file = os.path.join(saved, name + ".keras")
        model.save(file)
        again = keras.saving.load_model(file)
        for (_, a), (_, b) in zip(keras.tree.flatten_with_path(numpy(model(x))),
                                  keras.tree.flatten_with_path(numpy(again(x)))):
            np.testing.assert_array_equal(a, b, err_msg=f"{name} after .keras reload")
        return model(x)

    # The encoder and every model built on it, on the same weights.
    x = inputs()
    encoder = fill(BertEncoder.from_config_object(TINY))
    keep("encoder", save_and_reload(encoder, "encoder", x))
    pretrainer = fill(BertPretrainer.from_config_object(TINY))
    px, py = pretraining_batch(0)
    keep("pretrainer", save_and_reload(pretrainer, "pretrainer", px))
    heads = {
        "classifier": (BertClassifier, dict(num_classes=3), x),
        "regressor": (BertClassifier, dict(num_classes=1), x),
        "token_classifier": (BertTokenClassifier, dict(num_labels=5), x),
        "span_labeler": (BertSpanLabeler, {}, x),
        "multiple_choice": (BertMultipleChoice, dict(num_choices=2),
                            inputs(1, (BATCH, 2, SEQ))),
    }
    task_models = {}
    for name, (cls, kwargs, model_inputs) in heads.items():
        model = fill(cls(BertEncoder.from_config_object(TINY), **kwargs))
        keep(name, save_and_reload(model, name, model_inputs))
        task_models[name] = model

    # Training: the fit() pretraining step (google's loss, AdamW + schedule + clipping)...
    # (No warmup, so the first step moves; tests/training/test_pretraining.py checks the warmup.)
    fit.compile_for_pretraining(pretrainer, 5e-3, 10, 0)
    batches = [pretraining_batch(i) for i in range(2)]
    results["train/pretrainer/losses"] = np.array(train(pretrainer, [batches[0]] * 2))
    keep("train/pretrainer/weights", {v.path: v for v in pretrainer.weights})
    results["train/pretrainer/eval"] = np.array(
        [fit.evaluate(pretrainer, batches)[k] for k in
         ("loss", "masked_lm_accuracy", "next_sentence_accuracy")])
    # ... and fine-tuning steps of each task head with its usual loss (the regressor is
    # the classifier's class with one output: its forward pass above suffices).
    sparse = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    rng = np.random.default_rng(7)
    targets = {
        "classifier": ({"logits": sparse}, {"logits": rng.integers(0, 3, BATCH)}),
        "token_classifier": ({"logits": sparse}, {"logits": rng.integers(0, 5, (BATCH, SEQ))}),
        "span_labeler": ({"start_logits": sparse, "end_logits": sparse},
                         {"start_logits": rng.integers(0, SEQ, BATCH),
                          "end_logits": rng.integers(0, SEQ, BATCH)}),
        "multiple_choice": ({"logits": sparse}, {"logits": rng.integers(0, 2, BATCH)}),
    }
    for name, (loss, y) in targets.items():
        model = task_models[name]
        model.compile(optimizer=create_optimizer("adamw", 5e-3, 10, 0,
                                                 model.trainable_variables),
                      loss=loss)
        results[f"train/{name}/losses"] = np.array(
            train(model, [(heads[name][2], y)] * 2))
        keep(f"train/{name}/outputs", model(heads[name][2]))

    # Mixed precision (the GPU setting): builds, trains a step, stays near float32.
    mixed = fill(BertPretrainer.from_config_object(TINY, dtype="mixed_bfloat16"))
    results["bfloat16/mlm_logits"] = numpy(mixed(px)["mlm_logits"])
    fit.compile_for_pretraining(mixed, 5e-3, 10, 0)
    results["bfloat16/losses"] = np.array(train(mixed, batches[:1]))

    # Real weights: MiniLM through the HF converter.
    minilm = load_encoder(minilm_dir)
    keep("minilm", minilm({k: v for k, v in np.load(minilm_inputs).items()}))

    # Fused attention (bert_tf/models/layers/fused_attention.py): MiniLM's outputs again, and a
    # block's attention with dropout drawn many times (its mean and variance), on inputs
    # the test computes the probabilities of.
    minilm.set_attention_implementation("fused")
    keep("fused/minilm", minilm({k: v for k, v in np.load(minilm_inputs).items()}))
    q, k, v, bias = attention_inputs()
    block = TransformerBlock(16, 2, 32, attention_probs_dropout_prob=0.5,
                             attention_implementation="fused")
    q, k, v, bias = (keras.ops.convert_to_tensor(t) for t in (q, k, v, bias))
    results["fused/attention"] = numpy(block.attend(q, k, v, bias, training=False))
    draws = np.stack([numpy(block.attend(q, k, v, bias, training=True))
                      for _ in range(DROPOUT_DRAWS)])
    results["fused/dropout_mean"] = draws.mean(axis=0)
    results["fused/dropout_variance"] = draws.var(axis=0)
    if BACKEND == "jax":
        # On a GPU without XLA_FLAGS' command-buffer switch, the dropout kernel is refused
        # in one line (checked here by telling the layer it runs on a GPU).
        import jax
        on_gpu, jax.default_backend = jax.default_backend, lambda: "gpu"
        try:
            block.attend(*(keras.ops.cast(t, "bfloat16") for t in (q, k, v, bias)),
                         training=True)
            results["fused/refusal"] = np.array("")
        except RuntimeError as e:
            results["fused/refusal"] = np.array(str(e))
        finally:
            jax.default_backend = on_gpu

    results["imported_tensorflow"] = np.array("tensorflow" in sys.modules and
                                              sys.modules["tensorflow"] is not None)
    np.savez(os.path.join(out_dir, BACKEND + ".npz"), **results)


if __name__ == "__main__":
    main(*sys.argv[1:])
