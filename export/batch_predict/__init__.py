"""Predictions for a whole corpus: every row of the input files through an export's
serving_default signature (the same raw-text signature TF Serving answers), written as
JSONL in input order.

    python -m export.batch_predict --model_dir=models/ner --input_file='corpus/*.txt' \
        --output_file=preds/ner
    python -m export.batch_predict ... --runner=DirectRunner --direct_num_workers=2 \
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

The package, in the order a job runs: `__main__.py` (the flags; `run`: plan, load, predict,
summary), `plan.py` (every check of the flags and files, the shards' layout, `-plan.json`
and an earlier job's), `signature.py` (the export: its version, its signature's inputs,
read from saved_model.pb before TensorFlow loads, and its outputs), `rows.py` (a record
-> a row of the signature's inputs, or why not), `shards.py` (`run_shard`: a shard
predicted and written whole; the output's file names) and `engines.py` (the local loop,
and Beam's RunInference calling the same `run_shard`, so the two write the same bytes).
"""
