"""Batches cut to their longest sequence (bert_tf/text/batching.py): shapes, every example once,
random order across buckets, a bounded number of widths, and model outputs unchanged."""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.text import batching

SEQ = 64


def packed_examples(lengths, seq=SEQ):
    """Packed features of examples with the given real lengths (token i of example k is
    1000 * k + i), and per-token tags and one label per example."""
    n = len(lengths)
    token_ids = np.zeros((n, seq), "int32")
    for k, length in enumerate(lengths):
        token_ids[k, :length] = 1000 * k + np.arange(1, length + 1)
    mask = (token_ids > 0).astype("int32")
    features = {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
                "padding_mask": mask}
    return features, {"tags": token_ids % 7, "label": np.arange(n, dtype="int32")}


def test_trim_batch_cuts_inputs_and_per_token_labels_only():
    features, labels = packed_examples([3, 10, 5])
    inputs, out = batching.trim_batch(({k: tf.constant(v) for k, v in features.items()},
                                       {k: tf.constant(v) for k, v in labels.items()}),
                                      per_token=("tags",))
    assert inputs["token_ids"].shape == (3, 16) and out["tags"].shape == (3, 16)
    assert out["label"].shape == (3,)
    np.testing.assert_array_equal(inputs["token_ids"], features["token_ids"][:, :16])
    np.testing.assert_array_equal(out["tags"], labels["tags"][:, :16])


def test_a_tensor_shaped_like_the_mask_is_not_cut_unless_named_per_token():
    """Cut by what a tensor is, not by its shape: multi-label targets [B, K] with K labels
    equal to max_seq_length, and a weight [B, L] that is not per token, keep every
    column; the per-token entry named beside them (NER's tags, frozen features [B, L,
    H]) is cut with the inputs, on the token axis."""
    features, labels = packed_examples([3, 10, 5])
    targets = (np.arange(3 * SEQ).reshape(3, SEQ) % 2).astype("float32")     # K == SEQ
    frozen = np.arange(3 * SEQ * 2, dtype="float32").reshape(3, SEQ, 2)
    inputs = {k: tf.constant(v) for k, v in features.items()}
    inputs["features"] = tf.constant(frozen)
    x, y, w = batching.trim_batch(
        (inputs, {"logits": tf.constant(targets)}, {"logits": tf.constant(targets)}))
    assert x["token_ids"].shape == (3, 16) and x["features"].shape == (3, SEQ, 2)
    np.testing.assert_array_equal(y["logits"], targets)
    np.testing.assert_array_equal(w["logits"], targets)
    x, y = batching.trim_batch((inputs, {"logits": tf.constant(labels["tags"])}),
                               per_token=("logits", "features"))
    np.testing.assert_array_equal(x["features"], frozen[:, :16])
    np.testing.assert_array_equal(y["logits"], labels["tags"][:, :16])
    # Through a whole pipeline too (rebatch, as the classifier families batch).
    ds = tf.data.Dataset.from_tensor_slices((features, {"logits": targets})).batch(3)
    for mode in ("longest", "bucket"):
        batches = list(batching.rebatch(ds, 3, mode, SEQ))
        assert sum(len(y["logits"]) for _, y in batches) == 3
        for x, y in batches:
            assert x["token_ids"].shape[1] < SEQ and y["logits"].shape[1] == SEQ
    with pytest.raises(ValueError, match="'label' is named per-token but its shape"):
        batching.trim_batch(({k: tf.constant(v) for k, v in features.items()},
                             {"label": tf.constant(labels["label"])}), per_token=("label",))


@pytest.mark.parametrize("mode", ["longest", "sort", "bucket"])
def test_every_example_once_at_a_multiple_of_8(mode):
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, SEQ + 1, size=200)
    features, labels = packed_examples(lengths)
    ds = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(200, seed=1)
    seen, widths = [], collections.Counter()
    for inputs, out in batching.batch(ds, 16, mode, SEQ, per_token=("tags",)):
        width = inputs["token_ids"].shape[1]
        real = inputs["padding_mask"].numpy().sum(1)
        assert width % 8 == 0 and width <= SEQ and real.max() <= width
        assert real.max() > width - 8                  # no column that no example uses
        widths[width] += 1
        np.testing.assert_array_equal(out["tags"], inputs["token_ids"].numpy() % 7)
        seen += out["label"].numpy().tolist()
        for row, k in zip(inputs["token_ids"].numpy(), out["label"].numpy()):
            np.testing.assert_array_equal(row, features["token_ids"][k, :width])
    assert sorted(seen) == list(range(200))
    # The widths a jit-compiled step would compile: at most SEQ / 8.
    assert len(widths) <= SEQ // 8
    if mode in ("sort", "bucket"):
        # Grouping by length: far less padding than batches in the shuffled order.
        padded = sum(w * c for w, c in widths.items()) * 16
        assert padded < 0.8 * sum(
            16 * max(8, -(-max(lengths[i:i + 16]) // 8) * 8) for i in range(0, 200, 16))


def test_bucket_order_is_random_across_epochs_and_buckets():
    lengths = [4, 12, 20, 28] * 16
    features, labels = packed_examples(lengths)
    ds = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(
        64, seed=3, reshuffle_each_iteration=True)
    batched = batching.batch(ds, 4, "bucket", SEQ)
    epochs = [[out["label"].numpy().tolist() for _, out in batched] for _ in range(2)]
    assert epochs[0] != epochs[1]                       # reshuffled each epoch
    for epoch in epochs:
        widths = [lengths[b[0]] for b in epoch]
        # Buckets interleave (not all short batches first): lengths are mixed in time.
        assert widths != sorted(widths) and widths != sorted(widths, reverse=True)
        for b in epoch:
            assert len({lengths[i] for i in b}) == 1     # one length per batch here


def test_sort_keeps_batches_full_and_shuffles_them():
    """sort: one pass over 200 examples gives 12 full batches of 16 and one of 8 (bucket
    would flush a partial batch per bucket), in a different order every epoch."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(2, SEQ + 1, size=200)
    features, labels = packed_examples(lengths)
    ds = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(
        200, seed=2, reshuffle_each_iteration=True)
    batched = batching.batch(ds, 16, "sort", SEQ, seed=3)
    epochs = [[(inputs["token_ids"].shape[1], out["label"].numpy().tolist())
               for inputs, out in batched] for _ in range(2)]
    for epoch in epochs:
        assert sorted(len(b) for _, b in epoch) == [8] + [16] * 12
        widths = [w for w, _ in epoch]
        assert widths != sorted(widths)                   # batches shuffled
    assert [b for _, b in epochs[0]] != [b for _, b in epochs[1]]
    bucket = list(batching.batch(ds, 16, "bucket", SEQ))
    assert len(bucket) > len(epochs[0])                   # partial batch per bucket


def test_sort_mixes_the_examples_of_a_width_anew_each_epoch():
    """sort orders a window by the width each example is cut to (a multiple of 8), not by
    its exact length: within a width the examples stay in their shuffled order. A small
    set whose lengths follow a few templates (here 8 lengths, two per width) then meets
    in batches of mixed lengths whose members change every epoch; sorted by exact length,
    the whole set falls into the same 13 single-length batches every epoch."""
    lengths = [9, 13, 17, 21, 25, 29, 33, 37] * 25                         # 200
    features, labels = packed_examples(lengths)
    ds = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(
        200, seed=2, reshuffle_each_iteration=True)
    batched = batching.batch(ds, 16, "sort", SEQ, seed=3)
    epochs = [[frozenset(out["label"].numpy().tolist()) for _, out in batched]
              for _ in range(2)]
    for epoch in epochs:
        mixed = [b for b in epoch if len({lengths[i] for i in b}) > 1]
        assert len(mixed) >= len(epoch) - 1, [sorted({lengths[i] for i in b}) for b in epoch]
        for b in epoch:     # one width per batch, but where widths meet in the sort
            assert len({-(-lengths[i] // 8) for i in b}) <= 2
    assert not set(epochs[0]) & set(epochs[1])          # no batch repeats across epochs


def test_rebatch_regroups_batches_packed_to_max():
    features, labels = packed_examples([3, 40, 5, 6, 41, 2, 7, 39])
    ds = tf.data.Dataset.from_tensor_slices((features, labels)).batch(4)
    assert [b[0]["token_ids"].shape[1] for b in batching.rebatch(ds, 4, "off", SEQ)] == \
        [64, 64]
    assert [b[0]["token_ids"].shape[1] for b in batching.rebatch(ds, 4, "longest", SEQ)] == \
        [40, 48]
    grouped = list(batching.rebatch(ds, 4, "bucket", SEQ))
    # Lengths <= 8: a full batch and the remainder; 39, 40 share a bucket, 41 is alone.
    assert sorted((b[0]["token_ids"].shape[1], len(b[1]["label"])) for b in grouped) == \
        [(8, 1), (8, 4), (40, 2), (48, 1)]
    with pytest.raises(ValueError, match="length batching must be one of"):
        batching.batch(ds.unbatch(), 4, "sorted", SEQ)


def test_cut_batches_give_the_outputs_of_max_padding(minilm_dir):
    """The real MiniLM encoder on a batch cut to its longest (16 of 64 columns): the real
    tokens' outputs equal those of the batch padded to 64."""
    from bert_tf.checkpoints.dispatch import load_encoder
    from bert_tf.text.packing import BertPacker
    from bert_tf.text.tokenization import BertTokenizer
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"))
    texts = ["Return the number of items in the list, or raise an error.", "中文 text.",
             "a", "Raise an error."]
    features = BertPacker.from_tokenizer(tokenizer, SEQ)(
        tf.ragged.constant(tokenizer.encode(texts), dtype=tf.int32,
                           row_splits_dtype=tf.int64))
    cut = batching.trim_to_longest(features)
    assert cut["token_ids"].shape == (4, 16)
    encoder = load_encoder(minilm_dir)
    full, short = encoder(features), encoder(cut)
    np.testing.assert_allclose(short["pooled_output"], full["pooled_output"], atol=1e-5)
    mask = cut["padding_mask"].numpy()[:, :, None]
    np.testing.assert_allclose(short["sequence_output"] * mask,
                               full["sequence_output"][:, :16] * mask, atol=1e-4)


def run_recorded(lengths, seq=SEQ, choices=None, graph=True):
    """run_by_length with an fn that records each call's shape and returns per-example
    and per-token values computed from the tokens alone."""
    features, _ = packed_examples(lengths, seq)
    if choices:
        features = {k: np.repeat(v[:, None, :], choices, 1) for k, v in features.items()}
    calls = []

    def fn(f):
        calls.append(f["token_ids"].shape)
        ids = tf.cast(f["token_ids"], tf.float32)
        axes = list(range(1, len(f["token_ids"].shape)))
        return {"total": tf.reduce_sum(ids, axes), "label": tf.strings.as_string(
            tf.reduce_max(tf.cast(f["token_ids"], tf.int32), axes)), "double": 2 * ids}

    run = lambda f: batching.run_by_length(fn, f, per_token=("double",))  # noqa: E731
    if graph:
        run = tf.function(run)
    out = run({k: tf.constant(v) for k, v in features.items()})
    return features, {k: v.numpy() for k, v in out.items()}, calls


@pytest.mark.parametrize("graph", [True, False])
@pytest.mark.parametrize("lengths", [[60, 3, 5, 4, 30, 6, 2, 64, 7, 5], [37]])
def test_run_by_length_equals_one_call_in_input_order(graph, lengths):
    # One text takes the graph's one-call branch; more take the sorted path.
    features, out, _ = run_recorded(lengths, graph=graph)
    ids = features["token_ids"].astype("float32")
    np.testing.assert_array_equal(out["total"], ids.sum(1))
    assert [x.decode() for x in out["label"]] == [str(v) for v in features["token_ids"]
                                                  .max(1)]
    assert out["double"].shape == (len(lengths), SEQ)         # padded back to seq
    np.testing.assert_array_equal(out["double"], 2 * ids)


def test_run_by_length_splits_where_it_pays():
    # Eight short texts and one long: the long one gets a call of its own.
    _, _, calls = run_recorded([3, 5, 4, 6, 2, 7, 5, 4, 60], graph=False)
    assert [tuple(c) for c in calls] == [(8, 8), (1, 64)]
    # Equal lengths: one call, as wide as they are.
    _, _, calls = run_recorded([20] * 12, graph=False)
    assert [tuple(c) for c in calls] == [(12, 24)]
    # Rows x width plus a call's overhead: two long texts among 30 short ones share a call.
    _, _, calls = run_recorded([10] * 30 + [50, 55], graph=False)
    assert [tuple(c) for c in calls] == [(30, 16), (2, 56)]


def test_run_by_length_empty_batch_and_choices():
    _, out, _ = run_recorded([])
    assert out["total"].shape == (0,) and out["double"].shape == (0, SEQ)
    features, out, calls = run_recorded([5, 40, 6], choices=4, graph=False)
    np.testing.assert_array_equal(out["total"], features["token_ids"].sum((1, 2)))
    np.testing.assert_array_equal(out["double"], 2 * features["token_ids"])
    assert [tuple(c) for c in calls] == [(2, 4, 8), (1, 4, 40)]


def test_exact_widths_without_xla():
    """multiple=1 (training without --jit_compile): each batch is cut to exactly its
    longest sequence."""
    features, labels = packed_examples([3, 10, 5, 17, 2, 9])
    ds = tf.data.Dataset.from_tensor_slices((features, labels))
    widths = [inputs["token_ids"].shape[1]
              for inputs, _ in batching.batch(ds, 2, "longest", SEQ, multiple=1)]
    assert widths == [10, 17, 9]
    assert [inputs["token_ids"].shape[1]
            for inputs, _ in batching.batch(ds, 2, "longest", SEQ)] == [16, 24, 16]


def test_run_by_length_calls_stay_within_max_call_tokens():
    """A long batch (thousands of SQuAD windows) runs in calls of at most max_call_tokens
    tokens, in input order, with the outputs of one call."""
    lengths = [20] * 40 + [60] * 5 + [3]
    features, _ = packed_examples(lengths, SEQ)
    calls = []

    def fn(f):
        calls.append(tuple(f["token_ids"].shape))
        return {"total": tf.reduce_sum(f["token_ids"], 1)}

    out = batching.run_by_length(fn, {k: tf.constant(v) for k, v in features.items()},
                                 max_call_tokens=256)
    np.testing.assert_array_equal(out["total"], features["token_ids"].sum(1))
    assert all(rows * width <= 256 for rows, width in calls)
    # The 3-token example and nine of width 24 share the first call; past 10 rows of 24
    # the budget is spent; four of width 64 fill one call and the last gets its own.
    assert calls == [(10, 24)] * 4 + [(1, 24), (4, 64), (1, 64)]


def test_run_by_length_bounds_the_calls_under_way():
    """The memory bound of docs/serving.md ("What one request may cost"): calls of at most
    MAX_CALL_TOKENS tokens (a full batch of 32 x 128 is two calls, which two cores can run
    side by side), and the serving graph's loop keeps at most PARALLEL_CALLS of them under
    way (its parallel_iterations)."""
    features, _ = packed_examples([128] * 32, 128)
    features = {k: tf.constant(v) for k, v in features.items()}
    calls = []

    def fn(f):
        calls.append(tuple(f["token_ids"].shape))
        return {"total": tf.reduce_sum(f["token_ids"], 1)}

    out = batching.run_by_length(fn, features)
    np.testing.assert_array_equal(out["total"], tf.reduce_sum(features["token_ids"], 1))
    assert calls == [(16, 128), (16, 128)]
    graph = tf.function(lambda f: batching.run_by_length(fn, f)).get_concrete_function(
        {k: tf.TensorSpec([None, None], tf.int32) for k in features}).graph.as_graph_def()
    # The loop lives in a function of the graph's library (the sorted path's call).
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    loops = [n for n in nodes if n.op in ("While", "StatelessWhile")]
    assert [n.attr["parallel_iterations"].i for n in loops] == [batching.PARALLEL_CALLS]


# ------------------------------------------------------------ what the model learns

@pytest.mark.parametrize("pipeline", ["batching.batch", "ner.make_dataset"])
def test_default_batching_trains_on_the_batches_of_off(pipeline):
    """The default --length_batching gives the training step off's batches (google's:
    shuffled, padded to max_seq_length), each cut to its longest sequence: the same
    examples in the same order with the same labels, epoch after epoch, and nothing cut
    that any example uses. A model therefore learns from it what it learns from off,
    up to float rounding; modes that regroup examples by length (sort, bucket) change
    the batches, and on small templated sets what the model learns (docs/benchmarks.md,
    "Length batching and accuracy")."""
    from tasks import driver
    from tasks.families.ner import task as ner
    default = driver.FineTuneConfig(output_dir="unused").length_batching
    assert default not in ("sort", "bucket", "off")
    # The shuffles' order, whatever global seed an earlier test in this process left.
    tf.random.set_seed(7)
    rng = np.random.default_rng(4)      # mostly short, a few long: batches of both widths
    lengths = np.where(rng.random(100) < 0.05, rng.integers(30, SEQ + 1, size=100),
                       rng.integers(2, 17, size=100))
    features, labels = packed_examples(lengths)

    def epochs(mode):
        if pipeline == "ner.make_dataset":
            ds = ner.make_dataset(dict(features, label_ids=labels["tags"]), 16,
                                  training=True, seed=7, length_batching=mode)
        else:
            ds = batching.batch(tf.data.Dataset.from_tensor_slices(
                (features, labels)).shuffle(100, seed=7, reshuffle_each_iteration=True),
                16, mode, SEQ, drop_remainder=True, seed=7, per_token=("tags",))
        return [list(ds) for _ in range(2)]

    off, cut = epochs("off"), epochs(default)
    assert [len(e) for e in cut] == [len(e) for e in off] == [6, 6]
    assert [b[0]["token_ids"][:, 0].numpy().tolist() for b in off[0]] != \
        [b[0]["token_ids"][:, 0].numpy().tolist() for b in off[1]]     # reshuffled
    widths = set()
    for epoch_off, epoch_cut in zip(off, cut):
        for (x_off, y_off), (x_cut, y_cut) in zip(epoch_off, epoch_cut):
            width = x_cut["token_ids"].shape[1]
            widths.add(width)
            assert x_off["token_ids"].shape[1] == SEQ
            assert not x_off["padding_mask"][:, width:].numpy().any()   # only padding cut
            for name in x_off:
                np.testing.assert_array_equal(x_cut[name], x_off[name][:, :width])
            for name in y_off:
                want = y_off[name]
                want = want[:, :width] if want.shape.rank == 2 else want
                np.testing.assert_array_equal(y_cut[name], want)
    assert len(widths) > 1 and max(widths) <= SEQ
