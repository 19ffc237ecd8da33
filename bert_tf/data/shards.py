"""create_pretraining_data's shard files: their paths (`shard_paths`) and `ShardWriter`,
which deals each finished block's pieces to the shards in input order and renames the
shards into place when the last block is in, with what a stopped run needs to go on
(`save_progress`, `read_progress`). No numpy here: this runs in the command's main
process, which stays small (bert_tf/text/python_tokenizer.py says why).
"""

import collections
import contextlib
import json
import os
import re
import time

from bert_tf.data import storage
from bert_tf.data.errors import InputError
from bert_tf.data.summary import config_digest, summarize


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
        from bert_tf.base.progress import progress_bar
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


# How often a run fsyncs its shards (its record of how far they go is written after
# every block: a kill -9 loses nothing the page cache holds; a machine's crash at most
# what came since the last fsync, which read_progress then finds missing).
PROGRESS_SECONDS = 10


def part_path(shard, index):
    """Block `index`'s part file (its pieces for every shard), named after a shard."""
    return f"{shard}.tmp-part{index:07d}"


def remove_parts(shard):
    """Removes the part files named after `shard` (of blocks not dealt out yet)."""
    import glob as glob_lib
    if storage.is_url(shard):
        escaped = re.sub(r"([*?\[])", r"[\1]", shard)
        for path in storage.glob(escaped + ".tmp-part*"):
            storage.remove(path)
        return
    for path in glob_lib.glob(glob_lib.escape(shard) + ".tmp-part*"):
        with contextlib.suppress(OSError):
            os.remove(path)


def progress_path(summary_path):
    """Where a stopped local run records what its shards' temporary files hold."""
    return summary_path[:-len(".summary.json")] + ".tmp-progress.json"


def read_progress(path, config, shards, done):
    """What a stopped run with this `config` wrote (ShardWriter.save_progress), when every
    shard it was writing still holds at least that: {"next_block", "written_bytes",
    "sizes", "examples", "counts"}; else None."""
    try:
        with open(path, encoding="utf-8") as f:
            progress = json.load(f)
        if progress["config_sha256"] != config_digest(config):
            return None
        for shard, size in progress["sizes"].items():
            if shard in done or shard not in shards or \
                    os.path.getsize(f"{shard}.tmp") < size:
                return None
        return progress
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def copy_range(src_path, offset, length, dst):
    """Appends `length` bytes of `src_path` from `offset` to the open binary file `dst`
    (local: in the kernel where it can)."""
    if not length:
        return
    if not storage.is_url(src_path) and hasattr(dst, "fileno"):
        dst.flush()
        with open(src_path, "rb") as src:
            sent = 0
            try:
                while sent < length:
                    n = os.sendfile(dst.fileno(), src.fileno(), offset + sent, length - sent)
                    if n == 0:
                        break
                    sent += n
            except (AttributeError, OSError):
                pass     # no sendfile here: the rest in Python
            if sent < length:
                src.seek(offset + sent)
                dst.write(src.read(length - sent))
        return
    with storage.open_read(src_path) as src:
        src.seek(offset)
        dst.write(src.read(length))


class ShardWriter:
    """Deals each finished block's pieces to the shards, in input order (block.piece_of:
    every shard gets a part of every block), appending them to the shards' temporary
    files `NAME.tmp`; when the last block is in, every shard is fsynced and renamed into
    place, and the summary lists them.

    A stop keeps the work: after every block `PREFIX.tmp-progress.json` records how many
    blocks the temporary files hold, their sizes and counts, with the digest of the run's
    config (and every PROGRESS_SECONDS, and when the run is stopped, the files are
    fsynced first). The same command then cuts them back to that (a kill -9 may have
    written more) and goes on from the next block: byte for byte the uninterrupted run.
    Shards a previous run completed (`done`) are kept and get nothing more."""

    def __init__(self, shards, done, summary_path, config, total_bytes, quiet,
                 progress=None):
        self.shards, self.done = shards, done
        self.summary_path, self.config = summary_path, config
        self.entries = dict(done)     # path -> {"path", "bytes", "examples", "counts"}
        self.writing = [p for p in shards if p not in done]
        # What the temporary files hold after the last whole block, replaced whole (one
        # assignment) as each block is in: a stop in the middle of a block (a signal
        # raises where it lands) never records its pieces.
        self.state = {"next_block": 0, "written_bytes": 0,
                      "sizes": dict.fromkeys(self.writing, 0),
                      "examples": dict.fromkeys(self.writing, 0),
                      "counts": {p: {} for p in self.writing}}
        if progress:
            self.state = {key: progress[key] for key in self.state}
            for path in self.writing:
                with open(f"{path}.tmp", "r+b") as f:
                    f.truncate(progress["sizes"][path])
        else:
            for path in self.writing:
                with named(path):
                    open(f"{path}.tmp", "wb").close()
        self.this_run = collections.Counter()
        self.start = self.saved = time.time()
        self.progress = ShardProgress(total_bytes, disable=quiet)
        self.progress.update(self.state["written_bytes"])

    @property
    def next_block(self):
        return self.state["next_block"]

    @property
    def written_bytes(self):
        return self.state["written_bytes"]

    def skip(self, block):
        self.progress.update(block.length)

    def add(self, block, part, stats):
        """Appends a block's pieces (its part file, then deleted) to the shards."""
        stats = collections.Counter(stats)
        pieces = stats.pop("pieces")
        stats["input_bytes"] += block.length
        stats["documents_split"] += block.documents_split
        stats["lines_cut"] += block.lines_cut
        state = self.state
        offset, sizes, examples = 0, dict(state["sizes"]), dict(state["examples"])
        for path, (length, count) in zip(self.shards, pieces):
            if path in examples:
                with named(path), open(f"{path}.tmp", "ab") as f:
                    copy_range(part, offset, length, f)
                sizes[path] += length
                examples[path] += count
            offset += length
        os.remove(part)
        # The block's counts go to one shard's entry (the entries add up to the run's).
        counts = dict(state["counts"])
        home = self.shards[block.index % len(self.shards)]
        if home in counts:
            total = collections.Counter(counts[home])
            total.update(stats)       # (not `+`, which drops the counts that are 0)
            counts[home] = dict(total)
        self.state = {"next_block": block.index + 1,
                      "written_bytes": state["written_bytes"] + block.length,
                      "sizes": sizes, "examples": examples, "counts": counts}
        self.this_run.update(stats)
        self.progress.update(block.length, stats)
        self.save_progress(sync=time.time() - self.saved >= PROGRESS_SECONDS)

    def save_progress(self, sync=True):
        """Records what the shards' temporary files hold (written whole, renamed into
        place); `sync`: fsyncs them first."""
        record = dict(self.state, config_sha256=config_digest(self.config))
        if sync:
            for path in self.writing:
                with named(path), open(f"{path}.tmp", "ab") as f:
                    os.fsync(f.fileno())
        storage.write_text(progress_path(self.summary_path), json.dumps(record) + "\n")
        if sync:
            self.saved = time.time()

    def finish(self):
        """Renames every shard into place; returns the final summary."""
        for path in self.writing:
            with named(path):
                with open(f"{path}.tmp", "ab") as f:
                    os.fsync(f.fileno())
                os.replace(f"{path}.tmp", path)
            self.entries[path] = {"path": path, "bytes": os.path.getsize(path),
                                  "examples": self.state["examples"][path],
                                  "counts": self.state["counts"][path]}
        self.progress.close()
        return self.write_summary(complete=True)

    def close(self):
        """Ends the run's progress display."""
        self.progress.close()

    def write_summary(self, complete):
        return write_summary(self.summary_path, self.shards, self.entries, self.config,
                             time.time() - self.start, complete, len(self.done),
                             self.this_run["examples"])
