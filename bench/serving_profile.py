"""Where one short text's time goes: the MiniLM classifier at batch 1, op by op.

    python bench/serving_profile.py                 # writes "Serving at batch 1, by op"
    python bench/serving_profile.py --widths 18,24,32,64 --no_write

The classifier bench/serving.py exports (MiniLM's trained encoder, a random 2-label head)
is run on one row of 18 tokens at each width: 24 is the width run_by_length cuts such a
text to (a multiple of 8), 18 the exact length. For each width, in one process:

- the Keras model in a `tf.function` (what serve_tokenized runs, without its checks);
- the same with `jit_compile=True` (XLA);
- the frozen graph in a TF1 session with full tracing: every node's time, summed by op
  type over the runs (kernel time only; the session's own time is the difference);
- ONNX Runtime's `session.run` on the fused graph of bench/serving.py (the same weights),
  at the same width and at the exact number of tokens (what an ORT user sends);
- Keras' own int8 (`model.quantize("int8")` on a copy: int8 Dense kernels with per-channel
  scales, activations quantized per call) in a `tf.function`, and its largest probability
  difference from float32.
- the same classifier under Keras' `mixed_bfloat16` (float32 weights cast per call) in a
  `tf.function`, and frozen in a TF1 session: there the casts of the weights fold into
  bfloat16 constants, which oneDNN packs once and keeps (on a CPU with native bf16, the
  one lever measured here that cuts the matrix products' time at a few rows).

The times are medians of 5 blocks of calls after a warm-up.
"""

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import (command_line, int_list, machine, markdown_table,  # noqa: E402
                          write_section)

TOKENS = 18     # tokens in the row ([CLS], 16 random ids, [SEP]): the short texts' p90 is 19


def block_ms(fn, calls, blocks=5, warmup=20):
    """Median milliseconds per call of fn() over `blocks` blocks of `calls` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1000)
    return statistics.median(times)


def features(width, tokens=TOKENS, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    ids = np.zeros((1, width), "int32")
    ids[0, :tokens] = rng.integers(1000, 20000, tokens)
    ids[0, 0], ids[0, tokens - 1] = 101, 102            # [CLS] ... [SEP]
    return {"token_ids": ids, "segment_ids": np.zeros_like(ids),
            "padding_mask": (ids > 0).astype("int32")}


def op_profile(model, width, runs):
    """({op type: mean microseconds per run}, session ms per call, nodes per run) of the
    frozen classifier graph at [1, width] in a traced TF1 session."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import \
        convert_variables_to_constants_v2
    spec = {k: tf.TensorSpec([1, width], tf.int32, name=k) for k in features(width)}
    frozen = convert_variables_to_constants_v2(
        tf.function(lambda x: model(x, training=False)["logits"]).get_concrete_function(spec))
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(frozen.graph.as_graph_def(), name="")
    feed = {f"{k}:0": v for k, v in features(width).items()}
    out = frozen.outputs[0].name
    per_op, nodes = collections.defaultdict(float), 0
    with tf.compat.v1.Session(graph=graph) as session:
        session_ms = block_ms(lambda: session.run(out, feed), 100)
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        for _ in range(5):                                      # warm the traced path
            session.run(out, feed, options=options)
        for _ in range(runs):
            metadata = tf.compat.v1.RunMetadata()
            session.run(out, feed, options=options, run_metadata=metadata)
            for device in metadata.step_stats.dev_stats:
                for node in device.node_stats:
                    label = node.timeline_label
                    op = label.split("=", 1)[1].split("(")[0].strip() if "=" in label \
                        else node.node_name
                    per_op[op] += node.all_end_rel_micros / runs
                    nodes += 1
    return dict(per_op), session_ms, nodes / runs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", default="18,24,32",
                        help=f"comma list of widths (at least {TOKENS})")
    parser.add_argument("--runs", type=int, default=50, help="traced session runs per width")
    parser.add_argument("--no_write", action="store_true",
                        help="print the tables only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    widths = int_list(args.widths, "--widths")
    if min(widths) < TOKENS or max(widths) > 512 or args.runs < 1:
        sys.exit(f"bench/serving_profile.py: widths must be {TOKENS} to 512 and --runs at "
                 f"least 1, got {vars(args)}")
    import numpy as np
    import onnxruntime
    import tensorflow as tf
    from bench.serving import export_onnx, hf_checkpoint, ours_classifier

    workdir = tempfile.mkdtemp(prefix="bench_serving_profile_")
    hf_dir = os.path.join(workdir, "hf")
    hf_checkpoint("minilm", hf_dir)
    model = ours_classifier(hf_dir)
    onnx_files, _ = export_onnx(hf_dir, os.path.join(workdir, "onnx"))
    session = onnxruntime.InferenceSession(onnx_files["fp32"],
                                           providers=["CPUExecutionProvider"])
    graph_fn = tf.function(lambda x: model(x, training=False)["logits"])
    xla_fn = tf.function(lambda x: model(x, training=False)["logits"], jit_compile=True)
    int8 = ours_classifier(hf_dir)
    int8.quantize("int8")
    int8_fn = tf.function(lambda x: int8(x, training=False)["logits"])
    int8_drift = 0.0
    bf16 = ours_classifier(hf_dir, "bf16")
    bf16_fn = tf.function(lambda x: bf16(x, training=False)["logits"])
    bf16_drift = 0.0

    timing_rows, op_tables, largest = [], {}, None
    for width in widths:
        x = {k: tf.constant(v) for k, v in features(width).items()}
        ort_feed = {"input_ids": features(width)["token_ids"].astype("int64"),
                    "attention_mask": features(width)["padding_mask"].astype("int64"),
                    "token_type_ids": features(width)["segment_ids"].astype("int64")}
        exact = {k: v[:, :TOKENS] for k, v in ort_feed.items()}
        ours = model(x)["logits"].numpy()
        theirs = session.run(["logits"], ort_feed)[0]
        largest = max(largest or 0.0, float(np.abs(ours - theirs).max()))
        int8_drift = max(int8_drift, float(np.abs(
            tf.nn.softmax(int8_fn(x)).numpy() - tf.nn.softmax(ours).numpy()).max()))
        bf16_drift = max(bf16_drift, float(np.abs(
            tf.nn.softmax(tf.cast(bf16_fn(x), tf.float32)).numpy()
            - tf.nn.softmax(ours).numpy()).max()))
        per_op, session_ms, nodes = op_profile(model, width, args.runs)
        _, bf16_session_ms, _ = op_profile(bf16, width, 1)
        op_tables[width] = (per_op, nodes)
        timing_rows.append((
            width, f"{block_ms(lambda: graph_fn(x), 100):.2f}",
            f"{block_ms(lambda: xla_fn(x), 100):.2f}", f"{session_ms:.2f}",
            f"{sum(per_op.values()) / 1000:.2f}",
            f"{block_ms(lambda: session.run(['logits'], ort_feed), 100):.2f}",
            f"{block_ms(lambda: session.run(['logits'], exact), 100):.2f}",
            f"{block_ms(lambda: int8_fn(x), 100):.2f}",
            f"{block_ms(lambda: bf16_fn(x), 100):.2f}", f"{bf16_session_ms:.2f}"))
        print(timing_rows[-1], flush=True)

    timing = markdown_table(
        ("width", "tf.function ms", "XLA ms", "TF1 session ms", "sum of kernels ms",
         "ORT fused ms", f"ORT fused, exact {TOKENS} tokens ms", "Keras int8 ms",
         "bf16 tf.function ms", "bf16 frozen, TF1 session ms"),
        timing_rows)
    width = 24 if 24 in op_tables else widths[0]
    per_op, nodes = op_tables[width]
    total = sum(per_op.values())
    top = sorted(per_op.items(), key=lambda kv: -kv[1])[:12]
    ops = markdown_table(("op (width %d)" % width, "us per call", "share"),
                         [(op, f"{us:.0f}", f"{us / total:.0%}") for op, us in top])
    body = (f"MiniLM classifier (6 layers, H=384, the bench/serving.py weights), one row of "
            f"{TOKENS} tokens padded to each width (24: what run_by_length gives it); logits agree with ONNX Runtime's to "
            f"{largest:.1e}; Keras int8's probabilities differ from float32's by up to "
            f"{int8_drift:.1e}, bf16's by up to {bf16_drift:.1e}. Medians of 5 blocks of 100 calls; op times from "
            f"{args.runs} traced session runs ({nodes:.0f} nodes per run).\n\n{timing}\n\n"
            f"{ops}\n\nMachine: {machine()}\n\nCommand: `{command_line()}`\n")
    print(body)
    if not args.no_write:
        write_section("Serving at batch 1, by op", body)


if __name__ == "__main__":
    main()
