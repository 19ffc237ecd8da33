"""create_pretraining_data's shard files: their paths (`shard_paths`) and `ShardWriter`,
which appends each finished block's part file to its shard in input order and renames a
shard into place when its last block is in. No numpy here: this runs in the command's
main process, which stays small (tokenizer.py says why).
"""

import collections
import contextlib
import json
import os
import time

from bert_tf.pretraining_data import storage
from bert_tf.pretraining_data.errors import InputError
from bert_tf.pretraining_data.summary import summarize


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


@contextlib.contextmanager
def named(path):
    """An OSError that names no file (a write, flush or fsync that fails on a full disk)
    raised as one that names the shard `path`: the one line names what could not be
    written."""
    try:
        yield
    except OSError as e:
        if e.filename or not e.errno:
            raise
        raise OSError(e.errno, os.strerror(e.errno), path) from None


class ShardProgress:
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


def write_summary(summary_path, shards, entries, config, seconds, complete, skipped,
                  examples_this_run):
    """The summary of the complete shards `entries` ({path: entry}) written atomically to
    summary_path (by either engine); returns it."""
    counts = collections.Counter()
    for entry in entries.values():
        counts.update(entry["counts"])
    summary = summarize(counts, [entries[p] for p in shards if p in entries], config,
                        seconds, complete, skipped, examples_this_run)
    storage.write_text(summary_path, json.dumps(summary, indent=1, ensure_ascii=True) + "\n")
    return summary


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
        self.progress = ShardProgress(total_bytes, disable=quiet)

    def skip(self, block):
        self.progress.update(block.length)

    def add(self, block, shard, part, stats):
        """Appends a block's part file (then deletes it) to its shard."""
        self._advance_to(shard)
        with named(self.shards[shard]):
            if self.file is None:
                self.file = open(f"{self.shards[shard]}.tmp", "wb")
            storage.append_file(part, self.file)
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
            with contextlib.suppress(OSError):   # a full disk: its buffer is dropped
                self.file.close()
            with contextlib.suppress(OSError):
                os.remove(self.file.name)
            self.file = None

    def write_summary(self, complete):
        return write_summary(self.summary_path, self.shards, self.entries, self.config,
                             time.time() - self.start, complete, len(self.done),
                             self.this_run["examples"])

    def _advance_to(self, shard):
        """Closes the current shard and any empty ones before `shard`."""
        while self.cursor < shard:
            self._close_shard()
            self.cursor += 1

    def _close_shard(self):
        if self.cursor < 0 or self.shards[self.cursor] in self.done:
            return
        path = self.shards[self.cursor]
        with named(path):
            f = self.file if self.file is not None else open(f"{path}.tmp", "wb")
            f.flush()
            os.fsync(f.fileno())
            f.close()
            os.replace(f"{path}.tmp", path)
        self.entries[path] = {"path": path, "bytes": os.path.getsize(path),
                              "examples": self.counts["examples"], "counts": dict(self.counts)}
        self.file, self.counts = None, collections.Counter()
        self.write_summary(complete=False)
