"""create_pretraining_data's run, stage by stage, for the command and for Python callers:

    plan = prepare(args)           flags and inputs checked, the shards a previous run
                                   completed found, the input cut into blocks per shard
    summary, written = write_shards(plan, args.num_workers, args.quiet)
                                   blocks to this process and the workers, parts to shards
    check_written(plan, summary, written)
                                   no run without examples, no empty shard left behind

`run(args)` does all three. `args`: the command's flags as attributes (an
argparse.Namespace, or any object with the same names). No numpy in this process until it
works on a block itself (bert_tf/text/python_tokenizer.py says why the main process stays small).
"""

import collections
import dataclasses
import os

from bert_tf.base import file_patterns
from bert_tf.base.checks import check_not_inputs, check_output_place, check_seq_length
from bert_tf.data import inputs, segmenters, storage
from bert_tf.data.errors import InputError, Stopped, stop_on_signals
from bert_tf.data import shards as shards_lib
from bert_tf.data.shards import ShardWriter, shard_paths
from bert_tf.data.summary import (ENTRY_SUFFIX, check_no_stale_shards, read_previous)


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
        (args.masking == "static" or not inputs.chooses_masks(
            args.masked_lm_prob, args.do_whole_word_mask, args.max_ngram_size),
         "--masked_lm_prob, --do_whole_word_mask and --max_ngram_size choose masks; with "
         "--masking=none give them to run_pretraining --masking=dynamic"),
        (args.block_size_kb >= 1, "--block_size_kb must be >= 1"),
        (args.num_shards is None or args.num_shards >= 1, "--num_shards must be >= 1"),
    ]
    for ok, message in rules:
        if not ok:
            raise InputError(message)
    if args.chinese_word_segmenter:
        try:
            segmenters.check_available(args.chinese_word_segmenter)
        except ValueError as e:
            raise InputError(str(e)) from None


def check_places(args):
    """InputError (one line) when a path cannot be reached: the local engine takes local
    paths only; the Beam engine reaches URLs (gs://...) through Beam's file systems, each
    URL's scheme served by one."""
    outputs = [p for p in (args.output_file or "").split(",") if p]
    flags = ([("--input_file", p) for p in file_patterns.split_patterns(args.input_file or "")]
             + [("--output_file", p) for p in outputs] + [("--vocab_file", args.vocab_file)])
    if not args.runner:
        storage.check_local(flags + [("--tfds_data_dir", args.tfds_data_dir)])
        return
    if storage.is_url(args.tfds_data_dir):
        raise InputError(f"--tfds_data_dir: {args.tfds_data_dir} is a URL: the split's text "
                         f"is exported beside the dataset, in a local folder; prepare the "
                         f"dataset on a local or mounted disk")
    for flag, path in flags:
        if storage.is_url(path):
            storage.check_url(flag, path)


def expand_inputs(patterns):
    """Comma-separated globs -> files (sorted within each glob, globs in order); a path
    that exists as written is taken literally, and globs skip side files (file_patterns)."""
    files = []
    for pattern in file_patterns.split_patterns(patterns):
        matched = file_patterns.match(pattern, storage.glob, storage.exists)
        if not matched:
            raise InputError(f"--input_file: no file matches {pattern!r}")
        for path in matched:
            if not storage.isfile(path):
                raise InputError(f"--input_file: {path} is not a file")
            if path not in files:
                files.append(path)
    if not files:
        raise InputError("--input_file is empty")
    return files


def make_settings(args, num_shards=1):
    """The Settings the workers run with (everything the output depends on)."""
    return inputs.Settings(
        num_shards=num_shards,
        vocab_file=storage.absolute(args.vocab_file), do_lower_case=args.do_lower_case,
        # With --masking=none the segmenter's words go into the shards as marks, for
        # run_pretraining --masking=dynamic --do_whole_word_mask.
        do_whole_word_mask=args.do_whole_word_mask or (
            bool(args.chinese_word_segmenter) and args.masking == "static"),
        max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq, random_seed=args.random_seed,
        dupe_factor=args.dupe_factor, masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob, max_ngram_size=args.max_ngram_size,
        input_format=args.input_format, jsonl_field=args.jsonl_field, gzip=args.gzip,
        masking=args.masking, next_sentence=args.next_sentence,
        chinese_word_segmenter=args.chinese_word_segmenter)


def make_config(args, files, sizes, settings, vocab, shards):
    """Everything the bytes of the shards depend on: a rerun with the same config keeps
    the shards a previous run completed."""
    config = {
        # (masking, next_sentence and the segmenter only when not the default, so that
        # runs from before these flags resume)
        "settings": {k: v for k, v in settings.__dict__.items() if k != "vocab_file"
                     and (k, v) not in (("masking", "static"), ("next_sentence", "nsp"),
                                        ("chinese_word_segmenter", None))},
        "vocab": {"path": settings.vocab_file, "sha256": storage.sha256(args.vocab_file),
                  "size": len(vocab)},
        "inputs": [{"path": storage.absolute(p), "bytes": s,
                    "mtime_ns": storage.mtime_ns(p)} for p, s in zip(files, sizes)],
        "block_size_kb": args.block_size_kb,
        "shards": [storage.absolute(p) for p in shards],
    }
    if settings.chinese_word_segmenter:     # its dictionary decides the words
        config["segmenter"] = segmenters.version(settings.chinese_word_segmenter)
    return config


@dataclasses.dataclass
class Plan:
    """What a run will do, known before the first block is read."""
    files: list          # input files, in order
    shards: list         # output shard paths
    summary_path: str
    settings: inputs.Settings
    config: dict         # summary.json's "config": what the shards' bytes depend on
    done: dict           # shards a previous run with this config completed: path -> entry
    total: int           # input bytes
    block_bytes: int
    input_format: str
    progress: dict = None    # shards.read_progress: what a stopped local run wrote

    @property
    def progress_path(self):
        return shards_lib.progress_path(self.summary_path)

    def home(self, index):
        """The shard whose name a block's part file takes, and whose summary entry counts
        the block (every shard gets a piece of every block: block.piece_of)."""
        return index % len(self.shards)


def block_size(total, n_shards, block_size_kb):
    """Bytes per block: --block_size_kb, smaller when the input is too small to give each
    shard blocks of its own (a shard would be left empty), but at least 4 kB."""
    block_bytes = block_size_kb * 1024
    if n_shards > 1 and total < n_shards * block_bytes:
        block_bytes = max(4096, -(-total // n_shards))
    return block_bytes


def prepare(args):
    """Checks the flags and inputs before any work (InputError, one line) and plans the
    run; a previous run's complete shards are kept, its temporary files removed."""
    check_args(args)
    check_places(args)
    write_export = None
    if args.input_tfds:
        # The split's text as a JSON-lines file beside the dataset (tfds_input.py): its
        # path now, the file written once every check below has passed.
        from bert_tf.data import tfds_input
        path, write_export = tfds_input.plan_export(
            args.input_tfds, args.tfds_data_dir, args.tfds_split, args.tfds_text_field)
        args.input_file, args.input_format, args.jsonl_field = path, "jsonl", "text"
        files = [path]
    else:
        files = expand_inputs(args.input_file)
        if sum(storage.getsize(p) for p in files) == 0:
            raise InputError(f"--input_file: {', '.join(files)}: no text (empty)")
    try:
        vocab = inputs.load_vocab(args.vocab_file)   # fails here, before any work, if bad
    except ValueError as e:
        raise InputError(str(e)) from None
    shards, summary_path = shard_paths(args.output_file, args.num_shards)
    outputs = [("output_file", path) for path in shards + [summary_path]]
    check_not_inputs(outputs, [("--input_file", path) for path in files] +
                     [("--vocab_file", args.vocab_file)])
    for flag, path in outputs:
        check_output_place(flag, path)
    check_no_stale_shards(args.output_file, summary_path, shards)
    if write_export is not None:
        write_export()
    sizes = [storage.getsize(p) for p in files]
    for path in shards + [summary_path]:
        storage.makedirs_for(path)
    settings = make_settings(args, len(shards))
    config = make_config(args, files, sizes, settings, vocab, shards)
    done = read_previous(summary_path, shards, config)
    progress_file = shards_lib.progress_path(summary_path)
    progress = shards_lib.read_progress(progress_file, config, shards, done) \
        if not args.runner else None
    for path in shards:
        shards_lib.remove_parts(path)
        if path not in done and progress is None:
            storage.remove_temporaries(path)
    if progress is None:
        storage.remove(progress_file)
    total = inputs.stream_size(files, sizes)
    return Plan(files, shards, summary_path, settings, config, done, total,
                block_size(total, len(shards), args.block_size_kb), args.input_format,
                progress)


class BlockQueue:
    """Blocks in input order, each run by a worker (when one has room) or by this
    process; a block's pieces go to the shards strictly in this order, whichever
    finishes first."""

    def __init__(self, plan, pool, writer, processes):
        self.plan, self.pool, self.writer = plan, pool, writer
        self.processes = processes
        self.waiting = collections.deque()   # [block, part path, counts or None]
        self.by_index = {}                   # running in a worker: block index -> entry

    def put(self, block):
        if block.index < self.writer.next_block or \
                len(self.plan.done) == len(self.plan.shards):
            self.writer.skip(block)          # written by a stopped run, or all done
            return
        # Bounded: at most a few blocks ahead of the oldest unfinished one, so part files
        # on disk stay few whatever the input size.
        while len(self.waiting) >= 3 * self.processes:
            self.collect(wait=True)
        part = shards_lib.part_path(self.plan.shards[self.plan.home(block.index)],
                                    block.index)
        entry = [block, part, None]
        self.waiting.append(entry)
        job = (block.index, block.segments, part)
        if self.pool is not None and self.pool.has_room():
            self.by_index[block.index] = entry
            self.pool.submit(job)
        else:
            from bert_tf.data import block as block_lib   # numpy: only here
            entry[2] = block_lib.run_job(self.plan.settings, job)
        self.collect(wait=False)

    def collect(self, wait):
        """Takes the workers' finished blocks; writes those next in input order."""
        if self.pool is not None and self.pool.busy():
            for index, stats in self.pool.results(None if wait else 0):
                self.by_index.pop(index)[2] = stats
        while self.waiting and self.waiting[0][2] is not None:
            self.writer.add(*self.waiting.popleft())

    def drain(self):
        while self.waiting:
            self.collect(wait=True)


def write_shards(plan, num_workers, quiet):
    """Runs every block not yet written and deals its pieces to the shards. Returns (the
    final summary, {path: entry} of the complete shards). Stopped (SIGTERM, SIGINT)
    keeps what the shards hold (ShardWriter.save_progress) for the same command to go
    on from; any other failure leaves the shards a previous run completed and removes
    everything else."""
    pool = writer = None
    finished, stopped = False, None
    with stop_on_signals():
        try:
            # No more processes than blocks (each costs ~70 MB); the output does not
            # depend on it.
            processes = min(num_workers, -(-plan.total // plan.block_bytes))
            if processes > 1 and len(plan.done) < len(plan.shards):
                # Started first: the workers import numpy while this process finds blocks.
                from bert_tf.data.pool import WorkerPool
                pool = WorkerPool(processes - 1, plan.settings)
            writer = ShardWriter(plan.shards, plan.done, plan.summary_path, plan.config,
                                 plan.total, quiet, plan.progress)
            if plan.progress:
                print(f"resuming: the shards hold the first {plan.progress['next_block']} "
                      f"block(s) a stopped run wrote "
                      f"({100 * plan.progress['written_bytes'] / max(plan.total, 1):.0f}% "
                      f"of the input)", flush=True)
            # --num_workers N: this process and N - 1 worker processes share the blocks.
            # This one takes a block whenever the workers' queues are full, so no process
            # sits idle just dispatching (and the tree holds one interpreter less).
            blocks = BlockQueue(plan, pool, writer, processes)
            for block in inputs.iter_blocks(plan.files, plan.block_bytes, plan.input_format):
                blocks.put(block)
            blocks.drain()
            if pool is not None:
                pool.close()
                pool = None
            summary = writer.finish()
            finished = True
        except Stopped as e:
            stopped = str(e)
            if writer is not None:
                writer.save_progress()
        finally:
            _clean_up(plan, writer, pool, finished, resumable=not finished and stopped)
    if not finished:
        share = writer.written_bytes / max(plan.total, 1) if writer is not None else 0
        raise Stopped(f"{stopped}: stopped; the shards hold {100 * share:.0f}% of the input "
                      f"so far, run the same command again to resume") from None
    return summary, writer.entries


def _clean_up(plan, writer, pool, finished, resumable=False):
    """The end of write_shards, however it ends: the writer closed, the workers killed,
    the part files removed; after a failure that is no stop, every temporary file of the
    shards not complete too."""
    if writer is not None:
        writer.close()
    if pool is not None:
        pool.close(kill=True)
    # The workers are gone (killed and waited for): no part file appears any more.
    for path in plan.shards:
        shards_lib.remove_parts(path)
    if not finished and not resumable:
        # A rerun redoes every shard not complete from the first block and needs none of
        # the temporary files.
        complete = writer.entries if writer is not None else plan.done
        for path in plan.shards:
            if path not in complete:
                storage.remove_temporaries(path)
        storage.remove(plan.progress_path)


def check_written(plan, summary, written):
    """InputError, with the shards and summary removed, when the run wrote no example or
    left a shard without one: an empty shard is a file training would wait on forever."""
    empty = [p for p in plan.shards if written.get(p, {}).get("examples") == 0]
    if summary["examples"] == 0 or empty:
        for path in plan.shards + [plan.summary_path]:
            storage.remove(path)
    if summary["examples"] == 0:
        raise InputError(f"--input_file: no examples: no document in "
                         f"{', '.join(plan.files)} has a token")
    if empty:
        raise InputError(
            f"--num_shards={len(plan.shards)}: {len(empty)} shard(s) would hold no examples "
            f"({os.path.basename(empty[0])} first; the input is {plan.total:,} bytes); give "
            f"fewer shards or more text")


def run(args):
    """Does the work; returns the summary dict. Raises InputError on bad input. With
    `args.runner` set the blocks run on Apache Beam (beam.py), `args.beam_args` its
    pipeline options."""
    if args.runner:
        from bert_tf.data import beam
        beam.check_available(args.beam_args)
    plan = prepare(args)
    if args.runner:
        summary, written = beam.write_shards(plan, args.beam_args)
    else:
        summary, written = write_shards(plan, args.num_workers, args.quiet)
    for path in plan.shards:    # the summary lists them now (summary.read_previous)
        storage.remove(path + ENTRY_SUFFIX)
    storage.remove(plan.progress_path)
    check_written(plan, summary, written)
    return summary
