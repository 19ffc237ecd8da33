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
* `pair_windows` (SQuAD: [CLS] question [SEP] window [SEP]) and `unit_windows` (NER:
  [CLS] window of whole words [SEP]): the two layouts built on them and packed by
  `BertPacker`, each run by its family's training features (in tf.data,
  batching.map_chunks) and by its signature.

The module itself is TF-free (TensorFlow is imported by the ops when they run), so
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


def pair_windows(packer, first_segment, pieces, stride):
    """[CLS] A [SEP] window [SEP] rows over pieces longer than the model: SQuAD's question
    and its context's windows, the one definition for its features and its signature.

    packer: a bert_tf.text.packing.BertPacker; first_segment: int RaggedTensor [batch,
    (a)], A (already cut: a question at max_query_length); pieces: int RaggedTensor
    [batch, (p)], each row's pieces (units of one piece). Each row's windows are
    `windows` of packer.seq_length - len(A) - 3 pieces, `stride` apart (a row without
    pieces has none), and each piece is read where `max_context` says.

    Returns (features, layout): features, the packer's dict of int32 [N, seq]; layout:
    "example" int64 [N] (each window's row), "in_doc" bool [N, seq] (the columns
    holding window pieces), "piece" int64 [N, seq] (the index in pieces.flat_values of
    the piece at each column, 0 elsewhere), "max_context" bool [N, seq] (the pieces read
    in this window)."""
    import tensorflow as tf

    from bert_tf.text.graph_words import row_ids
    seq = packer.seq_length
    first_segment = first_segment.with_row_splits_dtype(tf.int64)
    pieces = pieces.with_row_splits_dtype(tf.int64)
    a_length = first_segment.row_lengths()                               # [batch]
    row_first, row_end = pieces.row_splits[:-1], pieces.row_splits[1:]
    example, first, last = windows(row_first, row_end, seq - a_length - 3, stride)
    n = tf.size(example, out_type=tf.int64)

    col = tf.range(seq, dtype=tf.int64)[None, :]                         # [1, seq]
    doc_offset = tf.gather(a_length, example)[:, None] + 2               # [CLS] A [SEP]
    in_doc = (col >= doc_offset) & (col < doc_offset + (last - first)[:, None])
    piece = tf.where(in_doc, first[:, None] + col - doc_offset, 0)       # [N, seq]
    spans = tf.ragged.range(first, last)                                 # [N, (pieces)]
    # The window fits: its room leaves A its place.
    features = packer(tf.gather(first_segment, example),
                      tf.gather(pieces.flat_values, spans))
    # Each piece's window (the first on ties), placed at its column.
    _, chosen = max_context(example, first, last, row_first, row_end)
    window = row_ids(spans.row_splits)                                   # [pairs]
    column = tf.gather(doc_offset[:, 0] - first, window) + spans.flat_values
    read_here = tf.scatter_nd(tf.stack([window, column], 1), chosen,
                              tf.stack([n, tf.constant(seq, tf.int64)]))
    return features, {"example": example, "in_doc": in_doc, "piece": piece,
                      "max_context": read_here}


def unit_windows(packer, unit_pieces, stride, unk_id, empty_window=False):
    """[CLS] window [SEP] rows of whole units (NER's words) over rows longer than the
    model, the one definition for NER's features and its signature.

    packer: a bert_tf.text.packing.BertPacker; unit_pieces: int RaggedTensor [rows,
    (units), (pieces)], each unit's pieces (a unit of none becomes one `unk_id`, one of
    more than a window holds is cut to packer.seq_length - 2). Each row's windows are
    `windows` of whole units, `stride` pieces apart (a row of no units: one empty
    window with empty_window, as training labels an empty sentence; else none), and
    each unit is read where `max_context` says.

    Returns (features, layout): features, the packer's dict of int32 [N, seq]; layout:
    "row", "first", "end" int64 [N] (each window's row and its units, global indexes,
    end exclusive), "piece_splits" int64 [units + 1] (where each unit's pieces start),
    "part" int64 [units] (the window each unit is read from), "position" int64 [units]
    (its first piece's column there)."""
    import tensorflow as tf

    room = packer.seq_length - 2
    unit_pieces = unit_pieces.with_row_splits_dtype(tf.int64)
    row_splits, pieces = unit_pieces.row_splits, unit_pieces.values       # [units, (p)]
    empty = tf.equal(pieces.row_lengths(), 0)
    unk = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(tf.cast(empty, tf.int32))], tf.cast(unk_id, pieces.dtype)),
        tf.cast(empty, tf.int64), validate=False)
    pieces = tf.concat([pieces, unk], axis=1)[:, :room]
    piece_splits = pieces.row_splits                                       # [units + 1]
    row_first, row_end = row_splits[:-1], row_splits[1:]
    row, first, end = windows(row_first, row_end, room, stride, piece_splits,
                              empty_window=empty_window)
    window_pieces = tf.ragged.range(tf.gather(piece_splits, first),
                                    tf.gather(piece_splits, end))          # [N, (pieces)]
    features = packer(tf.gather(pieces.flat_values, window_pieces))
    part, _ = max_context(row, first, end, row_first, row_end, piece_splits)
    units = tf.range(tf.size(piece_splits, out_type=tf.int64) - 1)
    position = 1 + tf.gather(piece_splits, units) - \
        tf.gather(piece_splits, tf.gather(first, part))
    return features, {"row": row, "first": first, "end": end,
                      "piece_splits": piece_splits, "part": part, "position": position}
