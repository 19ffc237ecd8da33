"""Pretraining with Keras' `fit()`: the loop for Keras' JAX and PyTorch backends.

run_pretraining's loop (trainer.py) is TensorFlow's: tf.data, tf.distribute strategies,
checkpoints that hold the input position. On the other backends BertPretrainer trains with
`model.fit()` and the same pieces:

- the loss: google's masked-LM + next-sentence loss (losses.py, through
  `BertPretrainer.compute_loss`);
- the optimizer: AdamW (or LAMB) with BERT's weight-decay exclusions and the warmup then
  linear-decay schedule (optimization.py), gradients clipped to global norm 1.0;
- the data: the same TFRecord shards, read without TensorFlow (bert_tf/base/tfrecord.py).

    import keras
    from bert_tf import BertConfig, BertPretrainer
    from bert_tf.training import fit

    model = BertPretrainer.from_config_object(BertConfig.preset("base"))
    fit.compile_for_pretraining(model, learning_rate=1e-4, num_train_steps=10000,
                                num_warmup_steps=1000)
    model.fit(fit.shard_batches("shards/*.tfrecord", 32, 128, 20),
              steps_per_epoch=1000, epochs=10)
    fit.evaluate(model, fit.shard_batches("eval/*.tfrecord", 8, 128, 20, is_training=False))

One step of this loop equals one step of the tf.distribute loop on one device
(tests/training/test_pretraining.py::test_fit_step_equals_the_tf_distribute_loop), and the loop
gives the same losses on every backend (tests/models/test_backends.py). On JAX,
`keras.distribution.set_distribution(keras.distribution.DataParallel())` spreads the
batch over the local devices; Keras then computes one global gradient, which the optimizer
clips, as the tf.distribute loop clips its all-reduced one.
"""

import numpy as np

from bert_tf.base import shard_schema
from bert_tf.base.file_patterns import expand_file_patterns
from bert_tf.models.pretraining_losses import local_sums, metrics_from_sums
from bert_tf.training.optimization import CLIP_NORM, create_optimizer
from bert_tf.base.tfrecord import parse_example, read_records


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


def _examples(path, max_seq_length, max_predictions_per_seq, word_marks=False):
    """One shard's examples as {google's feature name: array}, lengths checked against
    the flags; `word_marks`: also shard_schema.WORD_CONTINUES."""
    lengths = shard_schema.lengths(max_seq_length, max_predictions_per_seq)
    features_read = [shard_schema.BY_INPUT[name] for name in shard_schema.BATCH_NAMES]
    if word_marks:
        features_read.append(shard_schema.WORD_CONTINUES)
        lengths[shard_schema.WORD_CONTINUES.name] = max_seq_length
    for offset, data in read_records(path):
        try:
            features = parse_example(memoryview(data))
        except (ValueError, IndexError) as e:
            raise ValueError(f"{path}: record at byte {offset} is not a tf.train.Example "
                             f"({e})") from None
        example = {}
        for feature in features_read:
            values = features.get(feature.name)
            if values is None:
                raise ValueError(f"{path}: record at byte {offset} has no "
                                 f"{feature.name!r} feature (not a pretraining shard?)")
            if len(values) != lengths[feature.name]:
                flag = f" (--{feature.length})" if feature.length else ""
                raise ValueError(f"{path}: record at byte {offset}: {feature.name} has "
                                 f"{len(values)} values, expected "
                                 f"{lengths[feature.name]}{flag}")
            example[feature.name] = values
        yield example


def _batch(examples):
    features = {name: np.stack([e[name] for e in examples]) for name in examples[0]}
    batch = shard_schema.to_batch(features, lambda v: v.astype(np.int32))
    inputs = {k: batch[k] for k in shard_schema.MODEL_INPUTS}
    marks = shard_schema.WORD_CONTINUES
    if marks.name in features:      # for remask_numpy, which drops it
        inputs[marks.input] = features[marks.name] > 0
    return inputs, {k: batch[k] for k in shard_schema.LABELS}


def remask_numpy(inputs, labels, spec, seed, index):
    """dynamic_masking.remask's rules with NumPy (data/masking.py, the offline
    masker's code), for the fit() loop: batch `index` masked anew from (seed, index)."""
    from bert_tf.data import masking
    ids = inputs["token_ids"].copy()
    real = labels["masked_lm_weights"] > 0
    rows = np.broadcast_to(np.arange(len(ids))[:, None], real.shape)
    ids[rows[real], inputs["masked_lm_positions"][real]] = labels["masked_lm_ids"][real]
    mask = inputs["padding_mask"].astype(bool)
    candidate = mask & (ids != spec.cls_id) & (ids != spec.sep_id)
    rng = np.random.default_rng([seed, index])
    inputs = dict(inputs)
    continues = inputs.pop(shard_schema.WORD_CONTINUES.input) if spec.word_marks else None
    if continues is None and spec.is_subword is not None:
        continues = np.asarray(spec.is_subword)[ids]
    chosen, group = masking.choose_positions(
        ids, candidate, mask.sum(axis=1), rng, spec.masked_lm_prob,
        spec.max_predictions_per_seq, continues, spec.max_ngram_size)
    positions, label_ids, weights, _ = masking.apply_masks(
        ids, chosen, group, rng, spec.mask_id, spec.vocab_size,
        spec.max_predictions_per_seq)
    return (dict(inputs, token_ids=ids, masked_lm_positions=positions.astype(np.int32)),
            dict(labels, masked_lm_ids=label_ids, masked_lm_weights=weights))


def shard_batches(input_files, batch_size, max_seq_length, max_predictions_per_seq,
                  is_training=True, seed=12345, shuffle_buffer=10000, masking=None):
    """(inputs, labels) batches of NumPy arrays from pretraining shards, for fit();
    `masking` (a dynamic_masking.MaskingSpec): every batch masked anew (`remask_numpy`).
    """
    batches = _shard_batches(input_files, batch_size, max_seq_length,
                             max_predictions_per_seq, is_training, seed, shuffle_buffer,
                             masking is not None and masking.word_marks)
    if masking is None:
        yield from batches
        return
    for index, (inputs, labels) in enumerate(batches):
        yield remask_numpy(inputs, labels, masking, seed, index)


def _shard_batches(input_files, batch_size, max_seq_length, max_predictions_per_seq,
                   is_training, seed, shuffle_buffer, word_marks=False):
    """The batches of shard_batches, as the shards hold them.

    Training: forever, each pass over the files in a fresh order (seeded), records
    shuffled through a buffer of `shuffle_buffer`, full batches only. Eval: files in
    order, one pass, the last partial batch kept. A shard without a single example is an
    error (it would otherwise be skipped silently, pass after pass). Patterns name files
    as run_pretraining's do (file_patterns.expand_file_patterns); an empty file is
    reported here, when its turn comes, as a shard without records."""
    files = expand_file_patterns(input_files, allow_empty=True)
    rng = np.random.default_rng(seed)
    buffer, batch = [], []
    while True:
        order = rng.permutation(len(files)) if is_training else range(len(files))
        for i in order:
            count = 0
            for example in _examples(files[i], max_seq_length, max_predictions_per_seq,
                                     word_marks):
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
