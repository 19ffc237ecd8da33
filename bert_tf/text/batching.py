"""Batches that cost what their texts cost: padding cut to the batch's longest sequence.

Examples are packed to max_seq_length (as google-research/bert writes them); a batch of
short texts then spends most of its work on padding. HF's Trainer pads each batch to its
longest (`DataCollatorWithPadding`) and can group similar lengths (`group_by_length`).
Here the same, on tf.data:

    off       every batch padded to max_seq_length (google-research/bert's behaviour)
    longest   batches in the given order, each cut to its longest sequence, rounded up to
              a multiple of 8 (`trim_to_longest`)
    sort      windows of 50 batches' worth of (shuffled) examples sorted by the width
              each is cut to (its length rounded up to a multiple of 8), cut into full
              batches, the batches of a window shuffled, each cut as `longest` (HF
              Trainer's group_by_length megabatches, by width rather than exact length)
    bucket    examples of similar length batched together (tf.data
              `bucket_by_sequence_length`, buckets every 8 tokens), then cut as `longest`;
              each bucket flushes a smaller batch when the data ends.
sort and bucket reorder examples (training only); examples enter them in their shuffled
order, so every epoch still mixes lengths and orders randomly. On one pass over a small
set, sort keeps every batch full and so takes fewer steps than bucket.

The fine-tuning commands' default is longest: its batches are off's, so a model learns
from it what it learns from google's padded batches. Grouping by length changes what a
batch holds, and on small sets what the model learns: on a templated Chinese NER set
(600 sentences, MiniLM, three seeds) sort's entity F1 was 70.7 against off's 75.6, with
windows sorted by exact length 56.4 (docs/benchmarks.md, "Length batching and
accuracy"). sort orders by width rather than exact length since then: a batch costs its
width, so ordering within a width saved nothing, and it kept one length (on templated
data, one template) per batch, the same batches every epoch.

Widths are multiples of 8 up to max_seq_length, so an XLA-compiled step compiles at most
max_seq_length / 8 programs (16 at 128).

Real tokens attend only to real tokens, so cutting padding leaves what the model computes
for them unchanged. A tensor is cut by what it is, never by its shape: the packed inputs
(`token_ids`, `segment_ids`, `padding_mask`) always, and the entries a pipeline names
`per_token` (NER's tags, a frozen encoder's features), along the token axis. Anything
else keeps its shape, even one that looks like a token axis: multi-label targets [batch,
K] with K labels equal to max_seq_length are not cut.
"""

import tensorflow as tf

from bert_tf.base.graph_calls import not_inlined
from bert_tf.base.input_names import INPUT_NAMES, PADDING_MASK

MODES = ("longest", "sort", "bucket", "off")
MULTIPLE = 8
SORT_WINDOW_BATCHES = 50
# sort's key: the width an example is cut to (False: its exact length, the order before,
# which bench/batching_accuracy.py still measures).
SORT_BY_WIDTH = True


def example_lengths(mask):
    """Padding mask [batch, ..., seq] -> [batch]: each example's last real position (the
    longest of its sequences: SWAG's choices)."""
    seq = tf.shape(mask)[-1]
    return tf.reduce_max(tf.where(mask > 0, tf.range(1, seq + 1), 0),
                         axis=list(range(1, len(mask.shape))))


def rounded_width(length, seq, multiple=MULTIPLE):
    """length rounded up to a multiple of `multiple`, at least `multiple`, at most seq."""
    return tf.minimum(seq, tf.maximum(multiple, (length + multiple - 1) // multiple * multiple))


def trim_to_longest(features, multiple=MULTIPLE):
    """Packed features [..., seq] -> [..., width]: width is the last real position of any
    sequence (padding_mask > 0), rounded up to `multiple`, at most seq (and `multiple` for
    an empty batch)."""
    width = _batch_width(features[PADDING_MASK], multiple)
    return {name: value[..., :width] for name, value in features.items()}


def _batch_width(mask, multiple):
    # reduce_max of an empty batch is the lowest int: rounded_width makes it `multiple`.
    return rounded_width(tf.reduce_max(example_lengths(mask)), tf.shape(mask)[-1], multiple)


def _element(args):
    """A tf.data map function's arguments -> the element (a tuple or the one value)."""
    return args if len(args) > 1 else args[0]


def _inputs(element):
    return element[0] if isinstance(element, tuple) else element


def trim_batch(element, multiple=MULTIPLE, per_token=()):
    """trim_to_longest on a dataset element (inputs, labels...[, weights]), by name: the
    inputs' token_ids, segment_ids and padding_mask, and every entry named in
    `per_token` (in any dict of the element), are cut along the token axis (the padding
    mask's last) to one width; every other tensor is left as it is, whatever its shape."""
    mask = _inputs(element)[PADDING_MASK]
    width = _batch_width(mask, multiple)
    axis = len(mask.shape) - 1
    cut_names = set(INPUT_NAMES) | set(per_token)

    def cut(name, x):
        rank, seq = x.shape.rank, mask.shape[axis]
        if rank is not None and (rank <= axis or None not in (x.shape[axis], seq) and
                                 x.shape[axis] != seq):
            raise ValueError(f"length batching: {name!r} is named per-token but its shape "
                             f"{x.shape} has no token axis {axis} of the padding mask's "
                             f"{mask.shape}")
        return x[(slice(None),) * axis + (slice(None, width),)]

    def walk(value):
        if isinstance(value, dict):
            return {name: cut(name, x) if name in cut_names and not isinstance(x, dict)
                    else walk(x) for name, x in value.items()}
        if isinstance(value, (tuple, list)):
            return type(value)(walk(x) for x in value)
        return value
    return walk(element)


def batch(dataset, batch_size, mode, max_seq_length, drop_remainder=False,
          multiple=MULTIPLE, seed=None, per_token=()):
    """Batches an unbatched dataset of (inputs, ...) examples packed to max_seq_length,
    by `mode` (see the module docstring); seed: of sort's shuffle of batches; per_token:
    the names of the entries beside the inputs cut with them (`trim_batch`)."""
    if mode not in MODES:
        raise ValueError(f"length batching must be one of {MODES}, got {mode!r}")
    if mode == "sort":
        def sort_window(*window):
            element = _element(window)
            mask = _inputs(element)[PADDING_MASK]
            key = example_lengths(mask)
            if SORT_BY_WIDTH:
                key = rounded_width(key, tf.shape(mask)[-1], multiple)
            order = tf.argsort(key, stable=True)                        # [window]
            ordered = tf.nest.map_structure(lambda x: tf.gather(x, order), element)
            return tf.data.Dataset.from_tensor_slices(ordered).batch(
                batch_size, drop_remainder=drop_remainder).shuffle(
                    SORT_WINDOW_BATCHES, seed=seed)
        dataset = dataset.batch(batch_size * SORT_WINDOW_BATCHES).flat_map(sort_window)
    elif mode == "bucket":
        boundaries = list(range(multiple + 1, max_seq_length + 1, multiple))
        dataset = dataset.bucket_by_sequence_length(
            lambda *element: example_lengths(
                _inputs(_element(element))[PADDING_MASK][None])[0],
            bucket_boundaries=boundaries,
            bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
            drop_remainder=drop_remainder)
    else:
        dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    if mode == "off":
        return dataset
    return dataset.map(lambda *element: trim_batch(_element(element), multiple, per_token),
                       num_parallel_calls=tf.data.AUTOTUNE)


def rebatch(dataset, batch_size, mode, max_seq_length, drop_remainder=False,
            multiple=MULTIPLE, seed=None, per_token=()):
    """`batch` for a dataset whose elements are already batches packed to max_seq_length
    (pipelines that tokenize a whole batch of strings at once): off leaves it, longest
    cuts each batch, sort and bucket regroup the examples by length first."""
    if mode == "off":
        return dataset
    if mode == "longest":
        return dataset.map(
            lambda *element: trim_batch(_element(element), multiple, per_token),
            num_parallel_calls=tf.data.AUTOTUNE)
    return batch(dataset.unbatch(), batch_size, mode, max_seq_length, drop_remainder,
                 multiple, seed, per_token)


def finish(dataset, buffer=2):
    """The last step of a fine-tuning pipeline: `buffer` batches prefetched, tf.data's
    autotuning off.

    Autotuning runs a model of the pipeline in background threads. On a small CPU it
    takes cores from the training step (steps at width 16 of MiniLM took 0.45 s with it,
    0.35 s without), and deleting an iterator can wait seconds for its optimisation pass
    to end (4 s per epoch of 8 steps, measured by timing `del iterator`). Tokenizing a
    batch here costs a few ms, so a fixed prefetch keeps the step fed. Parallel maps
    (`num_parallel_calls=AUTOTUNE`) then use as many calls as there are CPU cores.
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.prefetch(buffer).with_options(options)


def map_chunks(fn, elements, chunk):
    """Feature building in tf.data: `elements` (what `from_tensor_slices` takes: arrays,
    string tensors, RaggedTensors, a dict or tuple of them) cut into batches of `chunk`
    rows, `fn` (TensorFlow ops) run on each, several batches at once (tf.data's parallel
    map, AUTOTUNE'd to the CPU's cores), outputs yielded in the input order as eager
    tensors. At most a few batches' outputs are in memory at a time (NER's and SQuAD's
    training features: their files' texts to windows). Elements of one batch or less
    run `fn` eagerly instead: tracing it for tf.data costs more than a small batch (a
    few raw texts) takes."""
    if tf.nest.flatten(elements)[0].shape[0] <= chunk:
        as_tensor = lambda x: x if isinstance(x, tf.RaggedTensor) else tf.convert_to_tensor(x)
        yield fn(tf.nest.map_structure(as_tensor, elements))
        return
    dataset = tf.data.Dataset.from_tensor_slices(elements).batch(chunk)
    # Plain ops: AutoGraph's rewrite of the functions it calls costs seconds to trace.
    fn = tf.autograph.experimental.do_not_convert(fn)
    yield from dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE,
                           deterministic=True).prefetch(1)


def map_chunks_joined(fn, elements, chunk):
    """`map_chunks` of an `fn` that returns a dict of tensors -> the dict of NumPy arrays,
    every batch's joined along the first axis."""
    import numpy as np
    parts = {}
    for out in map_chunks(fn, elements, chunk):
        for key, value in out.items():
            parts.setdefault(key, []).append(value.numpy())
    return {key: np.concatenate(value) for key, value in parts.items()}


def pad_to_width(x, width, axis, value=0):
    """Pads axis `axis` of x with `value` up to `width` (the inverse of trim_to_longest)."""
    paddings = [[0, 0]] * len(x.shape)
    paddings[axis] = [0, width - tf.shape(x)[axis]]
    return tf.pad(x, paddings, constant_values=tf.cast(value, x.dtype))


# One model call costs about this many tokens of work besides its tokens (the weights are
# read once per call: ~30 ms for BERT-base fp32 on 2 CPU cores, ~32 tokens' worth).
CALL_OVERHEAD_TOKENS = 32
# At most this many tokens (rows x width) go into one model call: the activations of a
# call grow with it (BERT-base at width 384: ~60 KB a token, ~120 MB a call), so a request
# of thousands of windows (a long SQuAD context) runs in calls of bounded memory. The
# per-call overhead is then about 1.5% of a full call. A full batch of 32 x 128 tokens is
# two calls: where the calls can run side by side (below), two cores each run one.
MAX_CALL_TOKENS = 2048
# At most this many calls are under way at once. A loop iteration whose model reads no
# variables (an export with --freeze_weights) may start before the one before it ends;
# with TensorFlow's intra-op pool at one thread (TF Serving's
# --tensorflow_intra_op_parallelism=1) that is what keeps every core busy on a batch
# (docs/serving.md, "Threads"). Memory stays within PARALLEL_CALLS x MAX_CALL_TOKENS
# tokens' activations.
PARALLEL_CALLS = 4


def run_by_length(fn, features, per_token=(), overhead_tokens=CALL_OVERHEAD_TOKENS,
                  multiple=MULTIPLE, max_call_tokens=MAX_CALL_TOKENS):
    """fn(features) on length-sorted sub-batches, each cut to its own longest sequence;
    in the graph (serving signatures).

    Padding a whole batch to its longest text (what HF's pipeline does) makes one long
    text cost the batch its width. Here examples are sorted by length and split where it
    pays: from each start, the sub-batch that minimises (overhead_tokens + rows x width)
    per row is taken, so equal lengths stay one call and a few long texts get calls of
    their own; no call takes more than max_call_tokens tokens (rows x examples' sequences
    x width; at least one row) and at most PARALLEL_CALLS calls are under way at once, so
    memory does not grow with the batch. Real tokens
    attend only to real tokens, so the outputs equal one call on the whole batch padded
    to its width.

    features: {name: [batch, ..., seq]}; fn returns {name: [rows, ...]}. Outputs come
    back in the input order; those named in `per_token` (a token axis where the features
    have it) are padded back to seq with 0.
    """
    # One text (the batch of a server that answers each request as it comes) is one call
    # at its own width; in a graph the sorted path, and the model in its loop, are call
    # nodes that one text does not walk through (bert_tf/base/graph_calls.py).
    model = not_inlined(fn)
    mask = features[PADDING_MASK]
    shapes = {}

    def one_call():
        out = _per_token_padded(fn(trim_to_longest(features, multiple)), per_token, mask)
        shapes.update({k: v.shape for k, v in out.items()})
        return out

    sorted_calls = not_inlined(lambda features: _run_sorted(
        model, features, per_token, overhead_tokens, multiple, max_call_tokens))
    out = tf.cond(tf.shape(mask)[0] <= 1, one_call, lambda: sorted_calls(features))
    # The sorted calls come back through a function call and a TensorArray, which keep
    # no static shape: the outputs have one_call's (fn's own: [batch, K] stays [batch,
    # K]), so a signature declares the shapes it answers with.
    for name, value in out.items():
        if name in shapes:        # eagerly, one branch ran and its shapes are whole
            value.set_shape(shapes[name])
    return out


def _per_token_padded(out, per_token, mask):
    """fn's outputs, those named in per_token padded back to the features' width (static
    where the features' is: a text signature's max_seq_length)."""
    axis = len(mask.shape) - 1
    padded = {}
    for k, v in out.items():
        if k in per_token:
            v = pad_to_width(v, tf.shape(mask)[-1], axis=axis)
            if v.shape.rank is not None:
                shape = v.shape.as_list()
                shape[axis] = mask.shape[-1]
                v.set_shape(shape)
        padded[k] = v
    return padded


def _run_sorted(fn, features, per_token, overhead_tokens, multiple, max_call_tokens):
    mask = features[PADDING_MASK]
    n, seq = tf.shape(mask)[0], tf.shape(mask)[-1]
    width = rounded_width(example_lengths(mask), seq, multiple)            # [batch]
    order = tf.argsort(width, stable=True)
    widths = tf.gather(width, order)                                       # ascending
    ordered = {k: tf.gather(v, order) for k, v in features.items()}
    rows_per_example = tf.cast(tf.reduce_prod(tf.shape(mask)[1:-1]), tf.float32)  # SWAG: C

    def chunk(i):
        """[i, j) and its width: the sub-batch from i with the least cost per row, within
        max_call_tokens (only those ends are scored, so a long batch costs linear time)."""
        # Widths ascend, so rows of the width at i bound how far a call can reach.
        narrowest = tf.cast(tf.gather(tf.concat([widths, [multiple]], 0), i), tf.float32)
        room = tf.cast(max_call_tokens, tf.float32) / (rows_per_example * narrowest)
        last = tf.minimum(n, i + tf.maximum(1, tf.cast(room, tf.int32)))
        j = tf.range(i + 1, last + 1)
        rows = tf.cast(j - i, tf.float32)
        tokens = rows * rows_per_example * tf.cast(tf.gather(widths, j - 1), tf.float32)
        cost = tf.where((tokens > max_call_tokens) & (j > i + 1), float("inf"),
                        (overhead_tokens + tokens) / rows)
        end = tf.cond(n > i, lambda: i + 1 + tf.argmin(cost, output_type=tf.int32),
                      lambda: n)
        w = tf.cond(end > i, lambda: tf.gather(widths, end - 1), lambda: multiple)
        return end, w

    def run(i, end, w):
        return _per_token_padded(fn({k: v[i:end, ..., :w] for k, v in ordered.items()}),
                                 per_token, mask)

    # The first sub-batch outside the loop gives the outputs' names and dtypes; a batch
    # of equal lengths ends there.
    end, w = chunk(0)
    first = run(0, end, w)
    names = sorted(first)
    arrays = [tf.TensorArray(first[k].dtype, size=0, dynamic_size=True, infer_shape=False)
              .write(0, first[k]) for k in names]

    def body(i, step, arrays):
        end, w = chunk(i)
        out = run(i, end, w)
        return end, step + 1, [a.write(step, out[k]) for a, k in zip(arrays, names)]

    _, _, arrays = tf.while_loop(lambda i, step, arrays: i < n, body, (end, 1, arrays),
                                 parallel_iterations=PARALLEL_CALLS)
    inverse = tf.math.invert_permutation(order)
    return {k: tf.gather(a.concat(), inverse) for k, a in zip(names, arrays)}
