"""What a request is checked for before the model runs, as graph ops (Assert ops whose
messages name the input): shapes and ranks as fed at run time, equal batch sizes, text
lengths, ids inside the model's tables and a 0/1 padding mask. `after(checks, x)` makes
`x` wait for them, so a bad input fails with that message, not in whichever op meets it
first. Used by every serving module (export/serving.py's `ServingModule` and those built on it).
"""

import tensorflow as tf


def after(checks, tensor):
    """`tensor`, computed only once `checks` have passed (a graph runs independent ops in
    any order: without the dependency a bad input fails in whichever op meets it first,
    with a message that names no input)."""
    with tf.control_dependencies(checks if isinstance(checks, list) else [checks]):
        return tf.identity(tensor)


def runtime_shape(x):
    """x's shape [rank] as fed at run time (tf.shape becomes a constant where the traced
    shape is fully known)."""
    return tf.raw_ops.Shape(input=x, out_type=tf.int32)


def runtime_rank(x):
    """x's rank as fed at run time. A signature's caller can feed a tensor of any rank
    (loaded signatures do not check, nor does a session), while tf.rank, and grappler
    folding the Rank op, answer the traced rank: the check would vanish. The entries of
    the shape are counted through tf.where, whose size is data, so it stays."""
    return tf.shape(tf.where(runtime_shape(x) >= 0), out_type=tf.int32)[0]


def shape_text(shape):
    """int32 [rank] -> tf.string "[2,3]"."""
    return tf.strings.join(["[", tf.strings.reduce_join(tf.strings.as_string(shape),
                                                        separator=","), "]"])


def check_shape(x, expected, name, what):
    """Assert op: x has the `expected` shape (a TensorShape or list; None = any size):
    "context: expected a 1-D batch of strings, got shape [2,3]"."""
    expected = tf.TensorShape(expected)
    dims = [-1 if d is None else d for d in expected.as_list()]
    shape = runtime_shape(x)
    rank_ok = tf.equal(runtime_rank(x), len(dims))
    fixed = [(i, d) for i, d in enumerate(dims) if d >= 0]
    # Dimensions are compared only when the rank is right (else they may not exist).
    ok = rank_ok
    if fixed:
        ok = tf.cond(rank_ok, lambda: tf.reduce_all([tf.equal(shape[i], d) for i, d in fixed]),
                     lambda: False)
    if len(dims) == 1:
        described = f"a 1-D batch of {what}"
    else:
        described = f"{what} of shape [" + ", ".join(
            ["batch"] + [str(d) if d >= 0 else "seq" for d in dims[1:]]) + "]"
    return tf.debugging.Assert(ok, [tf.strings.join(
        [f"{name}: expected {described}, got shape ", shape_text(shape)])])


def check_text_bytes(texts, limit, name):
    """Assert op: no text of `texts` is longer than `limit` bytes (int64 scalar, the
    export's --max_text_bytes), so what one text may cost in memory and time is bounded:
    "context: text of 1048577 bytes exceeds the export limit of 1048576 bytes
    (--max_text_bytes)". (Assert escapes quotes in its message, so it has none.)"""
    lengths = tf.cast(tf.reshape(tf.strings.length(texts), [-1]), tf.int64)
    longest = tf.reduce_max(tf.concat([lengths, [0]], 0))
    return tf.debugging.Assert(longest <= limit, [tf.strings.join([
        f"{name}: text of ", tf.strings.as_string(longest),
        " bytes exceeds the export limit of ", tf.strings.as_string(limit),
        " bytes (--max_text_bytes)"])])


def check_id_range(ids, limit, name, what):
    """Assert op: every id in [0, limit) ("token_ids: id -5 is outside [0, 119)
    (vocab_size of the model)"); names the smallest id when one is negative, else the
    largest."""
    low, high, bad = _extremes(ids)
    return tf.debugging.Assert((low >= 0) & (high < limit), [tf.strings.join([
        f"{name}: id ", tf.strings.as_string(bad),
        f" is outside [0, {limit}) ({what} of the model)"])])


def _extremes(values):
    """(smallest, largest, the one to name: the smallest when negative, else the
    largest) of an int tensor, 0 for an empty one."""
    flat = tf.reshape(values, [-1])
    low = tf.reduce_min(tf.concat([flat, [0]], 0))
    high = tf.reduce_max(tf.concat([flat, [0]], 0))
    return low, high, tf.where(low < 0, low, high)


def check_mask(mask, name):
    """Assert op: every value of `mask` is 0 or 1 ("padding_mask: value 2 is not 0
    (padding) or 1 (a token)"); names the smallest value when one is negative, else the
    largest."""
    low, high, bad = _extremes(mask)
    return tf.debugging.Assert((low >= 0) & (high <= 1), [tf.strings.join([
        f"{name}: value ", tf.strings.as_string(bad), " is not 0 (padding) or 1 (a token)"])])


def check_same_shape(features, names):
    """Assert op: every input named has the shape of the first."""
    first = runtime_shape(features[names[0]])
    checks = []
    for name in names[1:]:
        shape = runtime_shape(features[name])
        checks.append(tf.debugging.Assert(tf.reduce_all(tf.equal(first, shape)), [
            tf.strings.join([f"{names[0]} and {name}: shapes differ (", shape_text(first),
                             " and ", shape_text(shape), ")"])]))
    return checks


def check_same_batch(texts, names):
    """Assert ops: every input named has the batch size of the first ("question and
    context: batch sizes differ (2 and 3)")."""
    first = runtime_shape(texts[names[0]])[0]
    checks = []
    for name in names[1:]:
        other = runtime_shape(texts[name])[0]
        checks.append(tf.debugging.Assert(tf.equal(first, other), [tf.strings.join([
            f"{names[0]} and {name}: batch sizes differ (", tf.strings.as_string(first),
            " and ", tf.strings.as_string(other), ")"])]))
    return checks
