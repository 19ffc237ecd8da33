"""create_pretraining_data on Apache Beam: `--runner=DirectRunner|DataflowRunner|...`
(`pip install 'bert-tf[beam]'`; the flags Beam knows go after ours).

The same run as the local engine (pipeline.py), cut at the same seams: `prepare` checks
the flags and inputs and plans the blocks in this process (one-line errors, before any
byte is written; the shards a previous run completed are kept), and each block is run by
`block.run_job`, whose output depends only on the settings, the block's bytes and its
index. So the shards are byte for byte the local engine's, whatever the runner and its
number of workers. The pipeline:

    blocks of the shards not complete  -- Reshuffle -->  run_job per block (a part file
    beside its shard, the block's counts, Beam metrics)  -- GroupByKey(shard) -->
    the shard's parts appended in block order to SHARD.tmp, renamed into place

then this process writes the summary from the shards' counts, as the local engine does.
Inputs, the vocabulary, part files, shards and the summary go through storage.py: local
paths (the workers must then see them: one machine or a shared mount) or URLs that every
worker reaches through Beam's file systems (`gs://` on Dataflow).
"""

import collections
import contextlib
import glob
import json
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import time

from bert_tf.data import inputs, storage
from bert_tf.data.errors import InputError, Stopped, stop_on_signals
from bert_tf.data import shards as shards_lib
from bert_tf.data.summary import ENTRY_SUFFIX, config_digest

METRICS_NAMESPACE = "create_pretraining_data"
# Counts also reported as Beam metrics while the pipeline runs (the runner's UI shows them).
METRIC_COUNTS = ("documents", "sentences", "examples", "masked", "input_bytes",
                 "sentences_without_tokens", "documents_without_tokens")


def _beam():
    """The apache_beam module; InputError (one line) when it is not installed."""
    logging.disable(logging.WARNING)    # its import warns of optional Google Cloud clients
    try:
        import apache_beam
        import apache_beam.metrics  # noqa: F401
        import apache_beam.options.pipeline_options  # noqa: F401
    except ImportError:
        raise InputError("--runner needs Apache Beam, which is not installed: pip install "
                         "'bert-tf[beam]'") from None
    finally:
        logging.disable(logging.NOTSET)
    return apache_beam


def check_available(pipeline_args=(), command="create_pretraining_data"):
    """InputError (one line) when Beam is not installed or a flag after ours is not one of
    Beam's pipeline options (Beam itself would only warn and drop it)."""
    options = _beam().options.pipeline_options.PipelineOptions(list(pipeline_args))
    known = set(options.get_all_options())
    unknown = [k for k in options.get_all_options(retain_unknown_options=True)
               if k not in known]
    if unknown:
        raise InputError(f"--{unknown[0]}: not a flag of {command}, nor one of Apache "
                         f"Beam's pipeline options")


def run_inference(pipeline_args=None, command=None):
    """(apache_beam, its RunInference module) for the commands that run a model on Beam
    (export.batch_predict, extract_features); InputError (one line) when Beam is missing
    or, given `pipeline_args`, a flag after `command`'s own is not one of Beam's."""
    beam = _beam()
    try:
        from apache_beam.ml.inference import base as inference
    except ImportError:
        raise InputError("--runner needs Apache Beam's RunInference, which is not "
                         "installed: pip install 'bert-tf[beam]'") from None
    if pipeline_args is not None:
        check_available(pipeline_args, command)
    return beam, inference


@contextlib.contextmanager
def worker_errors_in_one_line():
    """Around a RunInference pipeline: an InputError a worker raised ("--input_file: ...
    changed while ..."), which the runner wraps in its own exception, raised here as the
    one line it was; any other failure as it is."""
    try:
        yield
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001  (re-raised unless it is a worker's one line)
        line = _one_line(e)
        if line:
            raise InputError(line) from None
        raise


def element_handler(load, run):
    """A RunInference ModelHandler whose model is `load()`, built once per worker process
    and shared by its threads (RunInference's rule), and whose every element `e` gives
    `run(model, e)`, one element a call (each element is a unit of work already: a
    shard of rows, a window of examples)."""
    _, inference = run_inference()

    class ElementHandler(inference.ModelHandler):
        def load_model(self):
            return load()

        def run_inference(self, batch, model, inference_args=None):
            return [inference.PredictionResult(e, run(model, e)) for e in batch]

        def batch_elements_kwargs(self):
            return {"min_batch_size": 1, "max_batch_size": 1}

    return ElementHandler()


def block_jobs(plan):
    """[(home shard, block index, file segments, block counts)] of every block, in input
    order (the local engine's blocks and their numbers); none when every shard is
    complete (each shard has a piece of every block)."""
    if len(plan.done) == len(plan.shards):
        return []
    return [(plan.home(block.index), block.index, block.segments,
             {"input_bytes": block.length, "documents_split": block.documents_split,
              "lines_cut": block.lines_cut})
            for block in inputs.iter_blocks(plan.files, plan.block_bytes, plan.input_format)]


def _entry_path(shard_path):
    return shard_path + ENTRY_SUFFIX


def _write_entry(path, entry, digest):
    """The shard's summary entry beside it, with the digest of the config it was made
    with: a run killed before its summary is written keeps the shard on a rerun of the
    same config (summary.read_previous)."""
    storage.write_text(_entry_path(path), json.dumps(dict(entry, config_sha256=digest),
                                                     indent=2, sort_keys=True) + "\n")


def _run_block(job, settings, shards):
    """One block -> its pieces, one per shard: (shard, (block index, its part file, the
    piece's offset and length there, its examples, and for the block's home shard the
    block's counts, else None))."""
    from bert_tf.data import block as block_lib
    counter = _beam().metrics.Metrics.counter
    home, index, segments, block_counts = job
    part = shards_lib.part_path(shards[home], index)
    counts = collections.Counter(block_lib.run_job(settings, (index, segments, part)))
    pieces = counts.pop("pieces")
    counts.update(block_counts)
    for name in METRIC_COUNTS:
        counter(METRICS_NAMESPACE, name).inc(int(counts[name]))
    offset, out = 0, []
    for shard, (length, examples) in enumerate(pieces):
        out.append((shard, (index, part, offset, length, examples,
                            dict(counts) if shard == home else None)))
        offset += length
    return out


def _write_shard(shard_pieces, shards, done, digest):
    """A shard's pieces, appended in block order to SHARD.tmp, renamed into place, its
    summary entry beside it (read back by `collect_entries`). A shard a previous run
    completed is left as it is, and so is one a retry of this step (runners retry
    failed steps) finds done. The parts are removed when every shard is written."""
    shard, pieces = shard_pieces
    path = shards[shard]
    if path in done or (storage.exists(path) and storage.exists(_entry_path(path))):
        return
    counts, examples = collections.Counter(), 0
    with storage.open_write(f"{path}.tmp") as f:
        for _, part, offset, length, piece_examples, block_counts in sorted(pieces):
            shards_lib.copy_range(part, offset, length, f)
            examples += piece_examples
            counts.update(block_counts or {})
        if not storage.is_url(path):
            f.flush()
            os.fsync(f.fileno())
    storage.replace(f"{path}.tmp", path)
    _write_entry(path, {"path": path, "bytes": storage.getsize(path), "examples": examples,
                        "counts": dict(counts)}, digest)


def collect_entries(plan):
    """{path: summary entry} of the shards complete: those a previous run kept and those
    the pipeline wrote (their entry files are read and removed)."""
    entries = dict(plan.done)
    for path in plan.shards:
        entry_file = _entry_path(path)
        if path not in entries and storage.exists(entry_file) and storage.exists(path):
            entries[path] = json.loads(storage.read_bytes(entry_file))
            entries[path].pop("config_sha256", None)
        storage.remove(entry_file)
    return entries


def write_summary(plan, entries, seconds, complete):
    this_run = sum(e["examples"] for p, e in entries.items() if p not in plan.done)
    return shards_lib.write_summary(plan.summary_path, plan.shards, entries, plan.config,
                                    seconds, complete, len(plan.done), this_run)


def _options(beam, plan, pipeline_args):
    """The pipeline's options for this run's files (`pipeline_options`)."""
    return pipeline_options(pipeline_args,
                            plan.files + plan.shards + [plan.settings.vocab_file])


def pipeline_options(pipeline_args, paths):
    """A pipeline's options: Beam's flags, and as plugins the file systems of the URLs
    among `paths` (the workers import them; Dataflow's runner adds them itself, the others
    not)."""
    beam = _beam()
    options = beam.options.pipeline_options.PipelineOptions(list(pipeline_args))
    setup = options.view_as(beam.options.pipeline_options.SetupOptions)
    plugins = list(setup.beam_plugins or [])
    for path in paths:
        if storage.is_url(path):
            system = type(storage.file_system(path))
            name = f"{system.__module__}.{system.__qualname__}"
            if name not in plugins:
                plugins.append(name)
    setup.beam_plugins = plugins or None
    return options


def _one_line(error):
    """The one-line input error a worker raised (block.check_text's NotText, "--input_file:
    ..."), found in the runner's wrapped exception; None for any other failure."""
    found = re.search(r"(?:NotText|InputError): (--.*?)(?: \[while running|\\n|\n|$)",
                      str(error))
    return found.group(1) if found else None


def write_shards(plan, pipeline_args):
    """Runs the blocks of the shards not complete on Beam and writes them; returns (the
    summary, {path: entry}). A failure, or SIGTERM / Ctrl-C (one line), leaves the
    complete shards (listed in the summary, so a rerun keeps them) and removes everything
    else. Beam's own temporary files (its staging caches, its workers' files) go to a
    private folder, removed at the end, and its log lines to a file there, kept only
    when the pipeline fails."""
    from bert_tf.data.pool import WorkerError
    beam = _beam()
    start = time.time()
    jobs = block_jobs(plan)
    shards, settings = list(plan.shards), plan.settings
    digest = config_digest(plan.config)
    stops = []
    with _private_tmpdir() as scratch:
        log_path = os.path.join(scratch, "beam.log")
        try:
            with _stderr_to(log_path), stop_on_signals(stops, first=_end_workers):
                options = _options(beam, plan, pipeline_args)
                with beam.Pipeline(options=options) as pipeline:
                    _ = (pipeline
                         | "Blocks" >> beam.Create(jobs)
                         | "Spread" >> beam.Reshuffle()
                         | "RunBlock" >> beam.FlatMap(_run_block, settings, shards)
                         | "ByShard" >> beam.GroupByKey()
                         | "WriteShard" >> beam.Map(_write_shard, shards,
                                                    set(plan.done), digest))
        except Exception as e:
            _end_workers()
            entries = collect_entries(plan)
            if set(entries) - set(plan.done):     # a rerun keeps the shards it completed
                write_summary(plan, entries, time.time() - start, complete=False)
            for path in plan.shards:
                shards_lib.remove_parts(path)
                if path not in entries:
                    storage.remove_temporaries(path)
            if stops:
                raise Stopped(f"{stops[0]}: stopped; {len(entries)} of {len(plan.shards)} "
                              f"shard(s) complete, run the same command again to "
                              f"resume") from None
            line = _one_line(e)
            if line:
                raise InputError(line) from None
            kept = _keep(log_path)
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise WorkerError(f"the Beam pipeline failed ({type(e).__name__}: "
                              f"{first[:200]}); its log: {kept}") from None
    for path in plan.shards:
        shards_lib.remove_parts(path)
    entries = collect_entries(plan)
    return write_summary(plan, entries, time.time() - start, complete=True), entries


@contextlib.contextmanager
def _private_tmpdir():
    """A folder of its own as this process's and its workers' temporary folder (Python's
    tempfile and TMPDIR) while Beam runs, removed afterwards with what Beam left in it:
    its staging caches (beam-requirements-cache), its temporary folders, a segmenter's
    cache. One that a run killed with kill -9 left is removed by the next run."""
    prefix = "create_pretraining_data-beam-"
    for stale in glob.glob(os.path.join(tempfile.gettempdir(), prefix + "*-*")):
        # A folder of a run killed with kill -9 (its pid in the name, and no longer alive).
        pid = os.path.basename(stale)[len(prefix):].split("-")[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(stale, ignore_errors=True)
    scratch = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")
    saved = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = scratch, scratch
    try:
        yield scratch
    finally:
        tempfile.tempdir = saved[0]
        if saved[1] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[1]
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _stderr_to(path):
    """File descriptor 2 into `path` for the block: Beam's log lines (and those of its
    local worker processes, which share this process's stderr), so that the command's
    own outcome is one line."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _keep(log_path):
    """The failed pipeline's log moved out of the private folder, to the usual temporary
    folder; its new path."""
    fd, kept = tempfile.mkstemp(prefix="create_pretraining_data-beam-", suffix=".log")
    os.close(fd)
    shutil.copyfile(log_path, kept)
    return kept


def _end_workers():
    """Kills the worker processes Beam's DirectRunner started (this process's descendants:
    it starts each through a shell) and waits for its children: a worker left running
    would write part files after the cleanup."""
    parents = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                parents[int(stat.split("/")[2])] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    tree, found = {os.getpid()}, True
    while found:
        found = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= found
    for pid in tree - {os.getpid()}:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for pid, parent in parents.items():
        if parent == os.getpid():
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
