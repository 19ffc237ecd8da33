"""The two engines, one output: the local loop and Apache Beam's RunInference (a
ModelHandler that loads the export once per worker), both calling `run_shard`."""

import collections
import functools

from bert_tf.data import storage
from export.batch_predict.rows import job_rows
from export.batch_predict.shards import glob_escape, run_shard, shard_counts, shard_name
from export.batch_predict.signature import LoadedExport


def run_local(plan, todo, signature, progress):
    counts = collections.Counter()
    for job in todo:
        counts.update(run_shard(job, signature, plan))
        progress.update(job_rows(plan, job))
    return counts


def watch_shards(plan, todo, progress, stop, every=1.0):
    """Beam's progress: the shards of `todo` whose files have appeared (each is renamed
    into place whole), counted into `progress` every `every` seconds until `stop` is set,
    then once more. Runs in this process, beside the pipeline, on any runner."""
    output, total = plan["output_file"], plan["num_shards"]
    # One listing a poll (an object store answers a glob in one request), the name's
    # own glob characters escaped.
    pattern = glob_escape(output) + f"-?????-of-{total:05d}.jsonl"
    pending = {shard_name(output, job["index"], total): job for job in todo}
    while pending:
        stopping = stop.wait(every)
        for name in set(storage.glob(pattern)) & set(pending):
            progress.update(job_rows(plan, pending.pop(name)))
        if stopping:
            return


def run_beam(plan, todo, version, pipeline_args, progress):
    """The shards not yet written, through Beam's RunInference: one element per shard
    (pipeline_args: --runner and Beam's flags); `progress` counts the shards written."""
    import threading
    from bert_tf.data.beam import (element_handler, pipeline_options, run_inference,
                                   worker_errors_in_one_line)
    beam, inference = run_inference()
    paths = list(plan["paths"].values()) + [plan["output_file"]]
    # Each worker loads the export once; an element is a shard's job.
    handler = element_handler(functools.partial(LoadedExport, version),
                              lambda export, job: run_shard(job, export.signature, plan))
    stop = threading.Event()
    watcher = threading.Thread(target=watch_shards, args=(plan, todo, progress, stop),
                               daemon=True)
    watcher.start()
    try:
        with worker_errors_in_one_line(), \
                beam.Pipeline(options=pipeline_options(pipeline_args, paths)) as pipeline:
            _ = (pipeline | beam.Create(todo) | beam.Reshuffle()
                 | inference.RunInference(handler))
    finally:
        stop.set()
        watcher.join()
    counts = collections.Counter()
    for job in todo:
        counts.update(shard_counts(plan, job))
    return counts
