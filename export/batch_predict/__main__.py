"""`python -m export.batch_predict`: the flags, and `run`: the plan, the export loaded,
the shards not yet written predicted by an engine, the summary (the package's docstring
says what a job does)."""

import argparse
import collections
import json
import time

from bert_tf.base.cli import ArgumentParser, boolean, run_main
from bert_tf.data import storage
from export.batch_predict.engines import run_beam, run_local
from export.batch_predict.plan import check_formats, check_rows, plan_job, replace_output
from export.batch_predict.rows import job_rows
from export.batch_predict.shards import shard_counts, shard_name, write_whole
from export.batch_predict.signature import LoadedExport, counted_outputs, declared_inputs, \
    signature_inputs
from export.limits import MAX_TEXT_BYTES

DEFAULT_SHARD_LINES = 10000


DEFAULT_BATCH = 32


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
            write_whole(output + "-summary.json", json.dumps(summary, indent=1,
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
        write_whole(output + "-plan.json", json.dumps(
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
    write_whole(output + "-summary.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
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
