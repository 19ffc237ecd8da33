"""Runs every command that writes files into a full file system and a read-only one; for
tests/test_full_disk.py, which starts it in a private mount namespace (`unshare`) with two
tmpfs mounts: FULL (filled to the last byte) and READ_ONLY.

    python tests/full_disk_worker.py FULL READ_ONLY WORK MINILM_DIR

WORK (an ordinary folder) gets the inputs (tests/fuzz_inputs.py). Prints one JSON line:
{row: {"code", "stderr", "before", "after"}} with each mount's listing before and after.
"""

import contextlib
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests import fuzz_inputs  # noqa: E402


def listing(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, dirs, files in os.walk(root) for f in dirs + files)


def fill(root):
    """Writes a file until the file system has no byte left."""
    with open(os.path.join(root, "filler"), "wb", buffering=0) as f:
        chunk = b"\0" * (1 << 16)
        while True:
            try:
                f.write(chunk)
            except OSError:
                if len(chunk) == 1:
                    return
                chunk = chunk[:len(chunk) // 2]


def rows(ns, out):
    """{name: (module, argv)} writing their output under `out`."""
    tsv = ns.tsv["good"]
    task = [f"--bert_config_file={ns.config}", f"--vocab_file={ns.vocab}", "--do_train",
            f"--train_file={tsv}", "--task_name=custom", "--labels=0,1",
            "--max_seq_length=16", "--num_train_epochs=1", "--train_batch_size=4"]
    return {
        "build_vocab": ("bert_tf.build_vocab", [
            f"--input_file={ns.corpus['good']}", f"--output_file={out}/vocab.txt",
            "--vocab_size=200", "--min_frequency=1"]),
        "create_pretraining_data": ("bert_tf.create_pretraining_data", [
            f"--input_file={ns.corpus['good']}", f"--output_file={out}/shard.tfrecord",
            f"--vocab_file={ns.vocab}", "--max_seq_length=32", "--max_predictions_per_seq=5",
            "--dupe_factor=1", "--num_workers=1", "--quiet"]),
        "run_pretraining": ("bert_tf.run_pretraining", [
            f"--input_file={ns.shard}", f"--output_dir={out}/pretraining",
            f"--bert_config_file={ns.config}", "--do_train", "--num_train_steps=2",
            "--train_batch_size=4", "--max_seq_length=32", "--max_predictions_per_seq=5",
            "--num_warmup_steps=0"]),
        "convert_checkpoint": ("bert_tf.convert_checkpoint", [
            f"--input={ns.google}", f"--output={out}/hf", "--output_format=hf"]),
        "extract_features": ("bert_tf.extract_features", [
            f"--input_file={ns.lines['good']}", f"--output_file={out}/features.jsonl",
            f"--init_checkpoint={ns.google}", "--max_seq_length=16", "--layers=-1"]),
        "glue": ("tasks.glue", task + [f"--output_dir={out}/glue"]),
        "saved_model": ("export.saved_model", [
            "--task=embeddings", f"--checkpoint_dir={ns.google}",
            f"--output_dir={out}/models/embeddings"]),
        "batch_predict": ("export.batch_predict", [
            f"--model_dir={ns.export}", f"--input_file={ns.lines['good']}",
            f"--output_file={out}/preds/lines"]),
        "quickstart": ("bert_tf.quickstart", [
            f"--work_dir={out}/quickstart", f"--corpus={ns.corpus['good']}",
            "--num_train_steps=2", "--vocab_size=200"]),
    }


def main():
    full, read_only, work, minilm_dir = sys.argv[1:5]
    import importlib
    import warnings
    warnings.filterwarnings("ignore")   # Keras' own warnings are not the commands' lines
    ns = fuzz_inputs.build(work, minilm_dir)
    fill(full)
    results = {}
    for mount, kind in ((full, "full"), (read_only, "read_only")):
        for name, (module, argv) in rows(ns, mount).items():
            before = listing(mount)
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    importlib.import_module(module).main(argv)
                    code = 0
                except SystemExit as e:
                    code = e.code
                except BaseException:  # noqa: BLE001  (reported, not raised)
                    import traceback
                    code = "raised"
                    err.write(traceback.format_exc())
            results[f"{name}:{kind}"] = {"code": code, "stderr": err.getvalue(),
                                         "before": before, "after": listing(mount)}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
