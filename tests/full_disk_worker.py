"""Runs every command that writes files into a full file system and a read-only one; for
tests/workflows/test_full_disk.py, which starts it in a private mount namespace (`unshare`) with two
tmpfs mounts: FULL (filled to the last byte) and READ_ONLY.

    python tests/full_disk_worker.py FULL READ_ONLY INPUTS WORK [TIGHT]

INPUTS: the folder tests/fuzz_inputs.py's `build` wrote (read with `load`); WORK (an
ordinary folder) gets the reference run of `stages`. Prints one JSON line:
{row: {"code", "stderr", "before", "after"}} with each mount's listing before and after.
TIGHT, a third tmpfs, gets the commands of `stages`, each run into it with the room for
part of what it writes: the disk fills while the command works (a fine-tune with
--do_eval at its best weights, a pretraining checkpoint, ...), not before it starts.
"""

import contextlib
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests import fuzz_inputs  # noqa: E402
from tests import command_main  # noqa: E402


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


def run(module, argv):
    """(exit status, what the command wrote on stderr) of a command run in this process."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            command_main(module)(argv)
            code = 0
        except SystemExit as e:
            code = e.code
        except BaseException:  # noqa: BLE001  (reported, not raised)
            import traceback
            code = "raised"
            err.write(traceback.format_exc())
    return code, err.getvalue()


def page_bytes(path):
    """The bytes the file `path`, or the files under the folder `path`, take on a tmpfs
    (whole 4 KiB pages)."""
    files = [os.path.join(d, f) for d, _, names in os.walk(path) for f in names] \
        if os.path.isdir(path) else [path]
    return sum(-(-os.path.getsize(f) // 4096) * 4096 for f in files)


def clear(root):
    import shutil
    for name in os.listdir(root):
        path = os.path.join(root, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def fill_leaving(root, free):
    """Fills the file system of `root` until `free` bytes are left."""
    stat = os.statvfs(root)
    size = stat.f_bavail * stat.f_frsize - free
    with open(os.path.join(root, "filler"), "wb") as f:
        f.truncate(0)
        chunk = b"\0" * (1 << 20)
        while size > 0:
            size -= f.write(chunk[:min(size, len(chunk))])


def stages(ns, work, out):
    """{row: (module, argv, free bytes)}: commands that run into a disk that fills while
    they work, each given the room for its first files and part of a later one, measured
    by running the same command once into `work` (an ordinary folder)."""
    task = rows(ns, out)["glue"][1][:-1] + [
        "--do_eval", f"--dev_file={ns.tsv['good']}", "--num_train_epochs=2"]
    reference = os.path.join(work, "reference_glue")
    code, err = run("tasks.glue", rows(ns, work)["glue"][1][:-1] + [
        "--do_eval", f"--dev_file={ns.tsv['good']}", "--num_train_epochs=1",
        f"--output_dir={reference}"])
    assert code == 0, err
    weights = page_bytes(os.path.join(reference, "last.weights.h5"))
    start = sum(page_bytes(os.path.join(reference, name)) for name in (
        "vocab.txt", "bert_config.json", "glue_config.json")) + 16 * 4096   # logs
    resume = 3 * weights        # the model, and the optimizer's two slots for each weight
    pretraining = rows(ns, out)["run_pretraining"][1] + ["--save_checkpoints_steps=1"]
    checkpoint = page_bytes(ns.pretraining) - page_bytes(os.path.join(ns.pretraining, "hf")) \
        - page_bytes(os.path.join(ns.pretraining, "google"))
    return {
        # The room runs out writing last.weights.h5 after the first epoch, then
        # best.weights.h5 (the first epoch is the best so far), then the resumable state.
        "glue_eval:last": ("tasks.glue", task + [f"--output_dir={out}/glue"],
                           start + weights // 2),
        "glue_eval:best": ("tasks.glue", task + [f"--output_dir={out}/glue"],
                           start + weights + weights // 2),
        "glue_eval:resume": ("tasks.glue", task + [f"--output_dir={out}/glue"],
                             start + 2 * weights + resume // 2),
        # run_pretraining's first checkpoint (after step 1 of 2), half of it.
        "run_pretraining:checkpoint": ("bert_tf.run_pretraining", pretraining,
                                       checkpoint // 2),
        # An export's variables, half of them.
        "saved_model:variables": ("export.saved_model", rows(ns, out)["saved_model"][1],
                                  page_bytes(ns.export) // 2),
        # A keras-hub preset (its model.weights.h5 is written by HDF5), half of it.
        "convert_checkpoint:keras_hub": ("bert_tf.convert_checkpoint", [
            f"--input={ns.google}", f"--output={out}/preset", "--output_format=keras_hub"],
            page_bytes(ns.preset) // 2),
    }


def main():
    full, read_only, inputs, work = sys.argv[1:5]
    tight = sys.argv[5] if len(sys.argv) > 5 else None
    import warnings
    warnings.filterwarnings("ignore")   # Keras' own warnings are not the commands' lines
    ns = fuzz_inputs.load(inputs)
    fill(full)
    results = {}
    for mount, kind in ((full, "full"), (read_only, "read_only")):
        for name, (module, argv) in rows(ns, mount).items():
            before = listing(mount)
            code, err = run(module, argv)
            results[f"{name}:{kind}"] = {"code": code, "stderr": err,
                                         "before": before, "after": listing(mount)}
    if tight:
        for name, (module, argv, free) in stages(ns, work, tight).items():
            clear(tight)
            fill_leaving(tight, free)
            before = listing(tight)
            code, err = run(module, argv)
            results[name] = {"code": code, "stderr": err, "before": before,
                             "after": listing(tight)}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
