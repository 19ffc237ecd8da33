"""Writes masked-LM + next-sentence pretraining examples as TFRecord shards.

    python -m bert_tf.create_pretraining_data --input_file='corpus/*.txt' \\
        --output_file=shards/train --num_shards=16 --vocab_file=vocab.txt \\
        --max_seq_length=128 --max_predictions_per_seq=20 --dupe_factor=10

google-research/bert's create_pretraining_data.py with the same flags, defaults, algorithm
and output features (shards from either train with either), but streaming: memory stays
flat whatever the corpus size, all cores work, the output is the same for a given seed
whatever --num_workers is, and a killed run picks up where it stopped with byte-identical
shards. docs/pretraining_data.md has the details; bert_tf/pretraining_data/ the algorithm.

Input (--input_format): `lines` (google's: one sentence per line, a blank line between
documents), `paragraphs` (a blank line between documents, sentences found by punctuation),
`jsonl` (one JSON object per line, a document; its --jsonl_field text is split into
sentences).

Why one file: this is the command's main process only (flags, which block goes to which
shard, the shard writer and the summary a rerun resumes from); the algorithm it runs lives
in bert_tf/pretraining_data/, one module per step.
"""

import argparse
import collections
import contextlib
import glob
import hashlib
import json
import os
import shutil
import signal
import sys
import threading
import time

# This module runs in the main process and (re-imported) in spawned workers. Neither may
# import TensorFlow (pretraining_data/tokenizer.py says why); the main process does not
# even import numpy: it only reads, dispatches and writes, and stays small.
from bert_tf import file_patterns
from bert_tf.pretraining_data import inputs
from bert_tf.cli import ArgumentParser, boolean, check_not_inputs, check_seq_length, run_main
from bert_tf.files import write_json
from bert_tf.pretraining_data.pool import WorkerError

PROG = "python -m bert_tf.create_pretraining_data"


class InputError(ValueError):
    """Bad flags or input: reported as one line, exit status 1."""


class Stopped(Exception):
    """SIGTERM or SIGINT stopped the run (one line, exit status 1): complete shards are
    kept, the rest is redone by the same command."""


@contextlib.contextmanager
def stop_on_signals():
    """SIGTERM (a stopped job or VM) and SIGINT (Ctrl-C) raise Stopped in this process,
    so the run's cleanup runs: workers killed, temporary files removed. A second signal
    is ignored, so it cannot cut that cleanup short. Outside the main thread (a caller's
    own thread) signals cannot be caught and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    names = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}
    previous = {number: signal.getsignal(number) for number in names}

    def stop(number, frame):
        for other in names:
            signal.signal(other, signal.SIG_IGN)
        raise Stopped(names[number])

    for number in names:
        signal.signal(number, stop)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)




def default_workers():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def parse_args(argv=None):
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    flag = lambda name, **kw: p.add_argument(f"--{name}", **kw)  # noqa: E731
    # google-research/bert's flags, same names and defaults.
    flag("input_file", required=True, help="input text: comma-separated globs")
    flag("output_file", required=True,
         help="output TFRecord file, or comma-separated files (one shard each), or with "
              "--num_shards N a prefix: PREFIX-00000-of-0000N ...")
    flag("vocab_file", required=True, help="WordPiece vocabulary of the model")
    boolean(p, "--do_lower_case", default=True,
            help="lower-case and strip accents (uncased models)")
    boolean(p, "--do_whole_word_mask", default=False,
            help="mask whole words (80/10/10 drawn once per word)")
    flag("max_seq_length", type=int, default=128, help="tokens per example, padded")
    flag("max_predictions_per_seq", type=int, default=20,
         help="most masked-LM predictions per example")
    flag("random_seed", type=int, default=12345, help="the output is a function of it")
    flag("dupe_factor", type=int, default=10,
         help="passes over the corpus, each with different masks")
    flag("masked_lm_prob", type=float, default=0.15,
         help="share of an example's tokens to predict")
    flag("short_seq_prob", type=float, default=0.1,
         help="probability of a shorter random target length (per document and pass)")
    # Ours.
    flag("num_shards", type=int, default=None,
         help="number of shards for a single --output_file prefix (unset: that one file, "
              "or one shard per comma-separated --output_file)")
    flag("num_workers", type=int, default=default_workers(),
         help="processes that share the work (this one and N-1 workers; default: all "
              "cores); the output does not depend on it")
    flag("max_ngram_size", type=int, default=1,
         help="mask spans of up to N words (or pieces), P(n) ~ 1/n; 1: no n-grams")
    boolean(p, "--gzip", default=False,
            help="gzip the shards (read with compression_type='GZIP')")
    flag("input_format", default="lines", choices=inputs.INPUT_FORMATS,
         help="lines: a sentence per line, blank line between documents (google's); "
              "paragraphs: blank line between documents, sentences found by punctuation; "
              "jsonl: a JSON object per line and document")
    flag("jsonl_field", default="text", help="text field of --input_format jsonl")
    flag("block_size_kb", type=int, default=512,
         help="text per block: the window random next sentences are drawn from and the "
              "unit of parallel work (changing it changes the output)")
    boolean(p, "--quiet", default=False, help="no progress bar")
    return p.parse_args(argv)


# ------------------------------------------------------------------------------ checks

def check_args(args):
    """Raises InputError (one line) on flags the algorithm cannot run with."""
    check_seq_length(args.max_seq_length, texts=2)
    rules = [
        (args.max_predictions_per_seq >= 1, "--max_predictions_per_seq must be >= 1"),
        (0.0 < args.masked_lm_prob <= 1.0, "--masked_lm_prob must be in (0, 1]"),
        (0.0 <= args.short_seq_prob <= 1.0, "--short_seq_prob must be in [0, 1]"),
        (args.dupe_factor >= 1, "--dupe_factor must be >= 1"),
        (args.num_workers >= 1, "--num_workers must be >= 1"),
        (args.max_ngram_size >= 1, "--max_ngram_size must be >= 1"),
        (args.block_size_kb >= 1, "--block_size_kb must be >= 1"),
        (args.num_shards is None or args.num_shards >= 1, "--num_shards must be >= 1"),
    ]
    for ok, message in rules:
        if not ok:
            raise InputError(message)


def expand_inputs(patterns):
    """Comma-separated globs -> files (sorted within each glob, globs in order); a path
    that exists as written is taken literally, and globs skip side files (file_patterns)."""
    files = []
    for pattern in file_patterns.split_patterns(patterns):
        matched = file_patterns.match(pattern)
        if not matched:
            raise InputError(f"--input_file: no file matches {pattern!r}")
        for path in matched:
            if not os.path.isfile(path):
                raise InputError(f"--input_file: {path} is not a file")
            if path not in files:
                files.append(path)
    if not files:
        raise InputError("--input_file is empty")
    return files


def shard_paths(output_file, num_shards):
    """--output_file (+ --num_shards) -> (shard paths, summary JSON path)."""
    outputs = [p for p in output_file.split(",") if p]
    if not outputs:
        raise InputError("--output_file is empty")
    if len(outputs) > 1:
        if num_shards not in (None, len(outputs)):
            raise InputError(f"--num_shards={num_shards} but --output_file names "
                             f"{len(outputs)} files")
        if len(set(outputs)) != len(outputs):
            raise InputError("--output_file names a file twice")
        return outputs, outputs[0] + ".summary.json"
    n = num_shards or 1
    if n == 1:
        return outputs, outputs[0] + ".summary.json"
    return [f"{outputs[0]}-{i:05d}-of-{n:05d}" for i in range(n)], \
        outputs[0] + ".summary.json"


def file_sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ------------------------------------------------------------------------------ summary

def summarize(counts, shards, config, seconds, complete, skipped, examples_this_run):
    """The summary: additive counts, the shares derived from them, and per-shard counts
    (also what a rerun reads to skip complete shards)."""
    c = collections.Counter(counts)

    def share(a, b):
        return round(c[a] / c[b], 6) if c[b] else None

    summary = {
        "complete": complete,
        "examples": c["examples"],
        "documents": c["documents"],
        "sentences": c["sentences"],
        "input_tokens": c["input_tokens"],
        "example_tokens": c["example_tokens"],
        "masked_fraction": share("masked", "example_tokens"),
        "masked_as_mask_share": share("masked_as_mask", "masked"),
        "masked_as_random_share": share("masked_as_random", "masked"),
        "masked_unchanged_share": share("masked_unchanged", "masked"),
        "random_next_share": share("random_next", "examples"),
        "short_target_share": share("short_target_examples", "examples"),
        "short_target_pass_share": share("short_target_passes", "document_passes"),
        "padded_share": share("padded_examples", "examples"),
        "truncated_share": share("truncated_examples", "examples"),
        "seconds": round(seconds, 3),
        "examples_this_run": examples_this_run,
        "examples_per_second": round(examples_this_run / seconds, 1) if seconds else None,
        "skipped_shards": skipped,
        "counts": dict(sorted(c.items())),
        "shards": shards,
        "config": config,
    }
    return summary


def read_previous(summary_path, shards, config):
    """Shards a previous run with the same config completed: path -> its summary entry."""
    try:
        with open(summary_path, encoding="utf-8") as f:
            previous = json.load(f)
    except (OSError, ValueError):
        return {}
    if previous.get("config") != config:
        return {}
    by_abspath = {os.path.abspath(p): p for p in shards}
    done = {}
    for entry in previous.get("shards", []):
        path = by_abspath.get(os.path.abspath(str(entry.get("path"))))
        if path and os.path.isfile(path) and os.path.getsize(path) == entry.get("bytes"):
            done[path] = dict(entry, path=path)
    return done


def check_no_stale_shards(output_file, summary_path, shards):
    """InputError when the summary beside the shards lists shards of an earlier run that
    this run would not write over (another --num_shards): left there, they would be read
    with the new ones by the same glob, two sets of examples mixed without a word."""
    try:
        with open(summary_path, encoding="utf-8") as f:
            previous = json.load(f)
        listed = [str(entry.get("path")) for entry in previous.get("shards", [])]
    except (OSError, ValueError, AttributeError, TypeError):
        return
    ours = {os.path.abspath(p) for p in shards}
    stale = [p for p in listed if os.path.abspath(p) not in ours and os.path.isfile(p)]
    if stale:
        more = f" and {len(stale) - 1} more" if len(stale) > 1 else ""
        raise InputError(
            f"--output_file={output_file}: "
            f"{stale[0]}{more} are shards of an earlier run with another --num_shards "
            f"(listed in {summary_path}), which a glob of the new shards would also read; "
            f"delete them or choose another --output_file")


def append_file(src_path, dst):
    """Appends a file to an open binary file, in the kernel where it can (sendfile)."""
    dst.flush()
    with open(src_path, "rb") as src:
        size = os.fstat(src.fileno()).st_size
        sent = 0
        try:
            while sent < size:
                n = os.sendfile(dst.fileno(), src.fileno(), sent, size - sent)
                if n == 0:
                    break
                sent += n
        except (AttributeError, OSError):
            pass   # no sendfile here: copy what is left in Python
        if sent < size:
            src.seek(sent)
            dst.seek(0, os.SEEK_END)
            shutil.copyfileobj(src, dst, 1 << 20)


def remove_temporaries(path):
    for tmp in glob.glob(glob.escape(path) + ".tmp*"):
        try:
            os.remove(tmp)
        except OSError:
            pass


# ------------------------------------------------------------------------------ run

class _Progress:
    """Progress over input bytes with documents/s and examples/s."""

    def __init__(self, total, disable):
        from bert_tf.progress import progress_bar
        self.start = time.time()
        self.bar = progress_bar(total, "create_pretraining_data", unit="B", unit_scale=True,
                                disable=disable)
        self.docs = self.examples = 0

    def update(self, nbytes, stats=None):
        if stats:
            self.docs += stats.get("documents", 0)
            self.examples += stats.get("examples", 0)
        elapsed = max(time.time() - self.start, 1e-9)
        self.bar.set_postfix_str(f"{self.docs / elapsed:,.0f} docs/s, "
                                 f"{self.examples / elapsed:,.0f} examples/s", refresh=False)
        self.bar.update(nbytes)

    def close(self):
        self.bar.close()


class ShardWriter:
    """Appends finished blocks to their shards in input order; a shard is written as
    NAME.tmp and renamed when its last block is in, then the summary JSON is rewritten
    (it lists the complete shards: a rerun keeps them)."""

    def __init__(self, shards, done, summary_path, config, total_bytes, quiet):
        self.shards, self.done = shards, done
        self.summary_path, self.config = summary_path, config
        self.entries = dict(done)     # path -> {"path", "bytes", "examples", "counts"}
        self.cursor = -1              # the shard being written
        self.file = None
        self.counts = collections.Counter()     # of the shard being written
        self.this_run = collections.Counter()
        self.start = time.time()
        self.progress = _Progress(total_bytes, disable=quiet)

    def skip(self, block):
        self.progress.update(block.length)

    def add(self, block, shard, part, stats):
        """Appends a block's part file (then deletes it) to its shard."""
        self._advance_to(shard)
        if self.file is None:
            self.file = open(f"{self.shards[shard]}.tmp", "wb")
        append_file(part, self.file)
        os.remove(part)
        stats = collections.Counter(stats)
        stats["input_bytes"] += block.length
        stats["documents_split"] += block.documents_split
        stats["lines_cut"] += block.lines_cut
        self.counts.update(stats)
        self.this_run.update(stats)
        self.progress.update(block.length, stats)

    def finish(self):
        """Closes the last shards (empty ones included); returns the final summary."""
        self._advance_to(len(self.shards))
        self.progress.close()
        return self.write_summary(complete=True)

    def close(self):
        """Ends the run; a shard still being written (the run failed) is removed: a
        rerun writes it again from its first block."""
        self.progress.close()
        if self.file is not None:
            self.file.close()
            with contextlib.suppress(OSError):
                os.remove(self.file.name)
            self.file = None

    def write_summary(self, complete):
        counts = collections.Counter()
        for entry in self.entries.values():
            counts.update(entry["counts"])
        ordered = [self.entries[p] for p in self.shards if p in self.entries]
        summary = summarize(counts, ordered, self.config, time.time() - self.start,
                            complete, len(self.done), self.this_run["examples"])
        write_json(self.summary_path, summary, indent=1, sort_keys=False, ensure_ascii=True)
        return summary

    def _advance_to(self, shard):
        """Closes the current shard and any empty ones before `shard`."""
        while self.cursor < shard:
            self._close_shard()
            self.cursor += 1

    def _close_shard(self):
        if self.cursor < 0 or self.shards[self.cursor] in self.done:
            return
        path = self.shards[self.cursor]
        f = self.file if self.file is not None else open(f"{path}.tmp", "wb")
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(f"{path}.tmp", path)
        self.entries[path] = {"path": path, "bytes": os.path.getsize(path),
                              "examples": self.counts["examples"], "counts": dict(self.counts)}
        self.file, self.counts = None, collections.Counter()
        self.write_summary(complete=False)


def make_config(args, files, sizes, settings, vocab, shards):
    """Everything the bytes of the shards depend on: a rerun with the same config keeps
    the shards a previous run completed."""
    return {
        "settings": {k: v for k, v in settings.__dict__.items() if k != "vocab_file"},
        "vocab": {"path": settings.vocab_file, "sha256": file_sha256(args.vocab_file),
                  "size": len(vocab)},
        "inputs": [{"path": os.path.abspath(p), "bytes": s,
                    "mtime_ns": os.stat(p).st_mtime_ns} for p, s in zip(files, sizes)],
        "block_size_kb": args.block_size_kb,
        "shards": [os.path.abspath(p) for p in shards],
    }


def run(args):
    """Does the work; returns the summary dict. Raises InputError on bad input."""
    check_args(args)
    files = expand_inputs(args.input_file)
    sizes = [os.path.getsize(p) for p in files]
    if sum(sizes) == 0:
        raise InputError(f"--input_file: {', '.join(files)}: no text (empty)")
    try:
        vocab = inputs.load_vocab(args.vocab_file)   # fails here, before any work, if bad
    except ValueError as e:
        raise InputError(str(e)) from None
    shards, summary_path = shard_paths(args.output_file, args.num_shards)
    check_not_inputs([("output_file", path) for path in shards + [summary_path]],
                     [("--input_file", path) for path in files] +
                     [("--vocab_file", args.vocab_file)])
    check_no_stale_shards(args.output_file, summary_path, shards)
    for path in shards + [summary_path]:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    settings = inputs.Settings(
        vocab_file=os.path.abspath(args.vocab_file), do_lower_case=args.do_lower_case,
        do_whole_word_mask=args.do_whole_word_mask, max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq, random_seed=args.random_seed,
        dupe_factor=args.dupe_factor, masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob, max_ngram_size=args.max_ngram_size,
        input_format=args.input_format, jsonl_field=args.jsonl_field, gzip=args.gzip)
    config = make_config(args, files, sizes, settings, vocab, shards)
    done = read_previous(summary_path, shards, config)
    for path in shards:
        if path not in done:
            remove_temporaries(path)
    total = inputs.stream_size(files, sizes)
    n_shards = len(shards)
    block_bytes = args.block_size_kb * 1024
    if n_shards > 1 and total < n_shards * block_bytes:
        # Each shard needs blocks of its own: a small input is cut into smaller blocks
        # (at least 4 kB) rather than leaving shards empty.
        block_bytes = max(4096, -(-total // n_shards))

    def shard_of(offset):
        # Shards are contiguous ranges of blocks, by position in the input: known before
        # the blocks are read, the same for every run.
        return min(n_shards - 1, offset * n_shards // total)

    pool = writer = None
    # Blocks in input order: [block, shard, part path, counts or None while running].
    # Parts go to their shard strictly in this order, whichever finishes first.
    waiting = collections.deque()
    by_index = {}

    def collect(wait):
        if pool is not None and pool.busy():
            for index, stats in pool.results(None if wait else 0):
                by_index.pop(index)[3] = stats
        while waiting and waiting[0][3] is not None:
            writer.add(*waiting.popleft())

    finished = False
    with stop_on_signals():
        try:
            # No more processes than blocks (each costs ~70 MB); the output does not
            # depend on it.
            processes = min(args.num_workers, -(-total // block_bytes))
            if processes > 1 and len(done) < n_shards:
                # Started first: the workers import numpy while this process finds blocks.
                from bert_tf.pretraining_data.pool import WorkerPool
                pool = WorkerPool(processes - 1, settings)
            writer = ShardWriter(shards, done, summary_path, config, total, args.quiet)
            # --num_workers N: this process and N - 1 worker processes share the blocks.
            # This one takes a block whenever the workers' queues are full, so no process
            # sits idle just dispatching (and the tree holds one interpreter less).
            for block in inputs.iter_blocks(files, block_bytes, args.input_format):
                shard = shard_of(block.offset)
                if shards[shard] in done:
                    writer.skip(block)
                    continue
                # Bounded: at most a few blocks ahead of the oldest unfinished one, so
                # part files on disk stay few whatever the input size.
                while len(waiting) >= 3 * processes:
                    collect(wait=True)
                part = f"{shards[shard]}.tmp-part{block.index:07d}"
                entry = [block, shard, part, None]
                waiting.append(entry)
                job = (block.index, block.segments, part)
                if pool is not None and pool.has_room():
                    by_index[block.index] = entry
                    pool.submit(job)
                else:
                    from bert_tf.pretraining_data import worker   # numpy: only when here
                    entry[3] = worker.run_job(settings, job)
                collect(wait=False)
            while waiting:
                collect(wait=True)
            if pool is not None:
                pool.close()
                pool = None
            summary = writer.finish()
            finished = True
        except Stopped as e:
            complete = len(writer.entries) if writer is not None else len(done)
            raise Stopped(f"{e}: stopped; {complete} of {n_shards} shard(s) complete, run "
                          f"the same command again to resume") from None
        finally:
            if writer is not None:
                writer.close()
            if pool is not None:
                pool.close(kill=True)
            if not finished:
                # The workers are gone (killed and waited for): no part file appears any
                # more. A rerun redoes every shard not complete from its first block and
                # needs none of the temporary files, which go (a block interrupted between
                # its shard and its part file included).
                for path in shards:
                    if path not in (writer.entries if writer is not None else done):
                        remove_temporaries(path)
    empty = [p for p in shards if writer.entries.get(p, {}).get("examples") == 0]
    if summary["examples"] == 0 or empty:
        for path in shards + [summary_path]:
            if os.path.exists(path):
                os.remove(path)
    if summary["examples"] == 0:
        raise InputError(f"--input_file: no examples: no document in "
                         f"{', '.join(files)} has a token")
    if empty:
        # An empty shard is a file training would wait on forever: none is written.
        raise InputError(
            f"--num_shards={n_shards}: {len(empty)} shard(s) would hold no examples "
            f"({os.path.basename(empty[0])} first; the input is {total:,} bytes); give "
            f"fewer shards or more text")
    return summary


def print_summary(summary, summary_path, out=None):
    c = summary["counts"]
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    kept = summary["skipped_shards"]
    lines = [
        f"wrote {summary['examples_this_run']:,} examples in {summary['seconds']:.1f} s "
        f"({summary['examples_per_second'] or 0:,.0f} examples/s); "
        f"{summary['examples']:,} examples in {len(summary['shards'])} shard(s)"
        + (f", {kept} of them complete from a previous run and kept" if kept else ""),
        f"documents {summary['documents']:,} ({c.get('one_sentence_documents', 0):,} of one "
        f"sentence, {c.get('documents_without_tokens', 0):,} without tokens), sentences "
        f"{summary['sentences']:,}, input tokens {summary['input_tokens']:,}",
        f"example tokens {summary['example_tokens']:,}, masked {pct(summary['masked_fraction'])}"
        f" ({pct(summary['masked_as_mask_share'])} [MASK], "
        f"{pct(summary['masked_as_random_share'])} random, "
        f"{pct(summary['masked_unchanged_share'])} unchanged)",
        f"random next {pct(summary['random_next_share'])}, short target "
        f"{pct(summary['short_target_share'])} of examples, padded "
        f"{pct(summary['padded_share'])}, truncated {pct(summary['truncated_share'])}",
    ]
    problems = {k: c[k] for k in ("invalid_utf8_bytes", "lines_cut", "documents_split",
                                  "malformed_json_lines", "json_lines_without_field",
                                  "random_next_same_document") if c.get(k)}
    if problems:
        lines.append("input problems (handled): " + ", ".join(f"{k} {v:,}"
                                                               for k, v in problems.items()))
    lines.append(f"summary: {summary_path}")
    print("\n".join(lines), file=out or sys.stdout)


def main(argv=None):
    """Returns the run's summary; a bad input or a file or worker failure is one
    `error: ...` line and exit status 1 (bert_tf/cli.py)."""
    args = parse_args(argv)
    summary = run_main(run, args, errors=(OSError, WorkerError, Stopped), keras=False)
    print_summary(summary, shard_paths(args.output_file, args.num_shards)[1])
    return summary


if __name__ == "__main__":
    main()
