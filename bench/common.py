"""Shared helpers of the benchmarks: timing with repeats, machine description, and writing
one section of docs/benchmarks.md (each benchmark owns the section named after it)."""

import importlib
import importlib.metadata
import multiprocessing
import os
import platform
import re
import statistics
import sys
import time

import bert_tf  # noqa: F401  (TensorFlow's CPU kernels as bert_tf users get them: oneDNN on)

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   "docs", "benchmarks.md")


def median_time(fn, repeats=5, warmup=1):
    """Median wall seconds of `fn()` over `repeats` calls after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _step_worker(conn, module, function, args, warmup):
    """Child side of `interleaved_processes`: builds one step function, runs the warm-up
    steps, then one timed step, and sends both times back."""
    step = getattr(importlib.import_module(module), function)(*args)
    start = time.perf_counter()
    for _ in range(warmup):
        step()
    first = time.perf_counter() - start
    start = time.perf_counter()
    step()
    conn.send((first, time.perf_counter() - start))


def interleaved_processes(builders, repeats, warmup=1, on_round=None):
    """Times implementations that each run alone, in a fresh process.

    builders: {name: (module, function, args)}; `module.function(*args)` returns a step
    function. Every round runs each implementation in turn in a new process (build,
    `warmup` untimed steps, one timed step, exit), so no two frameworks ever share threads,
    allocators or memory: a torch model timed beside idle TensorFlow models, in one
    process or in processes holding their memory, ran 1.2-1.5x slower than alone. Rounds
    alternate, so background load hits all alike. on_round(r, times) is called after each
    round. Returns ({name: [seconds per round]}, {name: seconds of the first round's
    warm-up steps})."""
    ctx = multiprocessing.get_context("spawn")
    times, first = {name: [] for name in builders}, {}
    for r in range(repeats):
        for name, (module, function, args) in builders.items():
            conn, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_step_worker, args=(child, module, function, args,
                                                          warmup))
            proc.start()
            child.close()
            try:
                warm, timed = conn.recv()
            except EOFError:
                raise RuntimeError(f"{name}: its benchmark process died (traceback above)") \
                    from None
            finally:
                proc.join()
            first.setdefault(name, warm)
            times[name].append(timed)
        if on_round is not None:
            on_round(r, times)
    return times, first


def machine():
    """One line describing the CPU, cores and library versions."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = []
    for name in ("tensorflow", "keras", "keras-hub", "torch", "transformers", "tokenizers",
                 "tensorflow-text", "onnxruntime"):
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "unset")
    return f"{cpu} ({cpu_flags()}), {os.cpu_count()} cores, Python " \
        f"{platform.python_version()}; " + ", ".join(versions) + \
        f"; TF_ENABLE_ONEDNN_OPTS={onednn}"


# The CPU features the precision levers depend on: fp32 FMA width, native bf16, int8 dot
# products (VNNI), AMX tiles.
FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16",
         "amx_int8")


def cpu_flags():
    """'flags avx2 fma; without avx512f ...', read from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
    except OSError:
        return "CPU flags unknown"
    have = [flag for flag in FLAGS if flag in flags]
    missing = [flag for flag in FLAGS if flag not in flags]
    return f"flags {' '.join(have) or 'none of ' + ' '.join(FLAGS)}" + \
        (f"; without {' '.join(missing)}" if have and missing else "")


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def section_name(name, dtypes):
    """"NAME (fp32)" when a run measured one dtype of the comma list `dtypes`, else NAME,
    so a one-dtype run does not overwrite the other dtype's table."""
    dtypes = dtypes.split(",")
    return f"{name} ({dtypes[0]})" if len(dtypes) == 1 else name


def write_section(name, body, doc=DOC):
    """Replaces (or appends) the section `## name` of docs/benchmarks.md with `body`."""
    os.makedirs(os.path.dirname(doc), exist_ok=True)
    text = open(doc, encoding="utf-8").read() if os.path.exists(doc) else \
        "# Benchmarks\n\nEach section is written by the benchmark script it names.\n"
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    section = f"{begin}\n## {name}\n\n{body.strip()}\n{end}"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else \
        text.rstrip() + "\n\n" + section + "\n"
    tmp = doc + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, doc)


def int_list(text, flag):
    """"1,32" -> [1, 32]; otherwise exits with one line naming the script and `flag`."""
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        sys.exit(f"{os.path.relpath(sys.argv[0])}: {flag} must be comma-separated integers, "
                 f"got {text!r}")


def command_line():
    return "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])


def short_texts(count, stride=7):
    """`count` real short texts: the first sentence of every `stride`-th standard-library
    docstring (bert_tf/base/corpus.py), in corpus order. Their lengths are what users send a
    classifier (a median of ~15 word pieces, few over 40), not texts cut to fill 128."""
    from bert_tf.base.corpus import iter_documents
    texts = []
    for i, document in enumerate(iter_documents()):
        if i % stride == 0 and document and document[0].strip():
            texts.append(document[0].strip())
            if len(texts) == count:
                return texts
    raise RuntimeError(f"the corpus has fewer than {count} docstrings")


def length_summary(texts, vocab_file, max_seq_length=None):
    """Word pieces per text ([CLS] and [SEP] included) as 'median M, p90 P, max X'."""
    import numpy as np
    from bert_tf.text.tokenization import BertTokenizer
    tokenizer = BertTokenizer(vocab_file, do_lower_case=True)
    lengths = np.array([len(ids) + 2 for ids in tokenizer.encode(texts)])
    if max_seq_length:
        lengths = np.minimum(lengths, max_seq_length)
    return (f"{len(texts)} texts, word pieces per text incl. [CLS]/[SEP]: median "
            f"{np.median(lengths):.0f}, p90 {np.percentile(lengths, 90):.0f}, max "
            f"{lengths.max()}")
