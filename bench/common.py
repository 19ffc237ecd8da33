"""Shared helpers of the benchmarks: timing with repeats, machine description, and writing
one section of docs/benchmarks.md (each benchmark owns the section named after it)."""

import os
import platform
import re
import statistics
import sys
import time

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
    for name in ("tensorflow", "keras", "keras_hub", "torch", "transformers", "tokenizers",
                 "tensorflow_text"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "__version__"):
            versions.append(f"{name} {module.__version__}")
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}; " + \
        ", ".join(versions)


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


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


def command_line():
    return "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
