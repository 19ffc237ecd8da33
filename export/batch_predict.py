"""Predictions for a whole corpus: every row of the input files through an export's
serving_default signature (the same raw-text signature TF Serving answers), written as
JSONL in input order.

    python -m export.batch_predict --model_dir=models/ner --input_file='corpus/*.txt' \\
        --output_file=preds/ner
    python -m export.batch_predict ... --runner=DirectRunner --direct_num_workers=2 \\
        --direct_running_mode=multi_processing        # Apache Beam's RunInference

Input: `.txt` (one text a line, for a signature of one text input: classification,
multi-label, NER, embeddings, fill-mask), `.jsonl` (an object a line keyed by the
signature's inputs: {"question": ..., "context": ...}; SWAG's `endings` a list of its
choices), `.tsv` / `.csv` (a header naming the inputs; `endings0`, `endings1`, ... for a
list input). Output: `OUTPUT-00000-of-00008.jsonl` ..., one line per row predicted,
{"file", "line", "outputs"} (each of the signature's outputs for that row, as JSON; lists
the signature pads to the call's longest, NER's entities, cut to the row's `num_...`
count, so a line never depends on the rows it was batched with), the shards in the order
of the input files (sorted) and their lines; a row that cannot be
predicted (not UTF-8, longer than the export's max_text_bytes, missing or extra columns,
bad JSON) goes to `OUTPUT-0000N-of-0000M.rejected.jsonl` with its file, line and reason,
and the job goes on (`--bad_lines=error` stops at the first instead, writing nothing);
`OUTPUT-summary.json` says what was read, predicted and rejected, and how fast.

Two engines, one output: the local engine (default: one process) and `--runner=...`
(Apache Beam: `pip install 'bert-tf[beam]'`; the flags Beam knows go after ours), whose
RunInference step has a ModelHandler for our SavedModels: each worker process loads the
export once and shares it between its threads. Both cut the rows into the same shards
(`--shard_lines` rows of one file) and predict a shard by the same function (`run_shard`:
its rows sorted by length, `--max_batch_size` rows a signature call), so their files are
byte for byte the same. Beam reaches URLs (`gs://...`) through its file systems for the
inputs and outputs; the export is loaded by TensorFlow, which reads `gs://` itself.

A long job: a progress line with its ETA; each shard written under a temporary name and
renamed when whole, so a run stopped however it stops (kill -9 too) is resumed by the
same command, keeping the shards already written. `OUTPUT-plan.json`, written before the
first shard, fingerprints what the predictions depend on (the export's files, each input
file's bytes, the flags that change an output); a rerun with another export, other
inputs or other settings is refused in one line, before any byte is written; an input
that changes while the job reads it (its size or modification time) stops the job in
one line before the next shard is written. The output
prefix is locked while a job runs, and an output that is an input is refused.

Why one file: the two engines must write the same bytes; the plan, `run_shard` and the
Beam handler that calls it are read side by side.
"""

import argparse
import collections
import csv
import functools
import json
import os
import time

from bert_tf.base.cli import ArgumentParser, run_main
from bert_tf.base.files import fingerprint
from bert_tf.data import storage
from bert_tf.data.errors import InputError
from export.limits import MAX_TEXT_BYTES

FORMATS = (".txt", ".jsonl", ".tsv", ".csv")
DEFAULT_SHARD_LINES = 10000
DEFAULT_BATCH = 32


# ----------------------------------------------------------------------------- the export

def export_version(model_dir):
    """The SavedModel folder of --model_dir: the folder itself, or its highest numbered
    version (as TF Serving serves a model's base path)."""
    if storage.is_url(model_dir):
        return model_dir
    if os.path.isfile(os.path.join(model_dir, "saved_model.pb")):
        return model_dir
    versions = sorted((int(d) for d in os.listdir(model_dir) if d.isdigit() and
                       os.path.isfile(os.path.join(model_dir, d, "saved_model.pb"))),
                      reverse=True) if os.path.isdir(model_dir) else []
    if not versions:
        raise InputError(f"--model_dir: {model_dir} holds no SavedModel (saved_model.pb, "
                         f"or numbered versions of one: python -m export.saved_model)")
    return os.path.join(model_dir, str(versions[0]))


class LoadedExport:
    """A loaded SavedModel and its serving_default signature (an object, as Beam's shared
    model handle keeps a weak reference to what load_model returns)."""

    def __init__(self, path):
        import tensorflow_text  # noqa: F401  (the exports' tokenizer ops)

        from bert_tf.checkpoints.bundle import load_saved_model
        self.model = load_saved_model(path)
        self.signature = self.model.signatures["serving_default"]


def signature_inputs(signature):
    """{input name: None for a text [batch], C for a list [batch, C]} of a signature."""
    spec = signature.structured_input_signature[1]
    return {name: (None if len(s.shape) == 1 else int(s.shape[1]))
            for name, s in sorted(spec.items())}


def counted_outputs(signature):
    """(count, names): the outputs that may have a per-call width (TF Serving's dense
    lists, padded to the call's longest, as NER's entities: declared [batch, None, ...],
    or of a rank the signature does not declare) and the [batch] integer `num_...` output
    that counts each row's real entries; (None, ()) without such a count. A row's lists
    are cut to its count (run_shard), so its line does not depend on the rows it shared a
    call with. Without a count, outputs of undeclared shape are taken as they come (the
    embeddings export's, padded to max_seq_length); InputError for declared per-call
    widths without one count."""
    spec = signature.structured_outputs
    counts = [n for n, s in spec.items() if n.startswith("num_") and s.shape.rank == 1
              and s.dtype.is_integer]
    open_width = tuple(sorted(n for n, s in spec.items() if n not in counts and (
        s.shape.rank is None or (s.shape.rank >= 2 and s.shape[1] is None))))
    declared = [n for n in open_width if spec[n].shape.rank is not None]
    if len(counts) == 1:
        return counts[0], open_width
    if declared:
        raise InputError(f"--model_dir: the signature's outputs {', '.join(declared)} are "
                         f"padded per call, and expected one [batch] integer num_... "
                         f"output counting their entries, got {len(counts)}")
    return None, ()


# ----------------------------------------------------------------------------- rows

class BadRow(ValueError):
    """A row that cannot be predicted (its reason; the caller adds file and line)."""


def parse_row(line, fmt, inputs, header, max_bytes):
    """One input line (str) -> {input: str or [C strs]}; BadRow why not."""
    if fmt == ".txt":
        (name, size), = inputs.items()
        row = {name: line}
    elif fmt == ".jsonl":
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadRow(f"not JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(value, dict):
            raise BadRow("expected a JSON object keyed by the inputs")
        row = {}
        for name, size in inputs.items():
            if name not in value:
                raise BadRow(f"no {name!r} (the export's inputs: {', '.join(inputs)})")
            row[name] = value[name]
    else:
        fields = next(csv.reader([line], delimiter="\t" if fmt == ".tsv" else ",",
                                 quoting=csv.QUOTE_NONE if fmt == ".tsv" else
                                 csv.QUOTE_MINIMAL))
        if len(fields) != len(header):
            raise BadRow(f"{len(fields)} columns, the header has {len(header)}")
        cells = dict(zip(header, fields))
        row = {name: cells[name] if size is None else
               [cells[f"{name}{i}"] for i in range(size)] for name, size in inputs.items()}
    for name, size in inputs.items():
        value = row[name]
        texts = [value] if size is None else value
        if size is not None and (not isinstance(value, list) or len(value) != size):
            raise BadRow(f"{name}: expected a list of {size} texts")
        for text in texts:
            if not isinstance(text, str):
                raise BadRow(f"{name}: expected text, got {type(text).__name__}")
            if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
                raise BadRow(f"{name}: {len(text.encode('utf-8', 'surrogatepass')):,} bytes, "
                             f"more than the export's max_text_bytes ({max_bytes:,})")
    return row


def header_of(path, fmt, inputs):
    """The column names of a .tsv/.csv file (its first line), checked to hold every
    input; None for the other formats."""
    if fmt not in (".tsv", ".csv"):
        return None
    with storage.open_read(path) as f:
        first = f.readline().decode("utf-8", "replace").removeprefix("\ufeff").rstrip("\r\n")
    header = next(csv.reader([first], delimiter="\t" if fmt == ".tsv" else ","), [])
    needed = [name if size is None else f"{name}{i}" for name, size in inputs.items()
              for i in range(size or 1)]
    missing = [n for n in needed if n not in header]
    if missing:
        raise InputError(f"--input_file: {path}: the header has no column "
                         f"{', '.join(missing)} (the export's inputs: {', '.join(needed)})")
    return header


def lines_of(path, first=0, end=None, offset=0):
    """(line number, raw bytes, byte offset) of lines [first, end) of a file (0-based;
    numbers are 1-based), the line end removed. `offset`: where line `first` starts (a
    shard's, from the plan), so a shard is read from there, not from the file's start."""
    with storage.open_read(path) as f:
        index, position = 0, 0
        if offset:
            f.seek(offset)
            index, position = first, offset
        for raw in f:
            if end is not None and index >= end:
                return
            if index >= first:
                yield index + 1, raw.rstrip(b"\n").rstrip(b"\r"), position
            position += len(raw)
            index += 1


# ----------------------------------------------------------------------------- shards

def shard_name(output, index, total):
    return f"{output}-{index:05d}-of-{total:05d}.jsonl"


def rejected_name(output, index, total):
    return shard_name(output, index, total)[:-len(".jsonl")] + ".rejected.jsonl"


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


def read_row(raw, number, fmt, inputs, header, max_bytes):
    """An input line (bytes) -> its row, or None for a line that holds no row (a header,
    a blank line between rows); BadRow why it cannot be predicted."""
    if header is not None and number == 1:
        return None
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRow(f"not UTF-8 (byte {e.start + 1} of the line)") from None
    if number == 1:
        line = line.removeprefix("\ufeff")
    if fmt != ".txt" and not line.strip():
        return None
    return parse_row(line, fmt, inputs, header, max_bytes)


def check_row(raw, number, path, fmt, inputs, header, max_bytes):
    """read_row, a bad row an InputError naming the file and line."""
    try:
        read_row(raw, number, fmt, inputs, header, max_bytes)
    except BadRow as e:
        raise InputError(f"{path}:{number}: {e}") from None


def run_shard(job, signature, plan):
    """Predicts one shard and writes it (its rejected rows first, then the predictions,
    each under a temporary name, renamed whole); returns its counts. The one function
    both engines run, so their bytes are the same."""
    import numpy as np
    import tensorflow as tf
    inputs, output = plan["inputs"], plan["output_file"]
    path, fmt = job["file"], os.path.splitext(job["file"])[1].lower()
    header = plan["headers"].get(path)
    rows, rejected = [], []
    check_unchanged(plan, path)
    for number, raw, _ in lines_of(path, job["first"], job["end"], job["offset"]):
        try:
            row = read_row(raw, number, fmt, inputs, header, plan["max_text_bytes"])
        except BadRow as e:
            rejected.append({"file": path, "line": number, "error": str(e)})
            continue
        if row is not None:
            rows.append((number, row))
    check_unchanged(plan, path)
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
    lines = [json.dumps({"file": path, "line": number, "outputs": outputs[i]},
                        ensure_ascii=False, sort_keys=True) + "\n"
             for i, (number, _) in enumerate(rows)]
    if rejected:
        _write(rejected_name(output, index, total),
               "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n"
                       for r in rejected))
    _write(shard_name(output, index, total), "".join(lines))
    return {"shards": 1, "lines": job["end"] - job["first"] - (
        1 if header is not None and job["first"] == 0 else 0),
        "predicted": len(rows), "rejected": len(rejected)}


def _write(path, text):
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


# ----------------------------------------------------------------------------- the plan

def make_plan(args, version, signature, max_text_bytes):
    """Everything a job's output depends on, checked before any byte is written: the
    inputs, the shards, the export's fingerprint and the flags."""
    files = []
    for pattern in args.input_file.split(","):
        pattern = pattern.strip()
        matched = sorted(storage.glob(pattern)) if any(c in pattern for c in "*?[") \
            else ([pattern] if storage.exists(pattern) else [])
        if not matched:
            raise InputError(f"--input_file: {pattern}: no such file")
        files += [m for m in matched if m not in files]
    # Taken first: a file that changes from here on (while it is hashed, counted or
    # predicted) no longer has these, and run_shard stops on it.
    stats = {p: [storage.getsize(p), storage.mtime_ns(p)] for p in files}
    inputs = signature_inputs(signature)
    headers, jobs = {}, []
    for path in files:
        fmt = os.path.splitext(path)[1].lower()
        if fmt not in FORMATS:
            raise InputError(f"--input_file: {path}: expected {', '.join(FORMATS)} (the "
                             f"format is read from the name)")
        if fmt == ".txt" and (len(inputs) != 1 or next(iter(inputs.values())) is not None):
            raise InputError(f"--input_file: {path}: a .txt file holds one text a line, "
                             f"but the export takes {', '.join(inputs)}: give .jsonl, "
                             f".tsv or .csv with those names")
        headers[path] = header_of(path, fmt, inputs)
        count, offsets = 0, {0: 0}
        for count, raw, position in lines_of(path):
            if (count - 1) % args.shard_lines == 0:
                offsets[count - 1] = position           # where a shard's first line starts
            # --bad_lines=error: the first bad row stops the job here, before a byte is
            # written.
            if args.bad_lines == "error":
                check_row(raw, count, path, fmt, inputs, headers[path], max_text_bytes)
        for first in range(0, max(count, 1), args.shard_lines):
            jobs.append({"file": path, "first": first, "offset": offsets[first],
                         "end": min(first + args.shard_lines, count)})
    for index, job in enumerate(jobs):
        job["index"] = index
    model = fingerprint(version) if not storage.is_url(version) else {"path": version}
    return {"output_file": args.output_file, "inputs": inputs, "headers": headers,
            "max_text_bytes": int(max_text_bytes), "max_batch_size": args.max_batch_size,
            "bad_lines": args.bad_lines, "num_shards": len(jobs), "jobs": jobs,
            "model": model, "stats": stats,
            "files": {p: storage.fingerprint(p) for p in files}}


def check_unchanged(plan, path):
    """InputError when the input `path` is not the file the plan fingerprinted (its size
    or modification time changed since): its rows would not be the planned ones."""
    if [storage.getsize(path), storage.mtime_ns(path)] != plan["stats"][path]:
        raise InputError(f"--input_file: {path} changed while the job read it; the shards "
                         f"written before are of its earlier content: predict into another "
                         f"--output_file")


def check_plan(plan):
    """The plan of an earlier run of this output, if any, must be this one."""
    path = plan["output_file"] + "-plan.json"
    if not storage.exists(path):
        return
    theirs = json.loads(storage.read_bytes(path).decode("utf-8"))
    differ = [k for k in ("model", "files", "inputs", "max_batch_size", "bad_lines",
                          "jobs") if theirs.get(k) != json.loads(json.dumps(plan[k]))]
    if differ:
        raise InputError(f"--output_file={plan['output_file']}: {path} is the plan of a run "
                         f"with another {', '.join(differ)}; run that command again to "
                         f"finish it, or choose another --output_file")


# ----------------------------------------------------------------------------- engines

def run_local(plan, todo, signature, progress):
    counts = collections.Counter()
    for job in todo:
        counts.update(run_shard(job, signature, plan))
        progress.update(job["end"] - job["first"])
    return counts


def run_beam(plan, todo, version, pipeline_args):
    """The shards not yet written, through Beam's RunInference: one element per shard
    (pipeline_args: --runner and Beam's flags)."""
    from bert_tf.data.beam import (element_handler, pipeline_options, run_inference,
                                   worker_errors_in_one_line)
    beam, inference = run_inference()
    paths = list(plan["files"]) + [plan["output_file"]]
    # Each worker loads the export once; an element is a shard's job.
    handler = element_handler(functools.partial(LoadedExport, version),
                              lambda export, job: run_shard(job, export.signature, plan))
    with worker_errors_in_one_line(), \
            beam.Pipeline(options=pipeline_options(pipeline_args, paths)) as pipeline:
        _ = (pipeline | beam.Create(todo) | beam.Reshuffle()
             | inference.RunInference(handler))
    counts = collections.Counter()
    for job in todo:
        counts.update(shard_counts(plan, job))
    return counts


def shard_counts(plan, job):
    """The counts of a shard an earlier run wrote (read back from its files)."""
    index, total = job["index"], plan["num_shards"]
    output = plan["output_file"]
    predicted = storage.read_bytes(shard_name(output, index, total)).count(b"\n")
    rejected_path = rejected_name(output, index, total)
    rejected = storage.read_bytes(rejected_path).count(b"\n") \
        if storage.exists(rejected_path) else 0
    header = plan["headers"].get(job["file"])
    lines = job["end"] - job["first"] - (1 if header is not None and job["first"] == 0
                                         else 0)
    return {"shards": 1, "lines": lines, "predicted": predicted, "rejected": rejected}


def run(args, pipeline_args=()):
    from bert_tf.base.checks import check_not_inputs, check_output_place
    from bert_tf.base.progress import progress_bar
    if args.runner is None:
        storage.check_local([("--input_file", args.input_file),
                             ("--output_file", args.output_file)])
    else:
        from bert_tf.data.beam import run_inference
        run_inference(["--runner", args.runner, *pipeline_args], "export.batch_predict")
        for flag, path in (("--input_file", args.input_file),
                           ("--output_file", args.output_file)):
            if storage.is_url(path):
                storage.check_url(flag, path)
    version = export_version(args.model_dir)
    export = LoadedExport(version)
    signature = export.signature
    max_text_bytes = int(export.model.max_text_bytes.numpy()) \
        if hasattr(export.model, "max_text_bytes") else MAX_TEXT_BYTES
    counted_outputs(signature)
    plan = make_plan(args, version, signature, max_text_bytes)
    if not storage.is_url(args.output_file):
        outputs = [("output_file", shard_name(args.output_file, 0, plan["num_shards"])),
                   ("output_file", args.output_file + "-summary.json")]
        check_not_inputs(outputs, [("--input_file", p) for p in plan["files"]],
                         checkpoints=[("--model_dir", args.model_dir)])
        for flag, path in outputs:
            check_output_place(flag, path)
        for p in plan["files"]:
            if os.path.realpath(p).startswith(os.path.realpath(args.output_file) + "-"):
                raise InputError(f"--output_file={args.output_file}: the input {p} is one "
                                 f"of its files; choose another --output_file")
    check_plan(plan)
    storage.makedirs_for(args.output_file)
    if not storage.exists(args.output_file + "-plan.json"):
        _write(args.output_file + "-plan.json",
               json.dumps({k: v for k, v in plan.items() if k not in ("headers", "stats")},
                          indent=1, sort_keys=True) + "\n")
    done = [job for job in plan["jobs"] if storage.exists(
        shard_name(args.output_file, job["index"], plan["num_shards"]))]
    todo = [job for job in plan["jobs"] if job not in done]
    counts = collections.Counter()
    for job in done:
        counts.update(shard_counts(plan, job))
    total_lines = sum(job["end"] - job["first"] for job in plan["jobs"])
    started = time.perf_counter()
    if args.runner is None:
        with progress_bar(total_lines, "predicting", unit="line",
                          initial=total_lines - sum(j["end"] - j["first"] for j in todo)
                          ) as progress:
            new = run_local(plan, todo, signature, progress)
    else:
        new = run_beam(plan, todo, version, ["--runner", args.runner, *pipeline_args]) \
            if todo else collections.Counter()
    seconds = time.perf_counter() - started
    counts.update(new)
    summary = {"engine": args.runner or "local", "shards": plan["num_shards"],
               "shards_kept": len(done), "shards_written": len(todo),
               "lines_read": counts["lines"], "predicted": counts["predicted"],
               "rejected": counts["rejected"], "seconds": round(seconds, 3),
               "texts_per_second": round(new["predicted"] / seconds, 2)
               if seconds > 0 and todo else None}
    _write(args.output_file + "-summary.json", json.dumps(summary, indent=1,
                                                          sort_keys=True) + "\n")
    print(f"predicted {summary['predicted']:,} of {summary['lines_read']:,} lines "
          f"({summary['rejected']:,} rejected) into {plan['num_shards']} shards of "
          f"{args.output_file} ({len(done)} kept from an earlier run); "
          f"{summary['texts_per_second']} texts/s", flush=True)
    return summary


def main(argv=None):
    p = ArgumentParser(description="Predictions for a whole corpus through an export's "
                                   "serving_default signature, written as JSONL shards.",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model_dir", required=True,
                   help="an export (python -m export.saved_model): its folder of versions "
                        "(the highest is used) or one version")
    p.add_argument("--input_file", required=True,
                   help="comma-separated files or globs: .txt, .jsonl, .tsv, .csv")
    p.add_argument("--output_file", required=True,
                   help="prefix of the shards (OUTPUT-00000-of-0000N.jsonl), the rejected "
                        "rows, the plan and the summary")
    p.add_argument("--max_batch_size", type=int, default=DEFAULT_BATCH,
                   help="rows per signature call (a shard's rows sorted by length)")
    p.add_argument("--shard_lines", type=int, default=DEFAULT_SHARD_LINES,
                   help="input lines per output shard (a shard never spans two files)")
    p.add_argument("--bad_lines", choices=("skip", "error"), default="skip",
                   help="skip: a row that cannot be predicted goes to the shard's "
                        ".rejected.jsonl with its file, line and reason; error: the first "
                        "stops the job in one line")
    p.add_argument("--runner", default=None,
                   help="run on Apache Beam with this runner (DirectRunner, "
                        "DataflowRunner, ...); Beam's own flags go after ours")
    args, rest = p.parse_known_args(argv)
    if rest and args.runner is None:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    return run_main(lambda a: run(a, rest), args, keras=False,
                    positive=("max_batch_size", "shard_lines"))


if __name__ == "__main__":
    main()
