"""Packing instances into fixed-length rows and choosing the masked-LM predictions,
vectorized over a batch of instances with numpy.

google's rules (REFERENCE.md): candidates are every position but [CLS] and [SEP];
num_to_predict = min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob)))
counting all tokens of the sequence; the chosen positions are a uniformly random subset
(google shuffles the candidates and takes them in order); each becomes [MASK] with
probability 0.8, a random vocabulary id (any id, as google draws) with 0.1, and stays with
0.1. Positions are reported sorted and padded with weight 0.

Whole-word masking takes whole words (a piece plus the '##' pieces after it) in random
order, skipping a word that would overshoot num_to_predict, as google does; the
80/10/10 choice is drawn once per word (google draws it per piece: a known bug). Here a
word never continues across [SEP] (google would glue a '##' piece that starts B to the last
word of A).

N-gram masking (max_ngram_size > 1) takes spans of n consecutive units (words with whole-word
masking, pieces otherwise) inside one segment (A or B; one document of a full-sentences
example), n drawn with probability proportional to 1/n
(as ALBERT and tensorflow/models do), also skipping spans that overshoot or overlap; the
80/10/10 choice is drawn once per span.
"""

import dataclasses

import numpy as np

from bert_tf.text.text_rules import (CLS_TOKEN, CONTINUATION_PREFIX, MASK_TOKEN, SEP_TOKEN,
                                     pair_layout)

# Decisions, as counted in the summary.
MASKED, RANDOM, KEPT = 0, 1, 2
# A position's uniform draw u decides: [MASK] below MASK_BELOW, unchanged below KEEP_BELOW,
# else a random id (the offline masker here and dynamic masking alike).
MASK_BELOW, KEEP_BELOW = 0.8, 0.9


def pack(tokens, a_start, a_len, b_start, b_len, max_seq_length, cls_id, sep_id):
    """Instances -> [N, max_seq_length] arrays: input_ids int32, segment_ids int8,
    input_mask bool, candidate bool (positions that may be masked), n_tokens int64 [N].
    The layout is `text_rules.pair_layout`'s, the graph packer's (BertPacker)."""
    # int32 throughout: a block holds far fewer than 2**31 tokens.
    p = np.arange(max_seq_length, dtype=np.int32)[None, :]      # [1, L]
    la = a_len.astype(np.int32)[:, None]                        # [N, 1]
    layout = pair_layout(p, la, b_len.astype(np.int32)[:, None])
    # Position p of A is tokens[a_start + p - 1]; of B, tokens[b_start + p - la - 2].
    source = p + np.where(p <= la, a_start.astype(np.int32)[:, None] - 1,
                          b_start.astype(np.int32)[:, None] - la - 2)
    text = layout.in_a | layout.in_b
    ids = tokens[np.where(text, source, 0)]
    ids[~text] = 0
    ids[:, 0] = cls_id
    ids[layout.is_sep] = sep_id
    input_mask = layout.real
    return (ids, layout.second_segment.astype(np.int8), input_mask, text,
            input_mask.sum(axis=1, dtype=np.int64))


def pack_full_sentences(tokens, start, length, doc_starts, max_seq_length, cls_id, sep_id):
    """Full-sentences instances (instances.full_sentences: token ranges, [SEP] at every
    document start inside) -> the same arrays as `pack`, segment ids all 0:
    [CLS] tokens, with [SEP] before each document start inside the range, [SEP]."""
    n = len(start)
    start = start.astype(np.int64)
    length = length.astype(np.int64)
    before = np.searchsorted(doc_starts, start, "right")       # document starts <= start
    n_tokens = length + 2 + (np.searchsorted(doc_starts, start + length, "left") - before)
    p = np.arange(max_seq_length)[None, :]
    input_mask = p < n_tokens[:, None]
    ids = np.where(input_mask, sep_id, 0).astype(np.int32)       # [SEP] where no token goes
    ids[:, 0] = cls_id
    # Every token of every range, and its position: 1 + its offset + the [SEP]s before it.
    rows = np.repeat(np.arange(n), length)
    first = np.repeat(np.cumsum(length) - length, length)
    t = np.repeat(start, length) + (np.arange(len(rows)) - first)
    position = 1 + (t - start[rows]) + (np.searchsorted(doc_starts, t, "right") - before[rows])
    ids[rows, position] = tokens[t]
    text = np.zeros(ids.shape, bool)
    text[rows, position] = True
    return ids, np.zeros(ids.shape, np.int8), input_mask, text, n_tokens


def num_to_predict(n_tokens, masked_lm_prob, max_predictions_per_seq):
    """google's count: min(max_predictions, max(1, round(n * prob))), Python's round
    (half to even, which np.rint also does)."""
    return np.minimum(max_predictions_per_seq,
                      np.maximum(1, np.rint(n_tokens * masked_lm_prob))).astype(np.int64)


def choose_positions(ids, candidate, n_tokens, rng, masked_lm_prob, max_predictions_per_seq,
                     continues=None, max_ngram_size=1):
    """Chooses the positions to predict. continues: whole-word masking, [N, L] bool, True
    where a token continues the word before it (a '##' piece: `is_subword[ids]`; or a
    later character of a segmented Chinese word, segmenters.py).

    Returns (chosen [N, L] bool, group): positions chosen, and None for plain masking
    (each position draws its own 80/10/10) or [N, L] int64 the number of each chosen
    position's word or span (< L; positions of one group share one draw).
    """
    n, length = ids.shape
    k = np.minimum(num_to_predict(n_tokens, masked_lm_prob, max_predictions_per_seq),
                   candidate.sum(axis=1))
    positions = np.arange(length)
    if continues is None and max_ngram_size == 1:
        # Plain masking: a uniformly random k-subset of the candidates = the candidates with
        # the k smallest of independent uniform keys. A key is random bits with the
        # position in its low bits (so no two keys tie, and the position comes back from
        # the key); only the max_predictions smallest can be needed.
        bits = max(1, (length - 1).bit_length())
        keys = rng.bit_generator.random_raw((n, length))            # uint64, uniform
        keys >>= np.uint64(bits)
        keys <<= np.uint64(bits)
        keys |= positions.astype(np.uint64)
        keys[~candidate] = np.iinfo(np.uint64).max
        m = min(max_predictions_per_seq, length)
        smallest = np.partition(keys, m - 1, axis=1)[:, :m] if m < length else keys
        smallest.sort(axis=1)
        take = np.arange(smallest.shape[1])[None, :] < k[:, None]
        chosen = np.zeros((n, length), bool)
        rows = np.broadcast_to(np.arange(n)[:, None], smallest.shape)
        chosen[rows[take], (smallest[take] & np.uint64((1 << bits) - 1)).astype(np.intp)] = True
        return chosen, None
    return _choose_units(ids, candidate, k, rng, continues, max_ngram_size)


def _choose_units(ids, candidate, k, rng, continues, max_ngram_size):
    """Whole-word and n-gram masking: units (words, or pieces) in random order; each
    start takes a span of n units (n = 1 without n-grams) if it fits in what is left of
    num_to_predict and overlaps nothing taken. One vectorized step per rank, over all rows.
    """
    n, length = ids.shape
    prev_candidate = np.zeros_like(candidate)
    prev_candidate[:, 1:] = candidate[:, :-1]
    if continues is not None:
        # A word starts at a candidate that does not continue a word, or that follows
        # [CLS]/[SEP] (a '##' piece, or the rest of a Chinese word, left at the front of a
        # segment by truncation is a word of its own).
        starts = candidate & ~(continues & prev_candidate)
    else:
        starts = candidate
    unit_of = np.cumsum(starts, axis=1) - 1                          # [N, L]
    n_units = starts.sum(axis=1)                                     # [N]
    u_max = int(n_units.max()) if n else 0
    rows = np.arange(n)
    # Pieces per unit, and the segment of each unit (0 = A, 1 = B) for n-gram bounds.
    unit_len = np.zeros((n, u_max + 1), np.int64)
    r_idx, p_idx = np.nonzero(candidate)
    np.add.at(unit_len, (r_idx, unit_of[r_idx, p_idx]), 1)
    unit_len = unit_len[:, :u_max]
    cum_len = np.concatenate([np.zeros((n, 1), np.int64), np.cumsum(unit_len, axis=1)], axis=1)
    # A span ends with its segment (A, B, or a document of a full-sentences example):
    # segment number = [CLS]/[SEP]s before it; the units past a row's last get a number
    # above all. Units of a segment are consecutive, so a unit's span ends by the number
    # of units whose segment number is at most its own (one sorted search over all rows).
    segment = np.cumsum(~candidate, axis=1)
    unit_segment = np.full((n, u_max), length + 1, np.int64)
    unit_segment[r_idx, unit_of[r_idx, p_idx]] = segment[r_idx, p_idx]
    flat = (rows[:, None] * (length + 2) + unit_segment).ravel()
    segment_end = (np.searchsorted(flat, flat, "right").reshape(n, u_max)
                   - rows[:, None] * u_max)
    keys = rng.random((n, u_max))
    keys[np.arange(u_max)[None, :] >= n_units[:, None]] = 2.0
    order = np.argsort(keys, axis=1)                                 # [N, U] random units
    if max_ngram_size > 1:
        weights = 1.0 / np.arange(1, max_ngram_size + 1)
        span_n = rng.choice(np.arange(1, max_ngram_size + 1), size=(n, u_max),
                            p=weights / weights.sum())
    taken_units = np.zeros((n, u_max + 1), bool)
    group_of_unit = np.full((n, u_max + 1), -1, np.int64)
    count = np.zeros(n, np.int64)
    for r in range(u_max):
        active = (r < n_units) & (count < k)
        if not active.any():
            break
        u = order[:, r]
        if max_ngram_size > 1:
            span = np.minimum(span_n[:, r], segment_end[rows, np.minimum(u, u_max - 1)] - u)
        else:
            span = np.ones(n, np.int64)
        end = np.minimum(u + span, u_max)
        size = cum_len[rows, end] - cum_len[rows, np.minimum(u, u_max)]
        ok = active & (count + size <= k)
        for j in range(max_ngram_size):
            ok &= ~((j < span) & taken_units[rows, np.minimum(u + j, u_max)])
        count += np.where(ok, size, 0)
        for j in range(max_ngram_size):
            mark = ok & (j < span)
            taken_units[rows[mark], (u + j)[mark]] = True
            group_of_unit[rows[mark], (u + j)[mark]] = r
    chosen = candidate & taken_units[rows[:, None], np.where(candidate, unit_of, u_max)]
    group = np.where(chosen, group_of_unit[rows[:, None], np.where(candidate, unit_of, u_max)],
                     -1)
    return chosen, group


def apply_masks(ids, chosen, group, rng, mask_id, vocab_size, max_predictions_per_seq):
    """Replaces the chosen positions (80% [MASK], 10% random id, 10% unchanged, drawn once
    per group) in `ids` (modified in place).

    Returns (positions [N, P] int64, labels [N, P] int32, weights [N, P] float32,
    decision counts [3] int64: masked, random, kept).
    """
    n, length = ids.shape
    r_idx, p_idx = np.nonzero(chosen)        # row-major: positions come out sorted per row
    if group is None:
        u = rng.random(len(r_idx))
    else:
        # One uniform per (row, group); group numbers are < length.
        u = rng.random((n, length))[r_idx, group[r_idx, p_idx]]
    decision = np.where(u < MASK_BELOW, MASKED, np.where(u < KEEP_BELOW, KEPT, RANDOM))
    labels_flat = ids[r_idx, p_idx].copy()
    replaced = np.where(decision == MASKED, mask_id, labels_flat)
    is_random = decision == RANDOM
    replaced[is_random] = rng.integers(0, vocab_size, size=int(is_random.sum()))
    ids[r_idx, p_idx] = replaced
    per_row = chosen.sum(axis=1)
    column = np.arange(len(r_idx)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    positions = np.zeros((n, max_predictions_per_seq), np.int64)
    labels = np.zeros((n, max_predictions_per_seq), np.int32)
    weights = np.zeros((n, max_predictions_per_seq), np.float32)
    positions[r_idx, column] = p_idx
    labels[r_idx, column] = labels_flat
    weights[r_idx, column] = 1.0
    counts = np.bincount(decision, minlength=3)
    return positions, labels, weights, counts


def no_masks(n, max_predictions_per_seq):
    """apply_masks' outputs for n unmasked examples (--masking=none): no predictions."""
    return (np.zeros((n, max_predictions_per_seq), np.int64),
            np.zeros((n, max_predictions_per_seq), np.int32),
            np.zeros((n, max_predictions_per_seq), np.float32), np.zeros(3, np.int64))


@dataclasses.dataclass(frozen=True)
class MaskingSpec:
    """What dynamic masking needs to know of the vocabulary and the flags."""
    vocab_size: int
    mask_id: int
    cls_id: int
    sep_id: int
    max_predictions_per_seq: int
    masked_lm_prob: float = 0.15
    is_subword: tuple = None    # whole-word masking: per id, is it a '##' piece
    max_ngram_size: int = 1
    # Whole words from the shards' marks (shard_schema.WORD_CONTINUES: Chinese words of
    # create_pretraining_data --chinese_word_segmenter --masking=none) instead of '##'.
    word_marks: bool = False

    @classmethod
    def from_vocab(cls, tokens, max_predictions_per_seq, masked_lm_prob=0.15,
                   whole_word=False, max_ngram_size=1, word_marks=False):
        """From the vocabulary's tokens in id order; ValueError naming a missing token.
        word_marks (with whole_word): the shards' word marks make the words."""
        ids = {t: i for i, t in enumerate(tokens)}
        for token in (CLS_TOKEN, SEP_TOKEN, MASK_TOKEN):
            if token not in ids:
                raise ValueError(f"the vocabulary has no {token} token, which dynamic "
                                 f"masking needs")
        if not 0 < masked_lm_prob <= 1:
            raise ValueError(f"--masked_lm_prob must be in (0, 1], got {masked_lm_prob}")
        if max_ngram_size < 1:
            raise ValueError(f"--max_ngram_size must be >= 1, got {max_ngram_size}")
        return cls(len(tokens), ids[MASK_TOKEN], ids[CLS_TOKEN], ids[SEP_TOKEN],
                   max_predictions_per_seq, masked_lm_prob,
                   tuple(t.startswith(CONTINUATION_PREFIX) for t in tokens)
                   if whole_word else None,
                   max_ngram_size, bool(whole_word and word_marks))
