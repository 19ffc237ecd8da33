"""Pretraining with Keras' `fit()`: the loop for Keras' JAX and PyTorch backends.

run_pretraining's loop (trainer.py) is TensorFlow's: tf.data, tf.distribute strategies,
checkpoints that hold the input position. On the other backends BertPretrainer trains with
`model.fit()` and the same pieces:

- the loss: google's masked-LM + next-sentence loss (losses.py, through
  `BertPretrainer.compute_loss`);
- the optimizer: AdamW (or LAMB) with BERT's weight-decay exclusions and the warmup then
  linear-decay schedule (optimization.py), gradients clipped to global norm 1.0;
- the data: the same TFRecord shards, read without TensorFlow (records.py).

    import keras
    from bert_tf import BertConfig, BertPretrainer
    from bert_tf.pretraining import fit

    model = BertPretrainer.from_config_object(BertConfig.preset("base"))
    fit.compile_for_pretraining(model, learning_rate=1e-4, num_train_steps=10000,
                                num_warmup_steps=1000)
    model.fit(fit.shard_batches("shards/*.tfrecord", 32, 128, 20),
              steps_per_epoch=1000, epochs=10)
    fit.evaluate(model, fit.shard_batches("eval/*.tfrecord", 8, 128, 20, is_training=False))

One step of this loop equals one step of the tf.distribute loop on one device
(tests/test_pretraining.py::test_fit_step_equals_the_tf_distribute_loop), and the loop
gives the same losses on every backend (tests/test_backends.py). On JAX,
`keras.distribution.set_distribution(keras.distribution.DataParallel())` spreads the
batch over the local devices; Keras then computes one global gradient, which the optimizer
clips, as the tf.distribute loop clips its all-reduced one.
"""

import numpy as np

from bert_tf import file_patterns
from bert_tf.pretraining.losses import local_sums, metrics_from_sums
from bert_tf.pretraining.optimization import CLIP_NORM, create_optimizer
from bert_tf.pretraining.records import parse_example, read_records

INPUTS = ("token_ids", "segment_ids", "padding_mask", "masked_lm_positions")
LABELS = ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")
# our name: (google's feature name in the shards, length: "seq" / "pred" / 1)
FEATURES = {
    "token_ids": ("input_ids", "seq"),
    "segment_ids": ("segment_ids", "seq"),
    "padding_mask": ("input_mask", "seq"),
    "masked_lm_positions": ("masked_lm_positions", "pred"),
    "masked_lm_ids": ("masked_lm_ids", "pred"),
    "masked_lm_weights": ("masked_lm_weights", "pred"),
    "next_sentence_labels": ("next_sentence_labels", 1),
}


def compile_for_pretraining(model, learning_rate, num_train_steps, num_warmup_steps,
                            optimizer="adamw", jit_compile="auto", steps_per_execution=1):
    """Compiles a BertPretrainer for fit(): run_pretraining's optimizer, schedule and
    clipping, and (no `loss` given) the model's own google loss."""
    model.compile(
        optimizer=create_optimizer(optimizer, learning_rate, num_train_steps,
                                   num_warmup_steps, model.trainable_variables,
                                   global_clipnorm=CLIP_NORM),
        jit_compile=jit_compile, steps_per_execution=steps_per_execution)
    return model


def expand_file_patterns(patterns):
    """Comma-separated globs (or a list of them) -> sorted local files; an error names a
    pattern that matches nothing. The TF-free twin of data.expand_file_patterns (same
    rule: bert_tf/file_patterns.py)."""
    files = set()
    for pattern in file_patterns.split_patterns(patterns):
        matched = file_patterns.match(pattern)
        if not matched:
            raise FileNotFoundError(f"--input_file: no file matches {pattern!r}")
        files.update(matched)
    return sorted(files)


def _examples(path, max_seq_length, max_predictions_per_seq):
    """One shard's examples as {our name: array}, lengths checked against the flags."""
    lengths = {"seq": max_seq_length, "pred": max_predictions_per_seq, 1: 1}
    for offset, data in read_records(path):
        try:
            features = parse_example(memoryview(data))
        except (ValueError, IndexError) as e:
            raise ValueError(f"{path}: record at byte {offset} is not a tf.train.Example "
                             f"({e})") from None
        example = {}
        for name, (feature, length) in FEATURES.items():
            values = features.get(feature)
            if values is None:
                raise ValueError(f"{path}: record at byte {offset} has no {feature!r} "
                                 f"feature (not a pretraining shard?)")
            if len(values) != lengths[length]:
                flag = {"seq": " (--max_seq_length)",
                        "pred": " (--max_predictions_per_seq)"}.get(length, "")
                raise ValueError(f"{path}: record at byte {offset}: {feature} has "
                                 f"{len(values)} values, expected {lengths[length]}{flag}")
            example[name] = values
        yield example


def _batch(examples):
    batch = {name: np.stack([e[name] for e in examples]) for name in FEATURES}
    batch = {name: v if name == "masked_lm_weights" else v.astype(np.int32)
             for name, v in batch.items()}
    batch["next_sentence_labels"] = batch["next_sentence_labels"][:, 0]
    return ({k: batch[k] for k in INPUTS}, {k: batch[k] for k in LABELS})


def shard_batches(input_files, batch_size, max_seq_length, max_predictions_per_seq,
                  is_training=True, seed=12345, shuffle_buffer=10000):
    """(inputs, labels) batches of NumPy arrays from pretraining shards, for fit().

    Training: forever, each pass over the files in a fresh order (seeded), records
    shuffled through a buffer of `shuffle_buffer`, full batches only. Eval: files in
    order, one pass, the last partial batch kept. A shard without a single example is an
    error (it would otherwise be skipped silently, pass after pass)."""
    files = expand_file_patterns(input_files)
    rng = np.random.default_rng(seed)
    buffer, batch = [], []
    while True:
        order = rng.permutation(len(files)) if is_training else range(len(files))
        for i in order:
            count = 0
            for example in _examples(files[i], max_seq_length, max_predictions_per_seq):
                count += 1
                if is_training:
                    # A shuffle buffer: each example swaps into a random slot once full.
                    if len(buffer) < shuffle_buffer:
                        buffer.append(example)
                        continue
                    slot = int(rng.integers(shuffle_buffer))
                    buffer[slot], example = example, buffer[slot]
                batch.append(example)
                if len(batch) == batch_size:
                    yield _batch(batch)
                    batch = []
            if count == 0:
                raise ValueError(f"{files[i]}: no records (an empty shard)")
        if not is_training:
            if batch:
                yield _batch(batch)
            return
        # Drain the buffer between passes, so a small corpus still yields batches.
        rng.shuffle(buffer)
        for example in buffer:
            batch.append(example)
            if len(batch) == batch_size:
                yield _batch(batch)
                batch = []
        buffer = []


def evaluate(model, batches, max_eval_steps=None):
    """google's four eval metrics (and the loss) over `batches` of (inputs, labels), summed
    over every batch before the ratios are taken, as run_pretraining's eval does."""
    import keras
    totals = None
    for i, (inputs, labels) in enumerate(batches):
        if max_eval_steps and i >= max_eval_steps:
            break
        sums = local_sums(model(inputs, training=False), labels)
        sums = {k: float(keras.ops.convert_to_numpy(v)) for k, v in sums.items()}
        totals = sums if totals is None else {k: totals[k] + sums[k] for k in totals}
    if totals is None:
        raise ValueError("eval input is empty: no batch was read")
    return {k: float(keras.ops.convert_to_numpy(v))
            for k, v in metrics_from_sums(totals).items()}
