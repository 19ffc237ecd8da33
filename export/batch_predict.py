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
list input). A row is a record as its format says (bert_tf/base/text_records.py, the
reader the fine-tuning families use too): a quoted .csv cell may hold line ends, and its
row is one row. Output: `OUTPUT-00000-of-00008.jsonl` ..., one line per row predicted,
{"file", "line", "outputs"} (`line`: the physical line the row starts on; each of the
signature's outputs for that row, as JSON; lists the signature pads to the call's
longest, NER's entities, cut to the row's `num_...` count, so a line never depends on
the rows it was batched with), the shards in the order of the input files (sorted) and
their rows; a row that cannot be predicted (not UTF-8, longer than the export's
max_text_bytes, missing or extra columns, bad JSON) goes to
`OUTPUT-0000N-of-0000M.rejected.jsonl` with its file, line and reason, and the job goes
on (`--bad_lines=error` stops at the first instead, writing nothing);
`OUTPUT-summary.json` says what was read, predicted and rejected, and how fast. Refused
before anything is written: a file that is not text (a NUL byte, the project's one rule),
one with no row, a .csv quote never closed, a .tsv/.csv header or a .jsonl's first
object without the export's inputs, an --output_file that names a folder.

Two engines, one output: the local engine (default: one process) and `--runner=...`
(Apache Beam: `pip install 'bert-tf[beam]'`; the flags Beam knows go after ours), whose
RunInference step has a ModelHandler for our SavedModels: each worker process loads the
export once and shares it between its threads. Both cut the rows into the same shards
(`--shard_lines` records of one file, each shard starting at a record's byte offset and
line, planned here) and predict a shard by the same function (`run_shard`: its rows
sorted by length, `--max_batch_size` rows a signature call), so their files are byte for
byte the same. Beam reaches URLs (`gs://...`) through its file systems for the inputs and
outputs; the export is loaded by TensorFlow, which reads `gs://` itself.

A long job: a progress line with its ETA (on Beam, counted as its shards appear); each
shard written under a temporary name and renamed when whole, so a run stopped however it
stops (kill -9 too) is resumed by the same command, keeping the shards already written.
`OUTPUT-plan.json`, written before the first shard, fingerprints what the predictions
depend on (the export's files and version, each input file's bytes and real path, the
flags that change an output). A rerun names an input by real path (another spelling of
the same file resumes); a rerun with another export, other inputs or other settings is
refused in one line saying what differs and what finishes the job (for a new export
version: the version the job started with), unless `--overwrite` replaces that job's
output (its files removed, its plan last, before the new plan is written); a rerun of a
finished job says so and loads nothing. An input that changes while the job reads it
(its size or modification time) stops the job in one line before the next shard is
written. The output prefix is locked while a job runs, and an output that is an input is
refused. Every check that needs only the flags and files (the signature's inputs read
from saved_model.pb) is made before TensorFlow is imported.

Why one file: the two engines must write the same bytes; the plan, `run_shard` and the
Beam handler that calls it are read side by side.
"""

import argparse
import collections
import functools
import json
import os
import re
import time

from bert_tf.base import file_patterns
from bert_tf.base.cli import ArgumentParser, boolean, run_main
from bert_tf.base.files import check_no_nul, fingerprint
from bert_tf.base.text_records import FORMATS, json_object, read_records
from bert_tf.data import storage
from bert_tf.data.errors import InputError
from export.limits import MAX_TEXT_BYTES

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


def declared_inputs(version):
    """signature_inputs of the serving_default signature as saved_model.pb declares it,
    read without TensorFlow (so a file without the export's columns is refused before
    anything loads): SavedModel.meta_graphs (2) -> MetaGraphDef.signature_def (5, a map)
    -> SignatureDef.inputs (1, a map) -> TensorInfo.tensor_shape (3) -> dim (2) -> size
    (1). None for a URL, or a file this reader cannot follow (the loaded signature is
    checked then)."""
    from bert_tf.base.tfrecord import message_fields

    def fields(data):
        return [(n, v) for n, _, v in message_fields(data)]
    if storage.is_url(version):
        return None
    try:
        with open(os.path.join(version, "saved_model.pb"), "rb") as f:
            data = f.read()
        for graph in (v for n, v in fields(data) if n == 2):
            for entry in (v for n, v in fields(graph) if n == 5):
                entry = dict(fields(entry))
                if entry.get(1) != b"serving_default":
                    continue
                inputs = {}
                for item in (v for n, v in fields(entry[2]) if n == 1):
                    item = dict(fields(item))
                    shape = dict(fields(item[2])).get(3, b"")
                    dims = [dict(fields(d)).get(1, 0) for n, d in fields(shape) if n == 2]
                    inputs[item[1].decode("utf-8")] = None if len(dims) == 1 else \
                        dims[1] - (1 << 64 if dims[1] >= 1 << 63 else 0)
                return dict(sorted(inputs.items()))
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return None


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
                         f"output counting their entries, got {len(counts)} (a windowed "
                         f"classifier exported before its outputs declared their class "
                         f"count: export it again)")
    return None, ()


# ----------------------------------------------------------------------------- rows

class BadRow(ValueError):
    """A row that cannot be predicted (its reason; the caller adds file and line)."""


def needed_columns(inputs):
    """The header columns (.tsv/.csv) or JSON keys (.jsonl) the export's inputs take:
    `endings0`, `endings1`, ... for a list input (JSON: one key holding the list)."""
    return [name if size is None else f"{name}{i}" for name, size in inputs.items()
            for i in range(size or 1)]


def parse_row(record, fmt, inputs, header, max_bytes):
    """One record (bert_tf/base/text_records.py) -> {input: str or [C strs]}, or None for
    a record that holds no row (a blank line of a .jsonl/.tsv/.csv); BadRow why it cannot
    be predicted."""
    try:
        record.raw.decode("utf-8")
    except UnicodeDecodeError as e:
        where = "line" if record.lines == 1 else "record"
        raise BadRow(f"not UTF-8 (byte {e.start + 1} of the {where})") from None
    if fmt == ".txt":
        (name, size), = inputs.items()
        row = {name: record.value}
    elif fmt == ".jsonl":
        if not record.value.strip():
            return None
        try:
            value = json_object(record.value)
        except ValueError as e:
            raise BadRow(str(e)) from None
        row = {}
        for name, size in inputs.items():
            if name not in value:
                raise BadRow(f"no {name!r} (the export's inputs: {', '.join(inputs)})")
            row[name] = value[name]
    else:
        if record.error:
            raise BadRow(record.error)
        fields = record.value
        if not fields:
            return None
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


def job_records(plan, job):
    """The records of a shard's job: its file read where it is now (`plan["paths"]`: the
    plan names each input by the spelling the job started with), from the record the
    plan says it starts at (its byte offset and line), so a shard is read from there, not
    from the file's start."""
    label = job["file"]
    return read_records(plan["paths"][label], format_of(label), open_read=storage.open_read,
                        offset=job["offset"], line=job["line"],
                        count=job["end"] - job["first"])


def format_of(path):
    return os.path.splitext(path)[1].lower()


def read_row(record, fmt, inputs, header, max_bytes):
    """A record -> its row, or None for a record that holds no row (the header of a
    .tsv/.csv, a blank line between rows); BadRow why it cannot be predicted."""
    if header is not None and record.offset == 0:
        return None
    return parse_row(record, fmt, inputs, header, max_bytes)


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
        _write(rejected_name(output, index, total),
               "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n"
                       for r in rejected))
    _write(shard_name(output, index, total), "".join(lines))
    return {"shards": 1, "rows": job_rows(plan, job), "predicted": len(rows),
            "rejected": len(rejected)}


def job_rows(plan, job):
    """The records of a job that may hold a row: its records, less a .tsv/.csv header."""
    header = plan["headers"].get(job["file"])
    return job["end"] - job["first"] - (1 if header is not None and job["first"] == 0
                                        else 0)


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

def check_output_prefix(output_file):
    """InputError when --output_file names a folder (`preds/`, or a folder that is
    there), not the prefix of the output's file names: its files would be named
    `-00000-of-0000N.jsonl` inside it, or beside it; before anything is loaded."""
    name = output_file.rstrip("/")
    if output_file.endswith(("/", os.sep)) or (
            not storage.is_url(output_file) and os.path.isdir(output_file)):
        raise InputError(f"--output_file={output_file} is a folder; expected the prefix of "
                         f"the output's file names (e.g. --output_file={name or '.'}/preds "
                         f"writes {name or '.'}/preds-00000-of-0000N.jsonl)")


def input_files(patterns):
    """(label, path) of each input file: --input_file's comma-separated files and globs
    (bert_tf/base/file_patterns.py's rule: a path that exists as written first, commas
    and glob characters included; globs sorted, the project's side files left out), each
    a file of a known format with something in it; label = path here (a rerun's labels
    may be the earlier spellings: `respell`)."""
    files = []
    for pattern in file_patterns.split_patterns(patterns, storage.exists):
        matched = file_patterns.match(pattern, storage.glob, storage.exists)
        if not matched:
            raise InputError(f"--input_file: {pattern}: no such file")
        files += [m for m in matched if m not in files]
    if not files:
        raise InputError("--input_file is empty")
    for path in files:
        if format_of(path) not in FORMATS:
            raise InputError(f"--input_file: {path}: expected {', '.join(FORMATS)} (the "
                             f"format is read from the name)")
        if not storage.isfile(path):
            raise InputError(f"--input_file: {path} is not a file")
        if storage.getsize(path) == 0:
            raise InputError(f"--input_file: {path} is empty (0 bytes): nothing to predict")
    return files


def real(path):
    return path if storage.is_url(path) else os.path.realpath(path)


def respell(files, theirs):
    """{label: path}: each input under the spelling an earlier job of this output named it
    by, when it is the same file by real path (`data.csv` then, `/work/data.csv` or a
    symlink now): the same input, so its rows keep their `file` and the job resumes."""
    earlier = {}
    for label, path in (theirs or {}).get("real_files", {}).items():
        earlier.setdefault(path, label)
    labels = [earlier.get(real(p), p) for p in files]
    if len(set(labels)) < len(labels):     # an earlier spelling that is another file now
        labels = files
    return dict(zip(labels, files))


def layout(paths, shard_lines):
    """(jobs, headers, rows) of the inputs, TF-free: every file cut into its records
    (bert_tf/base/text_records.py; a quoted .csv cell may span lines) and its records into
    shards of `shard_lines`, each starting at a record's byte offset and line, so both
    engines read a shard from there. InputError for a file that is not text (a NUL byte:
    the project's one rule, files.check_no_nul), a quote never closed, or no row to
    predict."""
    jobs, headers, rows = [], {}, {}
    for label, path in paths.items():
        fmt = format_of(label)
        count, starts, first = 0, [], None
        try:
            for record in read_records(path, fmt, open_read=storage.open_read):
                if count % shard_lines == 0:
                    starts.append((count, record.offset, record.line))
                check_no_nul(record.raw, label, record.line)
                if first is None and fmt in (".tsv", ".csv"):
                    first = record.value or []
                elif label not in rows and (fmt == ".txt" or record.error or (
                        record.value.strip() if fmt == ".jsonl" else record.value)):
                    rows[label] = record.line
                count += 1
        except ValueError as e:        # RecordError, or not text
            raise InputError(f"--input_file: {e}") from None
        if label not in rows:
            raise InputError(f"--input_file: {label} holds no row to predict" + (
                " (only its header)" if first is not None else " (only blank lines)"))
        headers[label] = first
        for first_record, offset, line in starts:
            jobs.append({"file": label, "first": first_record, "offset": offset,
                         "line": line, "end": min(first_record + shard_lines, count)})
    for index, job in enumerate(jobs):
        job["index"] = index
    return jobs, headers, rows


def check_formats(plan, inputs):
    """InputError, before any work, when an input file's format cannot hold the export's
    inputs: a .txt for an export of several inputs, a .tsv/.csv header without an input's
    column, a .jsonl whose first object lacks an input's key (every row would be
    rejected)."""
    for label in plan["paths"]:
        if format_of(label) == ".txt" and (len(inputs) != 1 or
                                           next(iter(inputs.values())) is not None):
            raise InputError(f"--input_file: {label}: a .txt file holds one text a line, "
                             f"but the export takes {', '.join(inputs)}: give .jsonl, "
                             f".tsv or .csv with those names")
    check_columns(plan, inputs)


def check_columns(plan, inputs):
    """InputError, before any work, when a .tsv/.csv header lacks an input's column or a
    .jsonl's first object lacks an input's key: every row would be rejected."""
    needed = needed_columns(inputs)
    for label, path in plan["paths"].items():
        fmt = format_of(label)
        if fmt in (".tsv", ".csv"):
            header = plan["headers"][label]
            missing = [n for n in needed if n not in header]
            if missing:
                raise InputError(f"--input_file: {label}: the header has no column "
                                 f"{', '.join(missing)} (the export's inputs: "
                                 f"{', '.join(needed)})")
        elif fmt == ".jsonl":
            keys, first = list(inputs), None
            for record in read_records(path, fmt, open_read=storage.open_read):
                try:
                    first = json_object(record.value)
                except ValueError:
                    continue            # a bad row, rejected in its shard
                missing = [k for k in keys if k not in first]
                if missing:
                    raise InputError(
                        f"--input_file: {label}:{record.line}: the first JSON object has "
                        f"the keys {', '.join(sorted(first)) or '(none)'}; the export "
                        f"takes {', '.join(keys)} (no {', '.join(missing)})")
                break
            if first is None:
                raise InputError(f"--input_file: {label}: no line is a JSON object (one a "
                                 f"line, keyed by the export's inputs: {', '.join(keys)})")


def check_rows(plan):
    """--bad_lines=error: the first bad row stops the job, before a byte is written."""
    for job in plan["jobs"]:
        label = job["file"]
        for record in job_records(plan, job):
            try:
                read_row(record, format_of(label), plan["inputs"], plan["headers"][label],
                         plan["max_text_bytes"])
            except BadRow as e:
                raise InputError(f"{label}:{record.line}: {e}") from None


def check_unchanged(plan, label):
    """InputError when the input `label` is not the file the plan fingerprinted (its size
    or modification time changed since): its rows would not be the planned ones."""
    path = plan["paths"][label]
    if [storage.getsize(path), storage.mtime_ns(path)] != plan["stats"][label]:
        raise InputError(f"--input_file: {label} changed while the job read it; the shards "
                         f"written before are of its earlier content: predict into another "
                         f"--output_file, or pass --overwrite to predict it again")


# What a plan's output depends on, compared with an earlier job's ("inputs" and
# "max_text_bytes" come with the model).
COMPARED = ("model", "files", "max_batch_size", "bad_lines", "shard_lines", "jobs")


def read_plan(output_file):
    """The plan an earlier job of this output wrote, or None."""
    path = output_file + "-plan.json"
    if not storage.exists(path):
        return None
    return json.loads(storage.read_bytes(path).decode("utf-8"))


def output_names(plan):
    """Every file a job of `plan` writes (its plan last)."""
    output, total = plan["output_file"], plan["num_shards"]
    return [name for index in range(total) for name in (
        rejected_name(output, index, total), shard_name(output, index, total))] + [
        output + "-summary.json", output + "-plan.json"]


def glob_escape(path):
    """`path` as a glob that matches itself alone (local and Beam's file systems)."""
    return re.sub(r"([*?\[])", r"[\1]", path)


def leftovers(output):
    """Files of the output's names that a job without a plan left (any number of
    shards): shards, rejected rows, a summary."""
    digits = "[0-9]" * 5
    return sorted(storage.glob(f"{glob_escape(output)}-{digits}-of-{digits}*.jsonl")) + [
        n for n in (output + "-summary.json",) if storage.exists(n)]


def check_plan(plan, theirs, model_dir, overwrite):
    """An earlier job of this output must be this one (same export, inputs, settings),
    else its output is replaced only with --overwrite: InputError saying what differs
    and what finishes it. True when `theirs` is to be replaced."""
    output = plan["output_file"]
    if theirs is None:
        there = leftovers(output)
        if there and not overwrite:
            raise InputError(f"--output_file={output}: {there[0]} is there without the plan "
                             f"of the job that wrote it; pass --overwrite to replace it, or "
                             f"choose another --output_file")
        return bool(there)
    differ = [k for k in COMPARED if theirs.get(k) != json.loads(json.dumps(plan[k]))]
    if not differ:
        return False
    if overwrite:
        return True
    path = output + "-plan.json"
    ending = (f"pass --overwrite to replace its output, or choose another --output_file")
    if differ[0] == "model":
        version = theirs.get("version")
        started = os.path.join(model_dir, version) if version and not storage.is_url(
            model_dir) else None
        if started and version != plan["version"] and os.path.isfile(
                os.path.join(started, "saved_model.pb")):
            raise InputError(
                f"--model_dir={model_dir}: the job of {path} started with its version "
                f"{version}, and {plan['version']} is the highest now: pass "
                f"--model_dir={started} to finish that job, {ending}")
        raise InputError(f"--output_file={output}: {path} is the plan of a job with "
                         f"another export (its files differ from --model_dir={model_dir}'s "
                         f"version {plan['version']}); {ending}")
    if differ[0] == "files":
        ours, earlier = plan["files"], theirs.get("files", {})
        what = [f"{f} changed since" for f in ours if f in earlier and ours[f] != earlier[f]]
        what += [f"{f} was not an input" for f in ours if f not in earlier]
        what += [f"{f} is not given now" for f in earlier if f not in ours]
        raise InputError(f"--output_file={output}: {path} is the plan of a job with other "
                         f"--input_file files ({'; '.join(what)}); {ending}")
    flags = [f"--{k}={theirs.get(k)} there, {plan[k]} now" for k in differ
             if k in ("max_batch_size", "bad_lines", "shard_lines") and
             theirs.get(k) is not None]
    raise InputError(f"--output_file={output}: {path} is the plan of a run with another "
                     f"{', '.join(differ)} ({'; '.join(flags) or 'other shards'}): rerun "
                     f"with its settings to finish it, {ending}")


# ----------------------------------------------------------------------------- engines

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


def check_places(args, pipeline_args):
    """The engine reaches the paths (the local engine: local paths only)."""
    if args.runner is None:
        storage.check_local([("--input_file", args.input_file),
                             ("--output_file", args.output_file)])
        return
    from bert_tf.data.beam import run_inference
    run_inference(["--runner", args.runner, *pipeline_args], "export.batch_predict")
    for flag, path in (("--input_file", args.input_file),
                       ("--output_file", args.output_file)):
        if storage.is_url(path):
            storage.check_url(flag, path)


def plan_job(args, pipeline_args=()):
    """Every check that needs only the flags and files, before TensorFlow is imported:
    the places, the output prefix, the inputs and their records, the export's version and
    fingerprint, an earlier job of this output. Returns (plan, the earlier plan or None,
    whether it is replaced)."""
    from bert_tf.base.checks import check_not_inputs, check_output_place
    check_places(args, pipeline_args)
    check_output_prefix(args.output_file)
    version = export_version(args.model_dir)
    files = input_files(args.input_file)
    if not storage.is_url(args.output_file):
        outputs = [("output_file", shard_name(args.output_file, 0, 1)),
                   ("output_file", args.output_file + "-summary.json")]
        check_not_inputs(outputs, [("--input_file", p) for p in files],
                         checkpoints=[("--model_dir", args.model_dir)])
        for flag, path in outputs:
            check_output_place(flag, path)
        for p in files:
            if os.path.realpath(p).startswith(os.path.realpath(args.output_file) + "-"):
                raise InputError(f"--output_file={args.output_file}: the input {p} is one "
                                 f"of its files; choose another --output_file")
    theirs = read_plan(args.output_file)
    paths = respell(files, theirs)
    # Taken first: a file that changes from here on (while it is hashed, counted or
    # predicted) no longer has these, and run_shard stops on it.
    stats = {label: [storage.getsize(p), storage.mtime_ns(p)] for label, p in paths.items()}
    jobs, headers, _ = layout(paths, args.shard_lines)
    model = fingerprint(version) if not storage.is_url(version) else {"path": version}
    plan = {"output_file": args.output_file, "headers": headers,
            "max_batch_size": args.max_batch_size, "bad_lines": args.bad_lines,
            "shard_lines": args.shard_lines, "num_shards": len(jobs), "jobs": jobs,
            "model": model, "version": os.path.basename(os.path.normpath(version)),
            "stats": stats, "paths": paths,
            "files": {label: storage.fingerprint(p) for label, p in paths.items()},
            "real_files": {label: real(p) for label, p in paths.items()}}
    replace = check_plan(plan, theirs, args.model_dir, args.overwrite)
    return plan, version, theirs, replace


def replace_output(theirs, plan):
    """--overwrite: the files of the earlier job on this output removed (its plan last,
    so a job stopped here is refused again, not mixed), before the new plan is written."""
    names = output_names(theirs) if theirs else leftovers(plan["output_file"])
    for name in names:
        storage.remove_temporaries(name)
        storage.remove(name)


def run(args, pipeline_args=()):
    from bert_tf.base.progress import progress_bar
    plan, version, theirs, replace = plan_job(args, pipeline_args)
    output = args.output_file
    done = [] if replace else [job for job in plan["jobs"] if storage.exists(
        shard_name(output, job["index"], plan["num_shards"]))]
    todo = [job for job in plan["jobs"] if job not in done]
    counts = collections.Counter()
    for job in done:
        counts.update(shard_counts(plan, job))
    if theirs is not None and not todo:
        # A finished job: nothing to load, nothing to predict.
        summary = {"engine": args.runner or "local", "shards": plan["num_shards"],
                   "shards_kept": len(done), "shards_written": 0,
                   "rows_read": counts["rows"], "predicted": counts["predicted"],
                   "rejected": counts["rejected"], "seconds": 0.0,
                   "texts_per_second": None}
        if not storage.exists(output + "-summary.json"):
            _write(output + "-summary.json", json.dumps(summary, indent=1,
                                                        sort_keys=True) + "\n")
        print(f"{output}: already complete ({plan['num_shards']} shards: "
              f"{summary['predicted']:,} rows predicted, {summary['rejected']:,} rejected, "
              f"by an earlier run); nothing to do", flush=True)
        return summary
    declared = declared_inputs(version)
    if declared is not None:
        check_formats(plan, declared)
    export = LoadedExport(version)
    signature = export.signature
    counted_outputs(signature)
    plan["inputs"] = signature_inputs(signature)
    plan["max_text_bytes"] = int(export.model.max_text_bytes.numpy()) \
        if hasattr(export.model, "max_text_bytes") else MAX_TEXT_BYTES
    check_formats(plan, plan["inputs"])
    if args.bad_lines == "error":
        check_rows(plan)
    if replace:
        replace_output(theirs, plan)
    storage.makedirs_for(output)
    if theirs is None or replace:
        _write(output + "-plan.json", json.dumps(
            {k: v for k, v in plan.items() if k not in ("headers", "stats", "paths")},
            indent=1, sort_keys=True) + "\n")
    total_rows = sum(job_rows(plan, job) for job in plan["jobs"])
    started = time.perf_counter()
    with progress_bar(total_rows, "predicting", unit="row",
                      initial=total_rows - sum(job_rows(plan, j) for j in todo)
                      ) as progress:
        if args.runner is None:
            new = run_local(plan, todo, signature, progress)
        else:
            new = run_beam(plan, todo, version, ["--runner", args.runner, *pipeline_args],
                           progress)
    seconds = time.perf_counter() - started
    counts.update(new)
    summary = {"engine": args.runner or "local", "shards": plan["num_shards"],
               "shards_kept": len(done), "shards_written": len(todo),
               "rows_read": counts["rows"], "predicted": counts["predicted"],
               "rejected": counts["rejected"], "seconds": round(seconds, 3),
               "texts_per_second": round(new["predicted"] / seconds, 2)
               if seconds > 0 else None}
    _write(output + "-summary.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
    rate = f"{summary['texts_per_second']:,} texts/s" if summary["texts_per_second"] \
        else "no text predicted now"
    print(f"predicted {summary['predicted']:,} of {summary['rows_read']:,} rows "
          f"({summary['rejected']:,} rejected) into {plan['num_shards']} shards of "
          f"{output} ({len(done)} kept from an earlier run); {rate}", flush=True)
    return summary


def main(argv=None):
    p = ArgumentParser(description="Predictions for a whole corpus through an export's "
                                   "serving_default signature, written as JSONL shards.",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model_dir", required=True,
                   help="an export (python -m export.saved_model): its folder of versions "
                        "(the highest is used) or one version")
    p.add_argument("--input_file", required=True,
                   help="comma-separated files or globs: .txt, .jsonl, .tsv, .csv (a path "
                        "that exists as written is that file, commas included)")
    p.add_argument("--output_file", required=True,
                   help="prefix of the shards (OUTPUT-00000-of-0000N.jsonl), the rejected "
                        "rows, the plan and the summary (a name, not a folder: preds/ner)")
    p.add_argument("--max_batch_size", type=int, default=DEFAULT_BATCH,
                   help="rows per signature call (a shard's rows sorted by length)")
    p.add_argument("--shard_lines", type=int, default=DEFAULT_SHARD_LINES,
                   help="input rows (records) per output shard (a shard never spans two "
                        "files)")
    p.add_argument("--bad_lines", choices=("skip", "error"), default="skip",
                   help="skip: a row that cannot be predicted goes to the shard's "
                        ".rejected.jsonl with its file, line and reason; error: the first "
                        "stops the job in one line")
    boolean(p, "--overwrite",
            help="replace the output of another job on --output_file (other export, "
                 "inputs or settings; finished or not); without it such a job is refused")
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
