"""A frozen encoder's features, computed once per data set and kept on disk, and the
head of a feature-based model run on them.

The feature-based recipe (`python -m tasks.ner --feature_based`) trains a head on layers
of an encoder that never changes: running the encoder at every step of every epoch
recomputes the same numbers. `frozen_features` runs it once over a data set, keeps the
chosen layers' outputs at the real positions of each row (padding is left out, so the
file holds what the texts hold), and writes them to `CACHE_DIR/KEY.npy`; a later epoch,
evaluation, prediction or run with the same key reads them back. `head_and_features`
gives the model's head alone (BertTokenClassifier.feature_head_model) with them, and
`rows` the tf.data rows it reads.

The key is the SHA-256 of everything the stored numbers depend on:

  - FORMAT (raised whenever what a file holds changes);
  - the layer choice (`feature_layers`) and the encoder's BertConfig, every field;
  - the dtype policy the encoder computes in (bfloat16 features differ from float32);
  - every encoder weight: its path, shape, dtype and bytes, in order (another checkpoint
    gives another key, however it was loaded);
  - the encoder's inputs `token_ids`, `segment_ids`, `padding_mask`: shapes, dtypes and
    bytes. The data file's text, the vocabulary, lower casing and max_seq_length reach
    the encoder only through them, so a change of any of these changes the key.

Files are written under a temporary name and renamed when complete (bert_tf/base/files.py):
a run stopped half-way leaves no file that a later run would take for whole. Files of
other keys are left in place (delete CACHE_DIR to reclaim the space).
"""

import hashlib
import json
import os

import numpy as np

from bert_tf.base.input_names import INPUT_NAMES
from bert_tf.base.files import atomic_write

FORMAT = 1


def cache_key(frozen, inputs):
    """The hex SHA-256 of the module docstring's list for a FrozenLastLayers layer and
    `inputs` ({token_ids, segment_ids, padding_mask} int32 [N, S])."""
    from bert_tf.models.task_models import encoder_policy
    encoder = frozen.encoder
    digest = hashlib.sha256()
    head = {"format": FORMAT, "feature_layers": frozen.feature_layers,
            "bert_config": encoder.bert_config.to_dict(),
            "dtype_policy": encoder_policy(encoder).name}
    digest.update(json.dumps(head, sort_keys=True).encode())
    for variable in encoder.weights:
        value = np.ascontiguousarray(variable.numpy())
        digest.update(f"{variable.path} {value.shape} {value.dtype}".encode())
        digest.update(value.tobytes())
    for name in INPUT_NAMES:
        value = np.ascontiguousarray(inputs[name], np.int32)
        digest.update(f"{name} {value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def row_lengths(padding_mask):
    """[N, S] 1/0 -> [N] real positions per row; ValueError unless each row's real
    positions come first (what the stored rows assume)."""
    mask = np.asarray(padding_mask) > 0
    lengths = mask.sum(axis=1)
    if not (mask == (np.arange(mask.shape[1]) < lengths[:, None])).all():
        raise ValueError("frozen features: padding_mask must be 1 on a prefix of each row")
    return lengths


def frozen_features(frozen, inputs, cache_dir=None, batch_size=32):
    """What `frozen` (a FrozenLastLayers layer: [B, S, D] or [B, S, n, H]) gives at the
    real positions of `inputs`, row after row -> float32 [T, D] or [T, n, H] with
    T = padding_mask.sum().

    cache_dir: read from `cache_dir/KEY.npy` when it holds them, else computed (one pass
    of the encoder, in batches of `batch_size` cut to their longest row) and written
    there; None: computed and not kept.
    """
    from tensorflow.io import gfile            # output_dir may be gs://...
    lengths = row_lengths(inputs["padding_mask"])
    path = None
    if cache_dir is not None:
        path = os.path.join(cache_dir, cache_key(frozen, inputs)[:32] + ".npy")
        if gfile.exists(path):
            with gfile.GFile(path, "rb") as f:
                values = np.load(f)
            if values.shape[0] == lengths.sum():
                print(f"frozen features: {len(lengths)} sequences read from {path}",
                      flush=True)
                return values
    values = _compute(frozen, inputs, batch_size)
    if path is not None:
        gfile.makedirs(cache_dir)
        with atomic_write(path, "wb") as f:
            np.save(f, values)
        print(f"frozen features: {len(lengths)} sequences written to {path}", flush=True)
    return values


def _compute(frozen, inputs, batch_size):
    import tensorflow as tf

    from bert_tf.text import batching
    from bert_tf.base.progress import progress_bar
    spec = {name: tf.TensorSpec([None, None], tf.int32) for name in INPUT_NAMES}
    run = tf.function(lambda x: frozen(x), input_signature=[spec], autograph=False)
    dataset = batching.finish(tf.data.Dataset.from_tensor_slices(
        {name: np.asarray(inputs[name], np.int32) for name in INPUT_NAMES})
        .batch(batch_size).map(batching.trim_to_longest))
    parts = []
    with progress_bar(len(inputs["padding_mask"]), "frozen features", unit="seq") as bar:
        for batch in dataset:
            out = np.asarray(run(batch)).astype(np.float32)        # [b, w, ...]
            parts.append(out[batch["padding_mask"].numpy() > 0])   # [real positions, ...]
            bar.update(len(out))
    return np.concatenate(parts)


def head_and_features(model, features, cache_dir, batch_size=32):
    """(the head of a feature-based BertTokenClassifier, `features` with "frozen": its
    frozen layers' outputs, `frozen_features`) for `ner.make_dataset`."""
    frozen = frozen_features(model.get_layer("frozen_layers"), features, cache_dir,
                             batch_size)
    return model.feature_head_model(), dict(features, frozen=frozen)


def rows(features, with_labels=True, shuffle_seed=None):
    """tf.data of one element per row: ({"features": [S, ...] zero-padded, "padding_mask"
    [S]}, {"logits": label_ids [S]}), from `features` with "frozen" [T, ...].

    shuffle_seed: shuffled as `Dataset.shuffle(N, seed, reshuffle_each_iteration=True)`
    shuffles the token ids' rows. A shuffle's order depends on its seed and the number of
    elements only, so both give the same order; here the shuffle holds row indexes, and
    each row's features are padded after it, not N padded rows at once."""
    import tensorflow as tf
    n, seq = features["token_ids"].shape
    lengths = row_lengths(features["padding_mask"])
    starts = tf.constant(np.concatenate([[0], np.cumsum(lengths)[:-1]]), tf.int64)
    lengths = tf.constant(lengths, tf.int64)
    values = tf.constant(features["frozen"])                              # [T, ...]
    mask, labels = tf.constant(features["padding_mask"]), tf.constant(features["label_ids"])

    def row(i):
        real = values[starts[i]:starts[i] + lengths[i]]                   # [length, ...]
        padding = [[0, seq - lengths[i]]] + [[0, 0]] * (len(values.shape) - 1)
        x = {"features": tf.ensure_shape(tf.pad(real, padding), [seq] + values.shape[1:]),
             "padding_mask": mask[i]}
        return (x, {"logits": labels[i]}) if with_labels else x

    dataset = tf.data.Dataset.range(n)
    if shuffle_seed is not None:
        dataset = dataset.shuffle(n, seed=shuffle_seed, reshuffle_each_iteration=True)
    return dataset.map(row)
