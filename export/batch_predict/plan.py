"""The plan of a job, made before TensorFlow is imported: the places and the output prefix,
the inputs (by real path, respelled as an earlier job named them) cut into shards at
record boundaries, the checks of their formats and columns, and an earlier job of the
same output (resumed, refused saying what differs, or replaced with --overwrite)."""

import json
import os

from bert_tf.base import file_patterns
from bert_tf.base.files import check_no_nul, fingerprint
from bert_tf.base.text_records import FORMATS, json_object, read_records
from bert_tf.data import storage
from bert_tf.data.errors import InputError
from export.batch_predict.rows import BadRow, format_of, job_records, needed_columns, \
    read_row
from export.batch_predict.shards import leftovers, output_names, shard_name
from export.batch_predict.signature import export_version


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


# What a plan's output depends on, compared with an earlier job's ("inputs" and
# "max_text_bytes" come with the model).
COMPARED = ("model", "files", "max_batch_size", "bad_lines", "shard_lines", "jobs")


def read_plan(output_file):
    """The plan an earlier job of this output wrote, or None."""
    path = output_file + "-plan.json"
    if not storage.exists(path):
        return None
    return json.loads(storage.read_bytes(path).decode("utf-8"))


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
