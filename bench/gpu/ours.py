"""The bert_tf side of the GPU kit: Keras 3 on its JAX backend, XLA-compiled, no TensorFlow.

    KERAS_BACKEND=jax python bench/gpu/ours.py GROUP... --mode gpu|cpu --out DIR --work DIR \
        --deadline T

GROUPs: parity, pretrain, fused, learning_large, finetune, inference, probe (cases.py says
the shapes; fused: pretraining, the learning check and inference with fused attention;
learning_large: the learning check on a large set). Each
measurement is appended to OUT/results.jsonl as soon as it is taken. Training runs as a
user runs it: `model.fit()` on mixed_bfloat16 models, compiled with jit_compile=True
(pretraining through bert_tf.training.fit: google's loss, AdamW with BERT's schedule
and exclusions, global-norm clipping).
"""

import gc
import os
import re
import sys
import time
import zlib

sys.modules["tensorflow"] = None  # the GPU machines have none; prove it is not needed
os.environ.setdefault("KERAS_BACKEND", "jax")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

import cases  # noqa: E402
from bert_tf.checkpoints.dispatch import load_pretrainer  # noqa: E402
from bert_tf.base.config import BertConfig  # noqa: E402
from bert_tf.models.encoder import BertEncoder  # noqa: E402
from bert_tf.models.pretrainer import BertPretrainer  # noqa: E402
from bert_tf.training import fit  # noqa: E402
from bert_tf.training.optimization import create_optimizer  # noqa: E402
from bert_tf.models.task_models import BertClassifier  # noqa: E402

INPUTS = ("token_ids", "segment_ids", "padding_mask")


def device_name():
    return jax.devices()[0].device_kind


def is_out_of_memory(error):
    return "RESOURCE_EXHAUSTED" in str(error) or "out of memory" in str(error).lower()


def repeat(batch):
    while True:
        yield batch


def classifier(model_name, dtype, **overrides):
    """A 2-class BertClassifier of the named size (random weights) in `dtype`."""
    config = BertConfig(**{**cases.config_dict(model_name), **overrides})
    return BertClassifier(BertEncoder.from_config_object(config, dtype=dtype), num_classes=2)


def timed_fit(model, batch, warmup_steps, timed_steps):
    """(seconds for the warm-up steps, compile included; seconds per timed step)."""
    start = time.perf_counter()
    model.fit(repeat(batch), steps_per_epoch=warmup_steps, epochs=1, verbose=0)
    warm = time.perf_counter() - start
    start = time.perf_counter()
    history = model.fit(repeat(batch), steps_per_epoch=timed_steps, epochs=1, verbose=0)
    seconds = (time.perf_counter() - start) / timed_steps
    loss = float(history.history["loss"][-1])
    if not np.isfinite(loss):
        raise FloatingPointError(f"loss is {loss}")
    return warm, seconds, loss


def release(model):
    del model
    keras.backend.clear_session()
    gc.collect()


def parity(plan, work_dir, results):
    """Logits of the checkpoint hf.py wrote, in float32 (full-precision matmuls) and in
    mixed bfloat16, for kit.py to compare with HF's."""
    x = cases.parity_inputs()
    found = {}
    for dtype in ("float32", "mixed_bfloat16"):
        model = load_pretrainer(os.path.join(work_dir, "hf_checkpoint"), dtype=dtype)
        with jax.default_matmul_precision("highest" if dtype == "float32" else "default"):
            out = model(x, training=False)
        found[f"mlm_{dtype}"] = np.asarray(out["mlm_logits"], "float32")
        found[f"nsp_{dtype}"] = np.asarray(out["nsp_logits"], "float32")
        release(model)
    np.savez(os.path.join(work_dir, "parity_bert_tf.npz"), **found)
    results.add(group="parity", model=plan["parity_model"], device=device_name())


def pretrain(plan, results, deadline, attention="plain"):
    """The largest batch that fits of each pretraining case, timed through fit(). With
    attention="fused", plan["fused"]'s cases, the encoder set to fused attention."""
    extra = {} if attention == "plain" else {"attention": attention}
    for model_name, seq, predictions, batches in (
            plan["pretrain"] if attention == "plain" else plan["fused"]["pretrain"]):
        config = BertConfig(**cases.config_dict(model_name))
        for batch_size in batches:
            if cases.out_of_time(plan, deadline, 60, results, group="pretrain",
                                 model=model_name, seq=seq, **extra):
                return
            model = BertPretrainer.from_config_object(config, dtype="mixed_bfloat16")
            model.encoder.set_attention_implementation(attention)
            fit.compile_for_pretraining(model, learning_rate=1e-4, num_train_steps=10000,
                                        num_warmup_steps=1000, jit_compile=True)
            data = cases.pretraining_batch(batch_size, seq, predictions)
            batch = ({k: data[k] for k in INPUTS + ("masked_lm_positions",)},
                     {k: data[k] for k in ("masked_lm_ids", "masked_lm_weights",
                                           "next_sentence_labels")})
            try:
                warm, seconds, loss = timed_fit(model, batch, plan["warmup_steps"],
                                                plan["timed_steps"])
            except Exception as e:  # noqa: BLE001  (an XLA out-of-memory error: next size)
                release(model)
                if not is_out_of_memory(e):
                    raise
                results.add(group="pretrain", model=model_name, seq=seq, batch=batch_size,
                            out_of_memory=True, **extra)
                continue
            release(model)
            results.add(group="pretrain", model=model_name, seq=seq, batch=batch_size,
                        predictions=predictions, step_s=seconds, warmup_s=warm, loss=loss,
                        flops=cases.train_flops(model_name, batch_size, seq, predictions),
                        **extra)
            break


def finetune(plan, results, deadline):
    for model_name, seq, batch_size in plan["finetune"]:
        if cases.out_of_time(plan, deadline, 45, results, group="finetune",
                             model=model_name, seq=seq):
            return
        model = classifier(model_name, "mixed_bfloat16")
        model.compile(optimizer=create_optimizer("adamw", 2e-5, 10000, 1000,
                                                 model.trainable_variables,
                                                 global_clipnorm=1.0),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=True)
        batch = cases.classification_batch(batch_size, seq)
        warm, seconds, loss = timed_fit(model, batch, plan["warmup_steps"],
                                        3 * plan["timed_steps"])
        release(model)
        results.add(group="finetune", model=model_name, seq=seq, batch=batch_size,
                    step_s=seconds, warmup_s=warm, loss=loss,
                    flops=cases.train_flops(model_name, batch_size, seq))


def inference(plan, work_dir, results, deadline, attention="plain"):
    """Real short texts, each batch padded to its longest text rounded up to 32 (so XLA
    compiles a handful of widths, all before the timed pass), bfloat16 weights. With
    attention="fused", plan["fused"]'s cases with fused attention."""
    extra = {} if attention == "plain" else {"attention": attention}
    for model_name, batch_sizes in (plan["inference"] if attention == "plain"
                                    else plan["fused"]["inference"]):
        model = classifier(model_name, "bfloat16")
        model.encoder.set_attention_implementation(attention)
        for batch_size in batch_sizes:
            if cases.out_of_time(plan, deadline, 30, results, group="inference",
                                 model=model_name, batch=batch_size, **extra):
                return
            texts = cases.real_texts(plan["inference_texts"][batch_size], work_dir)
            batches = list(cases.padded_batches(texts, batch_size, multiple=32))
            start = time.perf_counter()
            for b in batches:  # warm-up: every width compiled
                model.predict_on_batch(b)
            warm = time.perf_counter() - start
            start = time.perf_counter()
            for b in batches:
                logits = model.predict_on_batch(b)["logits"]
            seconds = time.perf_counter() - start
            if not np.all(np.isfinite(np.asarray(logits, "float32"))):
                raise FloatingPointError("non-finite logits")
            # The same batches through one jitted function of the weights and inputs:
            # what predict_on_batch spends around the compiled model is the difference.
            call = jitted_logits(model)
            for b in batches:
                np.asarray(call(b))
            start = time.perf_counter()
            for b in batches:
                jitted = np.asarray(call(b))
            jit_seconds = time.perf_counter() - start
            results.add(group="inference", model=model_name, batch=batch_size,
                        texts=len(texts), seconds=seconds, warmup_s=warm,
                        jit_seconds=jit_seconds,
                        jit_max_diff=float(np.max(np.abs(np.asarray(logits, "float32")
                                                         - jitted.astype("float32")))),
                        widths=sorted({b["token_ids"].shape[1] for b in batches}),
                        tokens=int(sum(len(t) for t in texts)), **extra)
        release(model)


def jitted_logits(model):
    """batch -> logits through `jax.jit` of the model's stateless call, the weights
    passed in (Keras' predict_on_batch, less its step bookkeeping)."""
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    @jax.jit
    def logits(trainable, non_trainable, batch):
        outputs, _ = model.stateless_call(trainable, non_trainable, batch, training=False)
        return outputs["logits"]
    return lambda batch: logits(trainable, non_trainable, batch)


def learning(plan, work_dir, results, deadline, large=False):
    """Whether fused attention changes what a model learns: a small pretrainer trained
    from the same weights on the same masked real texts (cases.masked_text_batches) with
    plain and with fused attention, per seed; the mean training loss of each `chunk` of
    steps and the held-out masked-LM loss and accuracy at the end. The two differ only in
    the attention kernel and in dropout's random draws (Keras' against cuDNN's).
    large=False: the short texts (plan["fused"]["learning"], row group "learning");
    True: every standard-library docstring (plan["learning_large"], "learning_large")."""
    if large:
        spec, group = plan["learning_large"], "learning_large"
        texts = cases.corpus_texts(work_dir)
    else:
        spec, group = plan["fused"]["learning"], "learning"
        texts = cases.real_texts(max(plan["inference_texts"].values()), work_dir)
    config = BertConfig(**cases.config_dict(spec["model"]))
    for attention in ("plain", "fused"):
        if cases.out_of_time(plan, deadline, spec.get("seconds", 45), results, group=group,
                             model=spec["model"], attention=attention):
            return
        model = BertPretrainer.from_config_object(config, dtype="mixed_bfloat16")
        model.encoder.set_attention_implementation(attention)
        fit.compile_for_pretraining(model, learning_rate=5e-4, num_train_steps=spec["steps"],
                                    num_warmup_steps=spec["steps"] // 10, jit_compile=True)
        start = time.perf_counter()
        for seed in spec["seeds"]:
            batches, held_out = cases.masked_text_batches(
                texts, spec["seq"], spec["batch"], spec["predictions"], spec["steps"],
                spec["held_out"], seed=seed)
            initialise(model, seed)
            losses = [float(model.train_on_batch(x, y)) for x, y in batches]
            chunks = [float(np.mean(losses[i:i + spec["chunk"]]))
                      for i in range(0, len(losses), spec["chunk"])]
            metrics = fit.evaluate(model, held_out)
            if not np.all(np.isfinite(chunks)):
                raise FloatingPointError(f"{attention} seed {seed}: loss {chunks}")
            results.add(group=group, model=spec["model"], seq=spec["seq"],
                        batch=spec["batch"], steps=spec["steps"], attention=attention,
                        seed=seed, chunk_losses=chunks,
                        held_out_loss=metrics["masked_lm_loss"],
                        held_out_accuracy=metrics["masked_lm_accuracy"],
                        train_sequences=(cases.packed_rows(texts, spec["seq"])
                                         - spec["held_out"]),
                        held_out_sequences=spec["held_out"],
                        seconds=time.perf_counter() - start)
            start = time.perf_counter()
        release(model)


def initialise(model, seed):
    """The model's weights drawn from `seed` (each variable from its path, so plain and
    fused start equal: BERT's truncated normal, stddev 0.02; LayerNorm 1 and 0; biases
    0) and its optimizer's state zeroed, so one compiled model trains every seed."""
    for v in model.weights:
        rng = np.random.default_rng([seed, zlib.crc32(v.path.encode())])
        if v.path.endswith(("gamma", "scale")):
            value = np.ones(v.shape)
        elif v.path.endswith(("beta", "bias")) or len(v.shape) < 2:
            value = np.zeros(v.shape)
        else:
            value = np.clip(rng.standard_normal(v.shape), -2, 2) * 0.02
        v.assign(value.astype(v.dtype))
    for v in model.optimizer.variables:
        v.assign(np.zeros(v.shape, v.dtype))


# What each probe variant changes: (config overrides, attention implementation).
PROBE_VARIANTS = {
    "as bert_tf runs": ({}, "plain"),
    "no attention dropout": ({"attention_probs_dropout_prob": 0.0}, "plain"),
    "fused attention, no attention dropout": ({"attention_probs_dropout_prob": 0.0}, "fused"),
    "fused attention": ({}, "fused"),
}


def probe(plan, results, deadline):
    """Where a training step's time goes: the jitted forward + backward alone (no fit(),
    no optimizer) of a classifier, with the number of kernels XLA compiled it into, as
    bert_tf runs it and with one thing changed (PROBE_VARIANTS): attention dropout off,
    then also fused attention, or fused attention with its kernel's own dropout. Each
    variant's time against the first's says what that part costs."""
    for model_name, seq, batch_size, variant in plan["probe"]:
        row = dict(group="probe", model=model_name, seq=seq, batch=batch_size,
                   variant=variant)
        if cases.out_of_time(plan, deadline, 30, results, **row):
            return
        overrides, attention = PROBE_VARIANTS[variant]
        try:
            step_s, hlo = probe_step(plan, model_name, seq, batch_size, overrides, attention)
        except Exception as e:  # noqa: BLE001  (a variant the device cannot run: say so)
            results.add(**row, error=error_line(e))
            continue
        results.add(**row, step_s=step_s, fusions=hlo.count(" fusion("),
                    custom_calls=hlo.count(" custom-call("),
                    flops=cases.train_flops(model_name, batch_size, seq))


def error_line(error):
    """The first line of what went wrong, under Keras' "Exception encountered when
    calling ..." wrapper."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(error).splitlines()]
    lines = [line for line in lines if line and "Exception encountered when calling" not in line
             and not line.startswith(("Arguments received", "•"))]
    return f"{type(error).__name__}: {(lines or [''])[0][:200]}"


def probe_step(plan, model_name, seq, batch_size, overrides, attention="plain"):
    """(seconds per jitted forward + backward, the compiled HLO text)."""
    model = classifier(model_name, "mixed_bfloat16", **overrides)
    model.encoder.set_attention_implementation(attention)
    x, y = cases.classification_batch(batch_size, seq)
    trainable = [v.value for v in model.trainable_variables]
    other = [v.value for v in model.non_trainable_variables]

    def loss(trainable, x, y):
        out, _ = model.stateless_call(trainable, other, x, training=True)
        return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(
            y, out["logits"], from_logits=True))
    x = jax.tree.map(jax.numpy.asarray, x)
    y = jax.numpy.asarray(y)
    try:
        compiled = jax.jit(jax.grad(loss)).lower(trainable, x, y).compile()
        hlo = compiled.as_text()
        jax.block_until_ready(compiled(trainable, x, y))
        steps = 3 * plan["timed_steps"]
        start = time.perf_counter()
        for _ in range(steps):
            grads = compiled(trainable, x, y)
        jax.block_until_ready(grads)
        return (time.perf_counter() - start) / steps, hlo
    finally:
        release(model)


def main():
    args = cases.worker_args(__doc__, ["parity", "pretrain", "fused", "learning_large",
                                       "finetune", "inference", "probe"])
    plan = cases.PLANS[args.mode]
    results = cases.Results(args.out, "bert_tf")
    for group in args.groups:
        if group == "parity":
            results.add(group="env", device=device_name(), jax=jax.__version__,
                        keras=keras.__version__,
                        XLA_FLAGS=os.environ.get("XLA_FLAGS") or "(none)")
            parity(plan, args.work, results)
        elif group == "pretrain":
            pretrain(plan, results, args.deadline)
        elif group == "fused":
            pretrain(plan, results, args.deadline, attention="fused")
            learning(plan, args.work, results, args.deadline)
            inference(plan, args.work, results, args.deadline, attention="fused")
        elif group == "learning_large":
            learning(plan, args.work, results, args.deadline, large=True)
        elif group == "finetune":
            finetune(plan, results, args.deadline)
        elif group == "inference":
            inference(plan, args.work, results, args.deadline)
        else:
            probe(plan, results, args.deadline)


if __name__ == "__main__":
    main()
