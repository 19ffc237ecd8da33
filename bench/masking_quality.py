"""Held-out masked-LM accuracy of static against dynamic masking, at equal steps, on the
embedded corpus (the quickstart's): what does masking every batch anew change in what a
small BERT learns?

One quickstart run (`--num_train_steps 1`) splits the standard-library docstrings into
training and held-out documents, learns its vocabulary and writes the held-out shards
(one pass, static masks). From the training documents:
    static    create_pretraining_data's masks, --dupe_factor 10 (google's default)
    dynamic   create_pretraining_data --masking=none (one pass), then
              run_pretraining --masking=dynamic (new masks for every batch)
    dynamic, no next sentence
              the same with --next_sentence=none on both sides (RoBERTa's full
              sentences, the masked-LM loss alone, no short sequences)
Each (variant, seed) pretrains the quickstart's tiny BERT for --steps steps (batch 32,
lr 1e-3, seq 64, 10 predictions) in its own process, and is scored by run_pretraining
--do_eval on two held-out sets with static masks (the same predictions for every
variant; all of them): the quickstart's sentence pairs, and the held-out documents
written as full sentences (segment 0 throughout, which every variant has learnt).

    python bench/masking_quality.py --seeds 1,2 --steps 1000
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import (command_line, int_list, machine, markdown_table,  # noqa: E402
                          write_section)

VARIANTS = ("static", "dynamic", "dynamic, no next sentence")
# Flags of each variant: create_pretraining_data's, run_pretraining's.
VARIANT_FLAGS = {
    "static": (["--dupe_factor=10"], ["--masking=static"]),
    "dynamic": (["--masking=none"], ["--masking=dynamic"]),
    "dynamic, no next sentence": (
        ["--masking=none", "--next_sentence=none", "--short_seq_prob=0"],
        ["--masking=dynamic", "--next_sentence=none"]),
}
HELDOUT = ("pairs", "full sentences")


def run(module, *flags):
    """python -m module flags, in a fresh process; its stdout (stops on failure)."""
    done = subprocess.run([sys.executable, "-m", module, *flags], cwd=ROOT, text=True,
                          capture_output=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if done.returncode:
        sys.exit(f"error: {module} {' '.join(flags)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="1,2", help="comma-separated run_pretraining seeds")
    p.add_argument("--steps", type=int, default=1000, help="training steps of every run")
    p.add_argument("--work_dir", default=None, help="keep the runs here (default: a "
                   "temporary folder)")
    p.add_argument("--no_write", action="store_true", help="do not touch docs/benchmarks.md")
    args = p.parse_args()
    seeds = int_list(args.seeds, "--seeds")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work_dir or tmp
        quick = os.path.join(work, "quickstart")
        run("bert_tf.quickstart", f"--work_dir={quick}", "--num_train_steps=1",
            "--steps_per_loop=1")
        vocab = os.path.join(quick, "vocab.txt")
        shards = {}
        for i, variant in enumerate(VARIANTS):
            shards[variant] = os.path.join(work, f"train_{i}.tfrecord")
            if not os.path.exists(shards[variant]):
                run("bert_tf.create_pretraining_data",
                    f"--input_file={os.path.join(quick, 'train.txt')}",
                    f"--output_file={shards[variant]}", f"--vocab_file={vocab}",
                    "--max_seq_length=64", "--max_predictions_per_seq=10", "--quiet",
                    *VARIANT_FLAGS[variant][0])
        heldout_shards = {"pairs": os.path.join(quick, "heldout.tfrecord"),
                          "full sentences": os.path.join(work, "heldout_full.tfrecord")}
        if not os.path.exists(heldout_shards["full sentences"]):
            run("bert_tf.create_pretraining_data",
                f"--input_file={os.path.join(quick, 'heldout.txt')}",
                f"--output_file={heldout_shards['full sentences']}", f"--vocab_file={vocab}",
                "--max_seq_length=64", "--max_predictions_per_seq=10", "--quiet",
                "--dupe_factor=1", "--next_sentence=none", "--short_seq_prob=0",
                "--random_seed=12346")
        common = [f"--bert_config_file={os.path.join(quick, 'bert_config.json')}",
                  f"--vocab_file={vocab}", "--max_seq_length=64",
                  "--max_predictions_per_seq=10"]
        results = {(v, h): [] for v in VARIANTS for h in HELDOUT}
        for seed in seeds:
            for i, variant in enumerate(VARIANTS):
                out = os.path.join(work, f"{i}_{seed}")
                train_flags = VARIANT_FLAGS[variant][1]
                run("bert_tf.run_pretraining", *common, f"--input_file={shards[variant]}",
                    f"--output_dir={out}", "--do_train", f"--num_train_steps={args.steps}",
                    f"--num_warmup_steps={args.steps // 10}", "--train_batch_size=32",
                    "--learning_rate=1e-3", "--steps_per_loop=50", f"--seed={seed}",
                    *train_flags)
                head = [f for f in train_flags if f.startswith("--next_sentence")]
                for held in HELDOUT:
                    run("bert_tf.run_pretraining", *common, *head,
                        f"--input_file={shards['static']}",
                        f"--eval_input_file={heldout_shards[held]}",
                        f"--output_dir={out}", "--do_eval", "--max_eval_steps=0",
                        "--eval_batch_size=64")
                    with open(os.path.join(out, "eval_results.txt")) as f:
                        metrics = dict(line.strip().split(" = ") for line in f
                                       if " = " in line)
                    accuracy = float(metrics["masked_lm_accuracy"])
                    results[variant, held].append(accuracy)
                    print(json.dumps({"variant": variant, "heldout": held, "seed": seed,
                                      "masked_lm_accuracy": accuracy}), flush=True)
        sizes = {}
        for held, path in heldout_shards.items():
            with open(path + ".summary.json") as f:
                sizes[held] = json.load(f).get("examples", "?")
    rows = [[v] + [f"{' / '.join(f'{a:.4f}' for a in results[v, h])} "
                   f"(mean {statistics.mean(results[v, h]):.4f})" for h in HELDOUT]
            for v in VARIANTS]
    table = markdown_table(["masking"] + [f"held-out {h}: per seed (mean)" for h in HELDOUT],
                           rows)
    mean = {k: statistics.mean(r) for k, r in results.items()}
    spread = max(max(r) - min(r) for r in results.values())
    table += ("\n\n" + "; ".join(
        f"on held-out {h}: dynamic - static {mean['dynamic', h] - mean['static', h]:+.4f}, "
        f"no next sentence - dynamic "
        f"{mean['dynamic, no next sentence', h] - mean['dynamic', h]:+.4f}"
        for h in HELDOUT) + f". The seeds of one variant differ by up to {spread:.4f}.")
    print(table)
    if args.no_write:
        return
    body = (f"Held-out masked-LM accuracy at equal steps, static against dynamic masking "
            f"(run_pretraining --masking) and without the next-sentence task, on the quickstart's corpus: the standard "
            f"library's docstrings, its tiny BERT and vocabulary ({args.steps} steps of 32 "
            f"examples, seq 64, lr 1e-3, seeds {args.seeds}). static: create_pretraining_"
            f"data's masks with --dupe_factor 10; dynamic: --masking=none shards (one pass) "
            f"masked anew for every batch; no next sentence: full-sentence shards "
            f"(--next_sentence=none, --short_seq_prob=0) masked anew, the masked-LM loss "
            f"alone. Scored on the held-out documents' shards with static masks, the same "
            f"predictions for every variant: as sentence pairs ({sizes['pairs']} examples) "
            f"and as full sentences ({sizes['full sentences']} examples)."
            f"\n\n{table}\n\n"
            f"Machine: {machine()}\n\nCommand: `{command_line()}`\n")
    write_section("Pretraining: static and dynamic masking", body)


if __name__ == "__main__":
    main()
