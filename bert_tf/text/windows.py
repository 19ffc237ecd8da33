"""Windows over a sequence longer than the model, as google-research/bert's run_squad.py
makes them (`doc_stride`), for units of one piece (SQuAD's context pieces, a windowed
classifier's and extract_features' pieces) or of several (NER's words, never cut across),
in TensorFlow ops: the one definition that training's feature builders (NER, SQuAD,
classification's tf.data), the exported signatures and extract_features run.

* `windows`: from a row's first unit, as many whole units as fit in `room` pieces; the
  next window starts at the first unit at least `stride` pieces after the previous
  start, never past its end, until one reaches the row's last unit. A stride of `room`
  or more (or None) gives consecutive parts.
* `max_context`: a unit in several windows is read from the one where the least of the
  pieces before and after its first piece, plus a hundredth of the window's pieces, is
  largest (`_check_is_max_context`), the earlier window on a tie.

The module itself is TF-free (TensorFlow is imported by the two ops when they run), so
that the commands' flags name the poolings and check `--doc_stride` before TensorFlow
loads. tests/span_oracles.py keeps the rule in plain Python, as the tests' oracle.
"""

# How a text read in windows gets one answer from its windows' logits (classification,
# multi-label): their mean, or their maximum (bert_tf.models.task_layers.pool_windows).
# Here, TF-free, so that the commands' flags name them before TensorFlow loads.
WINDOW_POOLINGS = ("mean", "max")


def default_doc_stride(max_seq_length):
    """A training run's doc_stride unless given (NER, classification): half a window's
    pieces, so that every unit of a long text is read where it has a quarter window of
    context on each side (or the text's end)."""
    return max(1, (max_seq_length - 2) // 2)


def check_doc_stride(doc_stride, max_seq_length, flag="--doc_stride"):
    """ValueError when `doc_stride` (None: not given) is more than a window of
    max_seq_length holds (max_seq_length - 2 pieces, [CLS] and [SEP] aside): `windows`
    starts the next window at the previous one's end then, so the flag would not say
    what the run does. The families whose window has that room (classification,
    multi-label, NER) and extract_features call it on their flags."""
    room = max_seq_length - 2
    if doc_stride is not None and room >= 1 and doc_stride > room:
        raise ValueError(f"{flag}={doc_stride}: more than a window holds ({room} pieces: "
                         f"--max_seq_length={max_seq_length} less [CLS] and [SEP]); "
                         f"windows would start {room} pieces apart, not {doc_stride}, "
                         f"leaving no overlap: give at most {room}")


def windows(row_first, row_end, room, stride=None, piece_splits=None, max_windows=0,
            empty_window=False):
    """The windows of many rows at once (the module docstring's rule).

    row_first, row_end: int64 [rows], each row's units (indexes of units, end exclusive;
    rows may share units). piece_splits: int64 [units + 1], where each unit's pieces
    start (every unit at least one piece, at most `room`); None: units of one piece.
    room: int or int64 [rows], the pieces a window holds; stride: int (None: room).
    max_windows: at most this many windows a row (0: no limit). empty_window: a row of
    no units gets one window of none (first = end = its first unit); otherwise none.
    Returns (row, first, end): int64 [windows], each window's row and units (end
    exclusive), by row, then in order."""
    import tensorflow as tf
    if any(isinstance(value, int) and value < 1 for value in (room, stride)):
        raise ValueError(f"windows: room and stride must be >= 1, got {room} and {stride}")
    row_first = tf.convert_to_tensor(row_first, tf.int64)
    row_end = tf.convert_to_tensor(row_end, tf.int64)
    room = tf.broadcast_to(tf.cast(room, tf.int64), tf.shape(row_first))
    stride = room if stride is None else tf.minimum(tf.cast(stride, tf.int64), room)
    rows = tf.range(tf.size(row_first, out_type=tf.int64))
    empty = tf.equal(row_first, row_end) & tf.constant(bool(empty_window))
    if piece_splits is None:
        # Units of one piece: the k-th window starts k strides in.
        n = row_end - row_first
        zero = tf.zeros_like(n)
        count = tf.where(n > 0, 1 + (tf.maximum(n - room, 0) + stride - 1) // stride, zero)
        count = tf.where(empty, zero + 1, count)
        if max_windows:
            count = tf.minimum(count, tf.constant(max_windows, tf.int64))
        k = tf.ragged.range(count)                                     # [rows, (windows)]
        row = tf.repeat(rows, count)
        first = tf.gather(row_first, row) + k.flat_values * tf.gather(stride, row)
        end = tf.minimum(first + tf.gather(room, row), tf.gather(row_end, row))
        return row, first, end

    piece_splits = tf.convert_to_tensor(piece_splits, tf.int64)
    most = tf.constant(max_windows or -1, tf.int64)

    def body(position, made, row, firsts, ends):
        active = position < row_end
        start = tf.gather(piece_splits, position)
        fits = tf.searchsorted(piece_splits, start + room, side="right",
                               out_type=tf.int64) - 1
        end = tf.minimum(tf.maximum(fits, position + 1), row_end)
        following = tf.searchsorted(piece_splits, start + stride, side="left",
                                    out_type=tf.int64)
        following = tf.maximum(position + 1, tf.minimum(following, end))
        row = tf.concat([row, tf.boolean_mask(rows, active)], 0)
        firsts = tf.concat([firsts, tf.boolean_mask(position, active)], 0)
        ends = tf.concat([ends, tf.boolean_mask(end, active)], 0)
        made = made + 1
        done = (end >= row_end) | tf.equal(made, most)
        return tf.where(active & ~done, following, row_end), made, row, firsts, ends

    unknown = tf.TensorShape([None])
    _, _, row, first, end = tf.while_loop(
        lambda position, *_: tf.reduce_any(position < row_end), body,
        (row_first, tf.constant(0, tf.int64), tf.boolean_mask(rows, empty),
         tf.boolean_mask(row_first, empty), tf.boolean_mask(row_first, empty)),
        shape_invariants=(unknown, tf.TensorShape([]), unknown, unknown, unknown))
    order = tf.argsort(row, stable=True)       # each row's windows in the order made
    return tf.gather(row, order), tf.gather(first, order), tf.gather(end, order)


def max_context(row, first, end, row_first, row_end, piece_splits=None):
    """Where each unit is read: the window (of `windows`' row, first, end) where it has
    the most context (the module docstring's rule). row_first, row_end, piece_splits:
    as given to `windows`.

    Returns (best, chosen): best int64 [sum of the rows' units]: for the units of each
    row in turn, the index of their window (int64 max for a unit in none); chosen bool,
    one per (window, unit) pair in the order of tf.ragged.range(first, end).flat_values:
    whether the window is the unit's."""
    import tensorflow as tf

    from bert_tf.text.graph_words import row_ids
    row_first = tf.convert_to_tensor(row_first, tf.int64)
    row_end = tf.convert_to_tensor(row_end, tf.int64)
    spans = tf.ragged.range(first, end)                                # [windows, (units)]
    window = row_ids(spans.row_splits)                                 # [pairs]
    unit = spans.flat_values
    owner = tf.gather(row, window)
    row_units = row_end - row_first
    key = unit - tf.gather(row_first, owner) + \
        tf.gather(tf.cumsum(row_units, exclusive=True), owner)         # [pairs]
    n_keys = tf.reduce_sum(row_units)
    pieces = (lambda x: x) if piece_splits is None else \
        (lambda x: tf.gather(piece_splits, x))
    start = pieces(tf.gather(first, window))
    stop = pieces(tf.gather(end, window))
    at = pieces(unit)
    context = tf.cast(tf.minimum(at - start, stop - 1 - at), tf.float64) + \
        0.01 * tf.cast(stop - start, tf.float64)
    best_score = tf.math.unsorted_segment_max(context, key, n_keys)
    candidates = tf.where(tf.equal(context, tf.gather(best_score, key)), window,
                          tf.int64.max)
    best = tf.math.unsorted_segment_min(candidates, key, n_keys)
    return best, tf.equal(tf.gather(best, key), window)


def row_windows(units, room, stride=None, unit_pieces=None, empty_window=False,
                chunk=4096):
    """`windows` and `max_context` run eagerly, `chunk` rows a call, for the feature
    builders of training (NER's sentences, SQuAD's questions), as Python lists.

    units: int [rows], each row's units; unit_pieces: int [sum of units], each unit's
    pieces (None: one each); room: int or int [rows]; stride, empty_window: `windows`'.
    Returns per row (spans, best, chosen): spans, a list of (first, end) unit indexes in
    the row; best, int64 [its units]: each unit's window (an index into spans); chosen,
    per window bool [its units]: the units whose max context is there."""
    import numpy as np
    units = np.asarray(units, np.int64)
    room = np.broadcast_to(np.asarray(room, np.int64), units.shape)
    unit_splits = np.concatenate([[0], np.cumsum(units)]).astype(np.int64)
    out = []
    for lo in range(0, len(units), chunk):
        hi = min(lo + chunk, len(units))
        base = unit_splits[lo]
        row_first, row_end = unit_splits[lo:hi] - base, unit_splits[lo + 1:hi + 1] - base
        piece_splits = None if unit_pieces is None else np.concatenate(
            [[0], np.cumsum(unit_pieces[base:unit_splits[hi]])]).astype(np.int64)
        row, first, end = windows(row_first, row_end, room[lo:hi], stride, piece_splits,
                                  empty_window=empty_window)
        best, chosen = max_context(row, first, end, row_first, row_end, piece_splits)
        row, first, end, best, chosen = (x.numpy() for x in (row, first, end, best, chosen))
        window_splits = np.searchsorted(row, np.arange(hi - lo + 1)).tolist()
        pair_splits = np.concatenate([[0], np.cumsum(end - first)]).tolist()
        spans = list(zip((first - row_first[row]).tolist(), (end - row_first[row]).tolist()))
        unit_splits_here = np.concatenate([row_first, row_end[-1:]]).tolist()
        for r in range(hi - lo):
            a, b = window_splits[r], window_splits[r + 1]
            out.append((spans[a:b], best[unit_splits_here[r]:unit_splits_here[r + 1]] - a,
                        [chosen[pair_splits[w]:pair_splits[w + 1]] for w in range(a, b)]))
    return out
