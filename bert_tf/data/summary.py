"""create_pretraining_data's summary (`OUTPUT.summary.json` beside the shards): the
run's counts and the shares derived from them, the complete shards, and the config their
bytes depend on. A rerun reads it to keep the shards a previous run completed, and to
refuse a set of shards an earlier run wrote with another --num_shards.
"""

import collections
import json
import os
import sys

from bert_tf.data import storage
from bert_tf.data.errors import InputError


def summarize(counts, shards, config, seconds, complete, skipped, examples_this_run):
    """The summary: additive counts, the shares derived from them, and per-shard counts
    (also what a rerun reads to skip complete shards)."""
    c = collections.Counter(counts)

    def share(a, b):
        return round(c[a] / c[b], 6) if c[b] else None

    summary = {
        "complete": complete,
        "examples": c["examples"],
        "documents": c["documents"],
        "sentences": c["sentences"],
        "input_tokens": c["input_tokens"],
        "example_tokens": c["example_tokens"],
        "masked_fraction": share("masked", "example_tokens"),
        "masked_as_mask_share": share("masked_as_mask", "masked"),
        "masked_as_random_share": share("masked_as_random", "masked"),
        "masked_unchanged_share": share("masked_unchanged", "masked"),
        "random_next_share": share("random_next", "examples"),
        "short_target_share": share("short_target_examples", "examples"),
        "short_target_pass_share": share("short_target_passes", "document_passes"),
        "padded_share": share("padded_examples", "examples"),
        "truncated_share": share("truncated_examples", "examples"),
        "kept_token_share": share("example_text_tokens", "input_token_passes"),
        "seconds": round(seconds, 3),
        "examples_this_run": examples_this_run,
        "examples_per_second": round(examples_this_run / seconds, 1) if seconds else None,
        "skipped_shards": skipped,
        "counts": dict(sorted(c.items())),
        "shards": shards,
        "config": config,
    }
    return summary


# Beside a shard the Beam engine completed, until the summary lists it: its entry.
ENTRY_SUFFIX = ".tmp-entry.json"


def config_digest(config):
    """The sha256 of a run's config (what the shards' bytes depend on), as entries keep
    it."""
    import hashlib
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def read_previous(summary_path, shards, config):
    """Shards a previous run with the same config completed: path -> its summary entry.
    They are those its summary lists and, where a run was killed before it wrote its
    summary (the Beam engine writes it at the end), those whose entry file
    (SHARD.tmp-entry.json) says they were made with this config."""
    try:
        previous = json.loads(storage.read_bytes(summary_path))
    except (OSError, ValueError):
        previous = {}
    listed = previous.get("shards", []) if previous.get("config") == config else []
    by_abspath = {storage.absolute(p): p for p in shards}
    done = {}
    for entry in listed:
        path = by_abspath.get(storage.absolute(str(entry.get("path"))))
        if path and storage.isfile(path) and storage.getsize(path) == entry.get("bytes"):
            done[path] = dict(entry, path=path)
    digest = config_digest(config)
    for path in shards:
        if path in done or not storage.exists(path + ENTRY_SUFFIX):
            continue
        try:
            entry = json.loads(storage.read_bytes(path + ENTRY_SUFFIX))
        except (OSError, ValueError):
            continue
        if entry.pop("config_sha256", None) == digest and storage.isfile(path) and \
                storage.getsize(path) == entry.get("bytes"):
            done[path] = dict(entry, path=path)
    return done


def check_no_stale_shards(output_file, summary_path, shards):
    """InputError when the summary beside the shards lists shards of an earlier run that
    this run would not write over (another --num_shards): left there, they would be read
    with the new ones by the same glob, two sets of examples mixed without a word."""
    try:
        previous = json.loads(storage.read_bytes(summary_path))
        listed = [str(entry.get("path")) for entry in previous.get("shards", [])]
    except (OSError, ValueError, AttributeError, TypeError):
        return
    ours = {storage.absolute(p) for p in shards}
    stale = [p for p in listed if storage.absolute(p) not in ours and storage.isfile(p)]
    if stale:
        more = f" and {len(stale) - 1} more" if len(stale) > 1 else ""
        raise InputError(
            f"--output_file={output_file}: "
            f"{stale[0]}{more} are shards of an earlier run with another --num_shards "
            f"(listed in {summary_path}), which a glob of the new shards would also read; "
            f"delete them or choose another --output_file")


def summary_path_of(shard):
    """Where create_pretraining_data keeps the summary of the set `shard` belongs to:
    PREFIX.summary.json beside PREFIX-NNNNN-of-NNNNN (or beside the one file PREFIX)."""
    from bert_tf.base.output_lock import shard_set
    return shard_set(shard) + ".summary.json"


def shard_summaries(files):
    """{shard: (summary path, summary)} for the local shards of `files` that a summary
    of create_pretraining_data lists (in the same folder, by file name: a folder of
    shards moved as a whole keeps its summary). Shards without one (google's script
    writes none, and a summary may be deleted) are left out."""
    found, read = {}, {}
    for shard in files:
        if storage.is_url(shard):
            continue
        path = summary_path_of(shard)
        if path not in read:
            try:
                with open(path, encoding="utf-8") as f:
                    read[path] = json.load(f)
            except (OSError, ValueError):
                read[path] = None
        summary = read[path]
        try:
            listed = {os.path.basename(str(entry["path"])) for entry in summary["shards"]}
        except (TypeError, KeyError, AttributeError):
            continue
        if os.path.basename(shard) in listed:
            found[shard] = (path, summary)
    return found


def made_with(summary):
    """What a shard set's bytes were made with, as a run that reads it records it: the
    settings create_pretraining_data ran with and its vocabulary's sha256."""
    config = summary.get("config") or {}
    return dict(config.get("settings") or {},
                vocab_sha256=(config.get("vocab") or {}).get("sha256"))


def print_summary(summary, summary_path, out=None):
    c = summary["counts"]
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    kept = summary["skipped_shards"]
    lines = [
        f"wrote {summary['examples_this_run']:,} examples in {summary['seconds']:.1f} s "
        f"({summary['examples_per_second'] or 0:,.0f} examples/s); "
        f"{summary['examples']:,} examples in {len(summary['shards'])} shard(s)"
        + (f", {kept} of them complete from a previous run and kept" if kept else ""),
        f"documents {summary['documents']:,} ({c.get('one_sentence_documents', 0):,} of one "
        f"sentence, {c.get('documents_without_tokens', 0):,} without tokens), sentences "
        f"{summary['sentences']:,}, input tokens {summary['input_tokens']:,}",
        f"example tokens {summary['example_tokens']:,}, masked {pct(summary['masked_fraction'])}"
        f" ({pct(summary['masked_as_mask_share'])} [MASK], "
        f"{pct(summary['masked_as_random_share'])} random, "
        f"{pct(summary['masked_unchanged_share'])} unchanged)",
        f"random next {pct(summary['random_next_share'])}, "
        + (f"swapped {pct(c['swapped'] / summary['examples'])}, " if c.get("swapped") else "")
        + f"short target "
        f"{pct(summary['short_target_share'])} of examples, padded "
        f"{pct(summary['padded_share'])}, truncated {pct(summary['truncated_share'])}, "
        f"text tokens in examples {pct(summary['kept_token_share'])} of the input's "
        f"per pass",
    ]
    problems = {k: c[k] for k in ("invalid_utf8_bytes", "lines_cut", "documents_split",
                                  "malformed_json_lines", "json_lines_without_field",
                                  "random_next_same_document") if c.get(k)}
    if problems:
        lines.append("input problems (handled): " + ", ".join(f"{k} {v:,}"
                                                               for k, v in problems.items()))
    lines.append(f"summary: {summary_path}")
    print("\n".join(lines), file=out or sys.stdout)
