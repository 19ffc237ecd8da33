"""The test tiers' times on this machine: the fast tier (`python -m pytest -q -m fast`,
tests/README.md) run as whole processes, and with --ci the whole of `.ci/run` once from a
clean clone of HEAD in a new virtual environment, as CI runs it. Writes the section "Test
suite and CI (CPU)" of docs/benchmarks.md, one section per CPU kind (AVX2, AVX-512):
figures from two CPUs are never put in one table.

    python bench/suite_times.py                 # the fast tier, 1 warm-up + 3 runs
    python bench/suite_times.py --ci            # and .ci/run from a clean clone (~17-55 min)

Run it on an otherwise idle machine: the suite uses both cores.
"""

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import command_line, cpu_flags, machine, markdown_table, write_section  # noqa: E402,I001

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = [sys.executable, "-m", "pytest", "-q", "-m", "fast"]


def timed(command, cwd, env=None, log=None):
    """(wall seconds, CPU seconds of the command's processes, its output text)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if log:
        with open(log, "w", encoding="utf-8") as f:
            f.write(done.stdout)
    if done.returncode != 0:
        sys.exit(f"bench/suite_times.py: {' '.join(command)} exited {done.returncode}:\n"
                 f"{done.stdout[-3000:]}")
    return wall, cpu, done.stdout


def passed(output):
    """pytest's 'N passed' count and its own seconds, from its last line."""
    found = re.search(r"(\d+) passed.* in ([\d.]+)s", output)
    if not found:
        sys.exit(f"bench/suite_times.py: no 'N passed in S s' line in:\n{output[-2000:]}")
    return int(found.group(1)), float(found.group(2))


def fast_tier(repeats):
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    timed(FAST, ROOT, env)                                         # warm-up
    runs = [timed(FAST, ROOT, env) for _ in range(repeats)]
    count = passed(runs[-1][2])[0]
    walls = [w for w, _, _ in runs]
    return ["`python -m pytest -q -m fast`", f"{count} tests",
            f"{statistics.median(walls):.1f} s ({min(walls):.1f}-{max(walls):.1f}, "
            f"{repeats} runs)",
            f"{statistics.median(c for _, c, _ in runs):.0f} CPU-s"]


def whole_ci(log):
    """.ci/run from a clean clone of HEAD in a new venv: (rows, commit)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bert_tf_ci_") as scratch:
        clone, venv = os.path.join(scratch, "clone"), os.path.join(scratch, "venv")
        subprocess.run(["git", "clone", "-q", ROOT, clone], check=True)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTEST_ADDOPTS", "PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env["PATH"]
        env["VIRTUAL_ENV"] = venv
        wall, cpu, output = timed(["bash", ".ci/run"], clone, env, log)
    count, pytest_seconds = passed(output)
    suite_done = re.search(r"== pytest done at (\d+) s", output)
    return [["`python -m pytest -q` (in `.ci/run`)", f"{count} tests",
             f"{pytest_seconds:.0f} s (pytest's own count)", "-"],
            ["`.ci/run` from a clean clone and a new venv", "installs, the suite, the GPU "
             "kit's CPU mode and README (a) from a runtime-only install",
             f"{wall:.0f} s = {wall / 60:.1f} min (the suite done at "
             f"{suite_done.group(1) if suite_done else '?'} s)", f"{cpu:.0f} CPU-s"]], commit


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="fast-tier runs counted")
    p.add_argument("--ci", action="store_true", help="also .ci/run from a clean clone")
    p.add_argument("--ci_log", default=os.path.join(tempfile.gettempdir(),
                                                    "bert_tf_ci.log"))
    args = p.parse_args()
    if args.repeats < 1:
        sys.exit("bench/suite_times.py: --repeats must be at least 1")
    rows = [fast_tier(args.repeats)]
    where = "the working tree"
    if args.ci:
        ci_rows, commit = whole_ci(args.ci_log)
        rows += ci_rows
        where += f"; `.ci/run` at commit {commit}"
    kind = "AVX-512" if "avx512f" in cpu_flags().split(";")[0].split() else "AVX2"
    body = "\n\n".join([
        "Wall seconds of whole commands (start-up included); the fast tier's median of "
        "its runs after one warm-up. CI's limit is 20 minutes on a 2-core machine; the "
        "fast tier's is 60 s (tests/README.md).",
        markdown_table(["command", "what runs", "wall", "CPU"], rows),
        f"{time.strftime('%Y-%m-%d')}, {where}. Machine: {machine()}; "
        f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', 'unset')} "
        "(CI runs with it set).",
        f"Command: `{command_line()}`"])
    write_section(f"Test suite and CI ({kind})", body)
    print(body)


if __name__ == "__main__":
    main()
