"""Words and character offsets of raw strings, in TensorFlow ops (for the span-producing
signatures: NER entities and SQuAD answers point back into the text they were given).

Offsets out of the signatures are *character* offsets (Unicode code points, end
exclusive), as Python's `text[start:end]` counts them, so they equal what
tasks/families/ner/ and tasks/families/squad/ compute in Python. Invalid UTF-8
bytes count as one character per invalid sequence (U+FFFD, the replacement Python's
`decode(errors="replace")` makes).
"""

import tensorflow as tf

def split_words(texts, whitespace, single_ranges=(), with_words=True):
    """texts: tf.string [batch] -> (words tf.string, begin, end int64 byte offsets), each a
    RaggedTensor [batch, (words)]: the maximal runs of characters not in `whitespace` (a
    str), where every character in `single_ranges` (inclusive (first, last) code point
    ranges, sorted and disjoint) is a word of its own: google's BasicTokenizer cut when
    given bert_tf.text.words' separators and ranges. Done on code points rather than with
    a regex op: tf-text's regex_split stops at a NUL byte. with_words False: words None
    (the offsets alone, without a string per byte of the texts)."""
    chars, starts = tf.strings.unicode_decode_with_offsets(texts, "UTF-8", errors="replace")
    chars = chars.with_row_splits_dtype(tf.int64)
    starts = starts.with_row_splits_dtype(tf.int64)
    cps, splits = chars.flat_values, chars.row_splits                      # [C], [batch + 1]
    n = tf.size(cps, out_type=tf.int64)
    rows = row_ids(splits)                                                 # [C]
    # A sorted lookup, not a [C, separators] comparison: memory stays a few bytes a character.
    table = tf.constant(sorted({ord(c) for c in whitespace}), tf.int32)   # [S]
    slot = tf.minimum(tf.searchsorted(table, cps), tf.size(table) - 1)     # [C]
    space = tf.equal(tf.gather(table, slot), cps)                          # [C]
    if single_ranges:
        lows = tf.constant([lo for lo, _ in single_ranges], tf.int32)
        highs = tf.constant([hi for _, hi in single_ranges], tf.int32)
        k = tf.searchsorted(lows, cps, side="right") - 1                   # [C] range
        alone = (k >= 0) & (cps <= tf.gather(highs, tf.maximum(k, 0)))
    else:
        alone = tf.zeros_like(space)
    # A word ends after a separator or a single-character word, and before one.
    cut = space | alone
    index = tf.range(n)
    first = tf.equal(index, tf.gather(splits, rows))
    last = tf.equal(index + 1, tf.gather(splits, rows + 1))
    cut_before = tf.concat([[True], cut], 0)[:-1] | first | alone
    cut_after = tf.concat([cut, [True]], 0)[1:] | last | alone
    word_first = tf.where(~space & cut_before)[:, 0]                     # [words]
    word_last = tf.where(~space & cut_after)[:, 0]
    # A word ends where its next character starts (or at the end of the text).
    line_bytes = tf.cast(tf.strings.length(texts), tf.int64)
    next_start = tf.concat([starts.flat_values, [0]], 0)[1:]
    char_end = tf.where(last, tf.gather(line_bytes, rows), next_start)     # [C]
    begin = tf.gather(starts.flat_values, word_first)
    end = tf.gather(char_end, word_last)
    word_rows = tf.gather(rows, word_first)
    nrows = tf.shape(texts, out_type=tf.int64)[0]
    ragged = lambda values: tf.RaggedTensor.from_value_rowids(values, word_rows, nrows=nrows,
                                                              validate=False)
    words = ragged(substrings(texts, word_rows, begin, end)) if with_words else None
    return words, ragged(begin), ragged(end)


def word_pieces(tokenizer, texts, whitespace):
    """texts: tf.string [batch] -> (pieces int RaggedTensor [batch, (pieces)], begin, end
    int64 RaggedTensors of the same shape: each piece's byte offsets into its text): the
    words between `whitespace` characters (`split_words`), each tokenized alone (exact
    for google's tokenizer: run_squad's contexts), their pieces in text order. The one
    definition of SQuAD's context pieces, for its features and its signature."""
    words, word_begin, _ = split_words(texts, whitespace)
    words = words.with_row_splits_dtype(tf.int64)
    pieces, piece_begin, piece_end = tokenizer.tokenize_with_offsets(words.flat_values)
    pieces = pieces.with_row_splits_dtype(tf.int64)                        # [W, (pieces)]
    base = tf.gather(word_begin.flat_values, row_ids(pieces.row_splits))   # [P]
    text_splits = tf.gather(pieces.row_splits, words.row_splits)           # [batch + 1]
    ragged = lambda values: tf.RaggedTensor.from_row_splits(values, text_splits,
                                                            validate=False)
    return (ragged(pieces.flat_values), ragged(base + piece_begin.flat_values),
            ragged(base + piece_end.flat_values))


def row_ids(row_splits):
    """Row of each value of a ragged tensor with these row splits ([n] int64). (O(n log
    rows); RaggedTensor.value_rowids builds a [rows, longest row] mask.)"""
    n = row_splits[-1]
    return tf.searchsorted(row_splits[1:], tf.range(n, dtype=row_splits.dtype), side="right",
                           out_type=row_splits.dtype)


def byte_to_char(texts, rows, byte_offsets):
    """Byte offsets into texts[rows] -> character offsets. texts: tf.string [batch]; rows,
    byte_offsets: int64 [n] (offsets on character boundaries, or the text's length)."""
    _, starts = tf.strings.unicode_decode_with_offsets(texts, "UTF-8", errors="replace")
    line_bytes = tf.cast(tf.strings.length(texts), tf.int64)              # [batch]
    base = tf.cumsum(line_bytes, exclusive=True)                          # [batch]
    starts = starts.with_row_splits_dtype(tf.int64)
    # Every character's first byte, counted from the start of the first text: sorted.
    flat = starts.flat_values + tf.gather(base, row_ids(starts.row_splits))   # [chars]
    global_offsets = byte_offsets + tf.gather(base, rows)
    chars_before = tf.searchsorted(flat, global_offsets, side="left", out_type=tf.int64)
    return chars_before - tf.gather(starts.row_splits, rows)


def substrings(texts, rows, begin, end):
    """texts[rows][begin:end] in bytes: tf.string [n]. texts: tf.string [batch]; rows,
    begin, end: int64 [n].

    Joined from the bytes each span covers, so memory is linear in the texts and the
    spans: cutting `tf.gather(texts, rows)` would first copy a whole text per span (every
    word of a 1 MB text is a copy of 1 MB: quadratic)."""
    text_bytes = tf.strings.bytes_split(texts).with_row_splits_dtype(tf.int64)   # [batch, (B)]
    first = tf.gather(text_bytes.row_splits, rows) + begin                 # [n] global byte
    covered = tf.ragged.range(first, first + (end - begin))                # [n, (bytes)]
    # Joined by segment with `row_ids`: reduce_join on the ragged tensor would take its
    # value_rowids(), a [spans, longest span] mask (20,000 words beside one 100 KB word
    # in a batch: 2e9 entries).
    return tf.strings.unsorted_segment_join(
        tf.gather(text_bytes.flat_values, covered.flat_values),
        row_ids(covered.row_splits), tf.size(rows, out_type=tf.int64))


def pad_rows(values, rows, nrows, default):
    """Values [n] of rows [n] (sorted) -> dense [nrows, longest row], padded with default."""
    ragged = tf.RaggedTensor.from_value_rowids(values, rows, nrows=nrows, validate=False)
    return ragged.to_tensor(default_value=default)


def word_spans(texts, whitespace=None, single_ranges=None, chunk=2048):
    """Python strings -> per text, the (start, end) character offsets of its words, by
    `split_words` run eagerly `chunk` texts a call: training's word cut (NER's file
    sentences and raw texts, SQuAD's contexts), the signatures' own. whitespace None:
    google's BasicTokenizer cut (bert_tf.text.words' separators and single-character
    ranges); otherwise the words between `whitespace` characters (single_ranges too,
    if given)."""
    if whitespace is None:
        from bert_tf.text import words
        whitespace, single_ranges = words.separators(), words.single_character_ranges()
    out = []
    for lo in range(0, len(texts), chunk):
        batch = tf.constant([text.encode("utf-8") for text in texts[lo:lo + chunk]],
                            tf.string)
        _, begin, end = split_words(batch, whitespace, single_ranges or (), with_words=False)
        rows = row_ids(begin.row_splits)
        splits = begin.row_splits.numpy()
        starts = byte_to_char(batch, rows, begin.flat_values).numpy().tolist()
        ends = byte_to_char(batch, rows, end.flat_values).numpy().tolist()
        out.extend(list(zip(starts[a:b], ends[a:b])) for a, b in zip(splits, splits[1:]))
    return out
