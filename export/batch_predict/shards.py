"""A shard: its rows predicted through the signature and written whole (`run_shard`, the one
function both engines run), and the names of the output's files."""

import json
import os
import re

from bert_tf.data import storage
from export.batch_predict.rows import BadRow, check_unchanged, format_of, job_records, \
    job_rows, read_row
from export.batch_predict.signature import counted_outputs


def shard_name(output, index, total):
    return f"{output}-{index:05d}-of-{total:05d}.jsonl"


def rejected_name(output, index, total):
    return shard_name(output, index, total)[:-len(".jsonl")] + ".rejected.jsonl"


def glob_escape(path):
    """`path` as a glob that matches itself alone (local and Beam's file systems)."""
    return re.sub(r"([*?\[])", r"[\1]", path)


def output_names(plan):
    """Every file a job of `plan` writes (its plan last)."""
    output, total = plan["output_file"], plan["num_shards"]
    return [name for index in range(total) for name in (
        rejected_name(output, index, total), shard_name(output, index, total))] + [
        output + "-summary.json", output + "-plan.json"]


def leftovers(output):
    """Files of the output's names that a job without a plan left (any number of
    shards): shards, rejected rows, a summary."""
    digits = "[0-9]" * 5
    return sorted(storage.glob(f"{glob_escape(output)}-{digits}-of-{digits}*.jsonl")) + [
        n for n in (output + "-summary.json",) if storage.exists(n)]


def as_json(value):
    """A row of an output (numpy) -> JSON values: text decoded, floats as Python's."""
    import numpy as np
    if isinstance(value, np.ndarray):
        return [as_json(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (np.floating, float)):
        return float(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    return value


def run_shard(job, signature, plan):
    """Predicts one shard and writes it (its rejected rows first, then the predictions,
    each under a temporary name, renamed whole); returns its counts. The one function
    both engines run, so their bytes are the same."""
    import tensorflow as tf
    inputs, output = plan["inputs"], plan["output_file"]
    label = job["file"]
    fmt, header = format_of(label), plan["headers"].get(label)
    rows, rejected = [], []
    check_unchanged(plan, label)
    for record in job_records(plan, job):
        try:
            row = read_row(record, fmt, inputs, header, plan["max_text_bytes"])
        except BadRow as e:
            rejected.append({"file": label, "line": record.line, "error": str(e)})
            continue
        if row is not None:
            rows.append((record.line, row))
    check_unchanged(plan, label)
    order = sorted(range(len(rows)), key=lambda i: sum(
        len(t) for value in rows[i][1].values()
        for t in ([value] if isinstance(value, str) else value)))
    outputs = [None] * len(rows)
    count, counted = counted_outputs(signature)
    size = plan["max_batch_size"]
    for start in range(0, len(order), size):
        chunk = order[start:start + size]
        feed = {name: tf.constant([rows[i][1][name] for i in chunk], tf.string)
                for name in inputs}
        result = {k: v.numpy() for k, v in signature(**feed).items()}
        for position, i in enumerate(chunk):
            width = {n: int(result[count][position]) for n in counted
                     if result[n].ndim >= 2}
            outputs[i] = {k: as_json(v[position][:width[k]] if k in width else v[position])
                          for k, v in sorted(result.items())}
    index, total = job["index"], plan["num_shards"]
    lines = [json.dumps({"file": label, "line": number, "outputs": outputs[i]},
                        ensure_ascii=False, sort_keys=True) + "\n"
             for i, (number, _) in enumerate(rows)]
    if rejected:
        write_whole(rejected_name(output, index, total),
               "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n"
                       for r in rejected))
    write_whole(shard_name(output, index, total), "".join(lines))
    return {"shards": 1, "rows": job_rows(plan, job), "predicted": len(rows),
            "rejected": len(rejected)}


def shard_counts(plan, job):
    """The counts of a shard an earlier run wrote (read back from its files)."""
    index, total = job["index"], plan["num_shards"]
    output = plan["output_file"]
    predicted = storage.read_bytes(shard_name(output, index, total)).count(b"\n")
    rejected_path = rejected_name(output, index, total)
    rejected = storage.read_bytes(rejected_path).count(b"\n") \
        if storage.exists(rejected_path) else 0
    return {"shards": 1, "rows": job_rows(plan, job), "predicted": predicted,
            "rejected": rejected}


def write_whole(path, text):
    """`text` to path, whole or not at all (a temporary name, then renamed)."""
    tmp = path + ".tmp"
    try:
        with storage.open_write(tmp) as f:
            f.write(text.encode("utf-8"))
    except BaseException as e:
        # A full disk, a kill: no half-written file left behind.
        if storage.exists(tmp):
            storage.remove(tmp)
        if isinstance(e, OSError) and e.errno and not e.filename:   # said at close()
            raise OSError(e.errno, os.strerror(e.errno), path) from None
        raise
    storage.replace(tmp, path)
