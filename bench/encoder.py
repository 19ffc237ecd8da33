"""Encoder forward throughput on CPU: bert_tf.BertEncoder vs keras-hub BertBackbone vs
HF torch BertModel, BERT-base shape with random weights, in float32 and bfloat16.

    python bench/encoder.py                      # default shape, writes docs/benchmarks.md
    python bench/encoder.py --repeats 9 --no_write

Each model is called the way its library's users call it for inference. The two Keras
models go through Keras' own inference path, `model.compile(jit_compile=...)` then
`model.predict_on_batch(inputs)`: once with Keras' CPU default (no XLA; the same graph as
a plain `tf.function`) and once with `jit_compile=True` (XLA), the fast path recommended
in BertEncoder's docstring. HF's model runs in eval mode under `torch.inference_mode()`.
bfloat16 means the Keras policy "mixed_bfloat16" for the Keras models (float32 weights,
cast on every call) and `model.to(torch.bfloat16)` for torch (bfloat16 weights);
bf16-weights is the Keras policy "bfloat16", the Keras counterpart of torch's bfloat16
model, and is compared with that same torch row. The implementations are timed
interleaved (one call of each per round) so that background load hits them alike; the
table reports the median over rounds and the load average, because a loaded machine
hurts torch's OpenMP threads much more than TF's thread pool and so flatters the ratios.
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import command_line, machine, markdown_table, median_time, write_section  # noqa: E402

BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2)
PRECISIONS = {"fp32": "float32", "bf16": "mixed_bfloat16", "bf16-weights": "bfloat16"}
# torch's bfloat16 model already holds bfloat16 weights: its bf16 row is the reference for
# both Keras bfloat16 settings, and it runs once.
TORCH_PRECISION = {"fp32": "fp32", "bf16": "bf16", "bf16-weights": "bf16"}
IMPLEMENTATIONS = ("bert_tf", "bert_tf XLA", "keras-hub", "keras-hub XLA", "HF torch")


def make_inputs(batch_size, seq_length, vocab_size, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(1000, vocab_size, (batch_size, seq_length), dtype=np.int32)
    segment_ids = np.zeros((batch_size, seq_length), np.int32)
    segment_ids[:, seq_length // 2:] = 1
    padding_mask = np.ones((batch_size, seq_length), np.int32)  # full-length sequences
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def keras_runner(model, jit_compile, inputs):
    """Keras' inference path: compile (no optimizer needed) and predict_on_batch, which
    runs the cached predict function (a tf.function, XLA-compiled if asked)."""
    model.compile(jit_compile=jit_compile)
    if model.jit_compile != jit_compile:
        sys.exit(f"bench/encoder.py: {model.name} refused jit_compile={jit_compile}")
    return lambda: model.predict_on_batch(inputs)["sequence_output"]


def bert_tf_runner(policy, inputs, jit_compile):
    from bert_tf.models.encoder import BertEncoder
    return keras_runner(BertEncoder(**BASE, dtype=policy), jit_compile, inputs)


def keras_hub_runner(policy, inputs, jit_compile):
    import keras_hub
    model = keras_hub.models.BertBackbone(
        vocabulary_size=BASE["vocab_size"], num_layers=BASE["num_hidden_layers"],
        num_heads=BASE["num_attention_heads"], hidden_dim=BASE["hidden_size"],
        intermediate_dim=BASE["intermediate_size"],
        max_sequence_length=BASE["max_position_embeddings"],
        num_segments=BASE["type_vocab_size"], dtype=policy)
    return keras_runner(model, jit_compile, inputs)


def torch_runner(policy, inputs):
    import torch
    import transformers
    config = transformers.BertConfig(
        vocab_size=BASE["vocab_size"], hidden_size=BASE["hidden_size"],
        num_hidden_layers=BASE["num_hidden_layers"],
        num_attention_heads=BASE["num_attention_heads"],
        intermediate_size=BASE["intermediate_size"],
        max_position_embeddings=BASE["max_position_embeddings"],
        type_vocab_size=BASE["type_vocab_size"])
    model = transformers.BertModel(config).eval()
    if policy == "mixed_bfloat16":
        model = model.to(torch.bfloat16)
    features = {"input_ids": torch.from_numpy(inputs["token_ids"]).long(),
                "token_type_ids": torch.from_numpy(inputs["segment_ids"]).long(),
                "attention_mask": torch.from_numpy(inputs["padding_mask"]).long()}

    def run():
        with torch.inference_mode():
            return model(**features).last_hidden_state.float().numpy()
    return run


RUNNERS = {
    "bert_tf": lambda policy, inputs: bert_tf_runner(policy, inputs, jit_compile=False),
    "bert_tf XLA": lambda policy, inputs: bert_tf_runner(policy, inputs, jit_compile=True),
    "keras-hub": lambda policy, inputs: keras_hub_runner(policy, inputs, jit_compile=False),
    "keras-hub XLA": lambda policy, inputs: keras_hub_runner(policy, inputs, jit_compile=True),
    "HF torch": torch_runner,
}


def run_benchmark(batch_size, seq_length, repeats, warmup, precisions, implementations,
                  progress=print):
    """Returns {(implementation, precision): [seconds per batch, one per round]}."""
    inputs = make_inputs(batch_size, seq_length, BASE["vocab_size"])
    runners = {}
    for asked in precisions:
        for name in implementations:
            precision = TORCH_PRECISION[asked] if name == "HF torch" else asked
            if (name, precision) in runners:
                continue
            progress(f"building {name} {precision}")
            runners[name, precision] = RUNNERS[name](PRECISIONS[precision], inputs)
            for _ in range(warmup):  # traces the tf.functions, warms the allocators
                runners[name, precision]()
    times = {key: [] for key in runners}
    for round_index in range(repeats):
        for key, fn in runners.items():
            times[key].append(median_time(fn, repeats=1, warmup=0))
        progress(f"round {round_index + 1}/{repeats}: " + ", ".join(
            f"{name} {precision} {batch_size / times[name, precision][-1]:.2f}"
            for name, precision in runners) + " seq/s")
    return times


def table(times, batch_size):
    """Median and best round per model, each also as a ratio to HF torch at the same
    precision (the best-round ratio is the closest to an idle machine)."""
    rows = []
    for (name, precision), seconds in times.items():
        median, best = statistics.median(seconds), min(seconds)
        reference = times.get(("HF torch", TORCH_PRECISION[precision]))
        ratios = (f"{statistics.median(reference) / median:.2f}x",
                  f"{min(reference) / best:.2f}x") if reference else ("-", "-")
        rows.append((name, precision, f"{batch_size / median:.2f}", f"{1000 * median:.0f}",
                     ratios[0], f"{batch_size / best:.2f}", ratios[1]))
    return markdown_table(("implementation", "precision", "seq/s", "ms/batch",
                           "vs HF torch", "best round seq/s", "best vs HF torch"), rows)


def forward_flops(seq_length):
    """Model FLOPs of one sequence's forward pass: 2 per multiply-add of the dense layers
    (Q, K, V, attention output, intermediate, output) and of the two attention products."""
    h, i, layers = BASE["hidden_size"], BASE["intermediate_size"], BASE["num_hidden_layers"]
    return layers * 2 * seq_length * (4 * h * h + 2 * h * i + 2 * seq_length * h)


def matmul_rate(dtype, rows=4096, repeats=5):
    """FLOP/s of one large product alone ([rows, H] x [H, I]) through TensorFlow's
    kernels: what the dense layers can run at on this CPU, at most."""
    import tensorflow as tf
    h, i = BASE["hidden_size"], BASE["intermediate_size"]
    a = tf.cast(tf.random.normal([rows, h]), dtype)
    b = tf.cast(tf.random.normal([h, i]), dtype)
    product = tf.function(lambda: tf.matmul(a, b))
    seconds = median_time(lambda: product().numpy(), repeats=repeats, warmup=2)
    return 2 * rows * h * i / seconds


def target_note(times, batch_size, seq_length, target=1.2):
    """Our fastest row over HF torch's fastest (medians), whatever the precision: each
    library at its best setting on this CPU; and both rows' FLOP rates beside that of one
    large product alone in the same dtype."""
    def best(rows):
        key = min(rows, key=lambda k: statistics.median(times[k]))
        return key, batch_size / statistics.median(times[key])
    ours = [k for k in times if k[0] != "HF torch"]
    peers = [k for k in times if k[0] == "HF torch"]
    if not ours or not peers:
        return ""
    (name, precision), rate = best(ours)
    (_, peer_precision), peer_rate = best(peers)
    ratio = rate / peer_rate
    flops = forward_flops(seq_length)
    dtype = "float32" if precision == "fp32" else "bfloat16"
    ceiling = matmul_rate(dtype)
    return (f"Target >= {target}x HF torch, each at its fastest setting: "
            f"{'met' if ratio >= target else 'not met'} ({ratio:.2f}x: {name} {precision} "
            f"{rate:.2f} seq/s against HF torch {peer_precision} {peer_rate:.2f}). "
            f"A forward pass is {flops / 1e9:.1f} GFLOP a sequence, so these rows run at "
            f"{rate * flops / 1e9:.0f} and {peer_rate * flops / 1e9:.0f} GFLOP/s; one "
            f"[4096, {BASE['hidden_size']}] x [{BASE['hidden_size']}, "
            f"{BASE['intermediate_size']}] product alone in {dtype} runs at "
            f"{ceiling / 1e9:.0f} GFLOP/s here (TensorFlow's kernel), about the most the "
            f"dense layers can reach: {rate * flops / ceiling:.0%} and "
            f"{peer_rate * flops / ceiling:.0%} of it.")


def load_note(load):
    """The 1-minute load average before the run (during it, the benchmark's own threads
    count too) and, when other jobs were running, what that does to the ratios."""
    note = f"Load average (1 min) before the run: {load:.1f}."
    if load > 0.5 * (os.cpu_count() or 1):
        note += (" Other jobs shared the machine: contention slows torch's OpenMP threads "
                 "(static split, spin-waits) far more than TF's work-stealing pool, so the "
                 "ratios above overstate ours; only a run on an idle machine compares the "
                 "libraries themselves.")
    return note


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed rounds (one call of every model per round); median kept")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls per model")
    parser.add_argument("--precisions", default="fp32,bf16,bf16-weights",
                        help="comma-separated subset of " + ",".join(PRECISIONS))
    parser.add_argument("--implementations", default=",".join(IMPLEMENTATIONS),
                        help="comma-separated subset of " + ",".join(IMPLEMENTATIONS))
    parser.add_argument("--no_write", action="store_true",
                        help="print the table only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    precisions = args.precisions.split(",")
    implementations = args.implementations.split(",")
    bad = [p for p in precisions if p not in PRECISIONS] + \
        [i for i in implementations if i not in IMPLEMENTATIONS]
    if bad or args.repeats < 1 or args.warmup < 0 or args.batch_size < 1 \
            or not 1 <= args.max_seq_length <= BASE["max_position_embeddings"]:
        sys.exit(f"bench/encoder.py: bad arguments {bad or vars(args)}")

    load_before = os.getloadavg()[0]
    times = run_benchmark(args.batch_size, args.max_seq_length, args.repeats, args.warmup,
                          precisions, implementations)
    body = (f"BERT-base shape (L=12, H=768, A=12, I=3072, vocab 30522), random weights, "
            f"batch {args.batch_size}, sequence length {args.max_seq_length}, forward pass "
            f"only; median of {args.repeats} interleaved rounds after {args.warmup} warmup "
            f"calls, and the best round. Keras models via `compile(jit_compile=...)` + "
            f"`predict_on_batch` (\"XLA\" rows: `jit_compile=True`); HF torch in eval mode "
            f"under `inference_mode`. bf16 = Keras policy `mixed_bfloat16` (float32 "
            f"weights, cast on every call) / torch `model.to(bfloat16)` (bfloat16 "
            f"weights); bf16-weights = Keras policy `bfloat16` (bfloat16 weights, as "
            f"torch's), its ratios against torch's bf16 row.\n\n"
            f"{table(times, args.batch_size)}\n\n"
            f"{target_note(times, args.batch_size, args.max_seq_length)}\n\n"
            f"{load_note(load_before)}\n\n"
            f"Machine: {machine()}\n\nCommand: `{command_line()}`\n")
    print(body)
    if not args.no_write:
        write_section("Encoder forward", body)


if __name__ == "__main__":
    main()
