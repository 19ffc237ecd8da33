"""Pretraining step throughput at BERT-base shape: bert_tf vs keras-hub vs HF torch.

One optimizer step (forward, backward, AdamW update, clipping where the framework's
standard loop does it) on random data, seq 128, 20 masked positions, CPU; fp32 and bf16.
    ours:      bert_tf PretrainingLoop step (MLM + NSP), tf.function, with and without XLA
                (run_pretraining's --jit_compile)
    keras-hub: BertMaskedLM.train_on_batch (MLM only: keras-hub has no NSP head)
    HF torch:  BertForPreTraining (MLM + NSP), torch.optim.AdamW, clip_grad_norm_

    python bench/pretraining.py --batch_size 8 --repeats 5
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from bench.common import (command_line, interleaved_processes, machine,  # noqa: E402
                          markdown_table, section_name, write_section)

SEQ, PRED, VOCAB = 128, 20, 30522


def random_batch(batch, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "token_ids": rng.integers(5, VOCAB, (batch, SEQ)).astype("int32"),
        "segment_ids": np.repeat([[0] * (SEQ // 2) + [1] * (SEQ // 2)], batch, 0).astype("int32"),
        "padding_mask": np.ones((batch, SEQ), "int32"),
        "masked_lm_positions": np.sort(rng.choice(np.arange(1, SEQ), (batch, PRED)), 1)
        .astype("int32"),
        "masked_lm_ids": rng.integers(5, VOCAB, (batch, PRED)).astype("int32"),
        "masked_lm_weights": np.ones((batch, PRED), "float32"),
        "next_sentence_labels": rng.integers(0, 2, batch).astype("int32"),
    }


def ours(batch, dtype, tmp, jit_compile=False):
    import tensorflow as tf

    from bert_tf.base.config import BertConfig
    from bert_tf.models.pretrainer import BertPretrainer
    from bert_tf.training.optimization import create_optimizer
    from bert_tf.training.trainer import PretrainingLoop
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = BertPretrainer.from_config_object(
            BertConfig.preset("base"), dtype="mixed_bfloat16" if dtype == "bf16" else None)
        opt = create_optimizer("adamw", 1e-4, 1000, 100, model.trainable_variables)
        opt.build(model.trainable_variables)
    trainer = PretrainingLoop(strategy, model, opt, tmp, len(batch["token_ids"]),
                              jit_compile=jit_compile)
    iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())
    one = tf.constant(1)
    return lambda: trainer._train_steps(iterator, one).numpy()


def keras_hub_mlm(batch, dtype):
    import keras
    import keras_hub
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=VOCAB, num_layers=12, num_heads=12, hidden_dim=768,
        intermediate_dim=3072, max_sequence_length=512,
        dtype="mixed_bfloat16" if dtype == "bf16" else "float32")
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    model.compile(optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.01,
                                                   global_clipnorm=1.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[])
    x = {"token_ids": batch["token_ids"], "segment_ids": batch["segment_ids"],
         "padding_mask": batch["padding_mask"], "mask_positions": batch["masked_lm_positions"]}
    y, w = batch["masked_lm_ids"], batch["masked_lm_weights"]
    return lambda: model.train_on_batch(x, y, sample_weight=w)


def hf_torch(batch, dtype):
    import torch
    from transformers import BertConfig as HFConfig
    from transformers import BertForPreTraining
    torch.manual_seed(0)
    model = BertForPreTraining(HFConfig())
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)
    labels = torch.full((len(batch["token_ids"]), SEQ), -100, dtype=torch.long)
    rows = torch.arange(len(batch["token_ids"]))[:, None]
    labels[rows, torch.tensor(batch["masked_lm_positions"]).long()] = \
        torch.tensor(batch["masked_lm_ids"]).long()
    inputs = dict(input_ids=torch.tensor(batch["token_ids"]).long(),
                  token_type_ids=torch.tensor(batch["segment_ids"]).long(),
                  attention_mask=torch.tensor(batch["padding_mask"]).long(), labels=labels,
                  next_sentence_label=torch.tensor(batch["next_sentence_labels"]).long())

    def step():
        opt.zero_grad()
        model(**inputs).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return step


def ours_xla(batch, dtype, tmp):
    return ours(batch, dtype, tmp, jit_compile=True)


IMPLEMENTATIONS = (("bert_tf (MLM+NSP)", ours),
                   ("bert_tf XLA (MLM+NSP)", ours_xla),
                   ("keras-hub BertMaskedLM (MLM)", keras_hub_mlm),
                   ("HF torch BertForPreTraining (MLM+NSP)", hf_torch))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timed rounds")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per model")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--no_write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    import tempfile
    batch = random_batch(args.batch_size)
    b = args.batch_size
    rows, log = [], []
    load_before = os.getloadavg()[0]
    for dtype in args.dtypes.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            builders = {name: ("bench.pretraining", build.__name__,
                               (batch, dtype, os.path.join(tmp, str(i)))
                               if build in (ours, ours_xla) else (batch, dtype))
                        for i, (name, build) in enumerate(IMPLEMENTATIONS)}

            def report(r, times):
                line = f"{dtype} round {r + 1}/{args.repeats}: " + ", ".join(
                    f"{name.split(' (')[0]} {b / t[-1]:.2f}" for name, t in times.items())
                print(line + " seq/s", flush=True)
                log.append(line)
            times, _ = interleaved_processes(builders, args.repeats, args.warmup, report)
            med = {name: statistics.median(t) for name, t in times.items()}
            t_hf = med[IMPLEMENTATIONS[-1][0]]
            for name, t in med.items():
                rows.append([dtype, name, f"{b / t:.2f}", f"{t * 1000:.0f}", f"{t_hf / t:.2f}x"])
    table = markdown_table(["dtype", "implementation", "sequences/s", "ms/step",
                            "vs HF torch"], rows)
    body = (f"One training step (forward + backward + AdamW update + global-norm clipping), "
            f"BERT-base, seq {SEQ}, batch {b}, {PRED} masked positions, random weights and "
            f"data, median of {args.repeats} interleaved rounds after {args.warmup} warm-up "
            f"steps per model, each model alone in a fresh process per round (build, "
            f"warm-up, one timed step). bf16: Keras `mixed_bfloat16` (float32 "
            f"master weights) vs torch `model.to(bfloat16)` (bf16 weights and optimizer).\n\n"
            f"{table}\n\nPer-round seq/s:\n\n```\n" + "\n".join(log) + "\n```\n\n"
            f"Load average (1 min): {load_before:.1f} before, {os.getloadavg()[0]:.1f} after.\n\n"
            f"Machine: {machine()}\n\nCommand: `{command_line()}`\n")
    print(body)
    if not args.no_write:
        write_section(section_name("Pretraining step", args.dtypes), body)


if __name__ == "__main__":
    main()
