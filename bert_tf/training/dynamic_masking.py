"""Dynamic masking (RoBERTa's): new masked-LM predictions for every batch, drawn in the
tf.data pipeline instead of read from the shards (`run_pretraining --masking=dynamic`).

google's rules, as create_pretraining_data applies them offline
(bert_tf/data/masking.py): the candidates are every real token but [CLS] and
[SEP]; num_to_predict = min(max_predictions_per_seq, max(1, round(n * masked_lm_prob)))
for an example of n tokens; each chosen position becomes [MASK] with probability 0.8, a
random id with 0.1 and stays with 0.1; positions are listed sorted, padded with weight 0.
Whole-word masking takes whole words (a piece and the '##' pieces after it) in random
order, skipping a word that would overshoot num_to_predict, and draws the 80/10/10 once
per word; n-gram masking takes spans of up to n units inside one segment, P(n) ~ 1/n.

The shards' own masks are undone first (`masked_lm_ids` go back to their positions), so
google-format shards and the unmasked shards of `create_pretraining_data --masking=none`
read alike. The draws are stateless: batch i of a pipeline is masked from
(seed, pipeline id, i), with i counted by the pipeline itself, so masks change from epoch
to epoch, and a run resumed from a checkpoint (which holds the pipeline's position) masks
its next batches exactly as the run never stopped would have.
"""

import tensorflow as tf

# (MaskingSpec lives beside the NumPy masker, so the fit() loop's reader needs no TF.)
from bert_tf.data.masking import KEEP_BELOW, MASK_BELOW, MaskingSpec  # noqa: F401


def unmasked_ids(batch):
    """token_ids [B, L] with the shards' masks undone: each masked_lm_ids value (weight >
    0) back at its masked_lm_positions."""
    ids = batch["token_ids"]
    real = batch["masked_lm_weights"] > 0                               # [B, P]
    rows = tf.broadcast_to(tf.range(tf.shape(real)[0])[:, None], tf.shape(real))
    where = tf.stack([tf.boolean_mask(rows, real),
                      tf.boolean_mask(tf.cast(batch["masked_lm_positions"], tf.int32),
                                      real)], axis=1)
    return tf.tensor_scatter_nd_update(
        ids, where, tf.boolean_mask(tf.cast(batch["masked_lm_ids"], ids.dtype), real))


def num_to_predict(n_tokens, masked_lm_prob, max_predictions_per_seq):
    """google's count; tf.round rounds half to even, as Python's round does."""
    k = tf.round(tf.cast(n_tokens, tf.float64) * masked_lm_prob)
    return tf.minimum(tf.cast(max_predictions_per_seq, tf.int32),
                      tf.maximum(1, tf.cast(k, tf.int32)))


def remask(batch, index, spec, seed, pipeline_id=0):
    """batch (our names, one pipeline's batch number `index`) -> the same batch with new
    token_ids, masked_lm_positions, masked_lm_ids and masked_lm_weights."""
    ids = unmasked_ids(batch)                                           # [B, L]
    shape = tf.shape(ids)
    length = shape[1]
    real = tf.cast(batch["padding_mask"], tf.bool)
    candidate = real & (ids != spec.cls_id) & (ids != spec.sep_id)
    k = tf.minimum(num_to_predict(tf.reduce_sum(tf.cast(real, tf.int32), axis=1),
                                  spec.masked_lm_prob, spec.max_predictions_per_seq),
                   tf.reduce_sum(tf.cast(candidate, tf.int32), axis=1))  # [B]
    base = tf.stack([tf.cast(seed, tf.int64), tf.cast(pipeline_id, tf.int64)])
    key = tf.random.experimental.stateless_fold_in(base, tf.cast(index, tf.int64))
    draw = lambda n: tf.random.experimental.stateless_fold_in(key, n)  # noqa: E731

    continues = None
    if spec.word_marks:         # the shards' marks (shard_schema.WORD_CONTINUES)
        continues = batch["word_continues"]
    elif spec.is_subword is not None:
        continues = tf.gather(tf.constant(spec.is_subword, tf.bool), ids)
    if continues is None and spec.max_ngram_size == 1:
        chosen, group = _choose_positions(candidate, k, draw(1)), None
    else:
        chosen, group = _choose_units(ids, candidate, k, spec, draw(1), draw(2), continues)

    # 80/10/10, one draw per position, or per word / span.
    u = tf.random.stateless_uniform(shape, draw(3))
    if group is not None:
        u = tf.gather(u, tf.maximum(group, 0), batch_dims=1)
    random_ids = tf.random.stateless_uniform(shape, draw(4), 0, spec.vocab_size,
                                             dtype=tf.int32)
    new_ids = tf.where(chosen & (u < MASK_BELOW), tf.cast(spec.mask_id, ids.dtype),
                       tf.where(chosen & (u >= KEEP_BELOW),
                                tf.cast(random_ids, ids.dtype), ids))

    # The chosen positions in order, then padding (position 0, weight 0).
    p = spec.max_predictions_per_seq
    positions = tf.range(length)[None, :]
    order = tf.sort(tf.where(chosen, positions, length + positions), axis=1)[:, :p]
    order = tf.pad(order, [[0, 0], [0, p - tf.shape(order)[1]]],
                   constant_values=2 * length)
    found = order < length
    chosen_positions = tf.where(found, order, 0)
    out = dict(batch)
    out.pop("word_continues", None)     # masking's alone: the model does not take it
    out["token_ids"] = new_ids
    out["masked_lm_positions"] = tf.cast(chosen_positions, batch["masked_lm_positions"].dtype)
    out["masked_lm_ids"] = tf.cast(
        tf.where(found, tf.gather(ids, chosen_positions, batch_dims=1), 0),
        batch["masked_lm_ids"].dtype)
    out["masked_lm_weights"] = tf.cast(found, batch["masked_lm_weights"].dtype)
    return out


def _choose_positions(candidate, k, seed):
    """A uniformly random k-subset of each row's candidates: those with the k smallest
    uniform keys."""
    keys = tf.where(candidate, tf.random.stateless_uniform(tf.shape(candidate), seed), 2.0)
    rank = tf.argsort(tf.argsort(keys, axis=1, stable=True), axis=1, stable=True)
    return candidate & (rank < k[:, None])


def _choose_units(ids, candidate, k, spec, order_seed, span_seed, continues=None):
    """Whole words and/or n-gram spans (data/masking.py's _choose_units, in
    TensorFlow ops): units in random order, each start taking a span of n units when it
    fits what is left of k and overlaps nothing taken. `continues`: whole words, [B, L]
    bool, True where a token continues the word before it. -> (chosen [B, L] bool, group
    [B, L] int32: the rank of the unit or span each chosen position belongs to, else -1)."""
    b, length = tf.shape(ids)[0], tf.shape(ids)[1]
    n_max = spec.max_ngram_size
    prev_candidate = tf.pad(candidate[:, :-1], [[0, 0], [1, 0]])
    if continues is not None:
        # A word starts at a candidate that does not continue a word, or that follows
        # [CLS] or [SEP] (a piece left at a segment's front by truncation is a word of its
        # own).
        starts = candidate & ~(continues & prev_candidate)
    else:
        starts = candidate
    unit_of = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1          # [B, L]
    n_units = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)          # [B]
    rows = tf.range(b)
    # Unit u of row r is slot r * (L + 1) + u; slot L of a row is "no unit".
    slot = lambda u: rows[:, None] * (length + 1) + u                   # noqa: E731
    cand_slot = tf.where(candidate, slot(unit_of), slot(length))
    flat = tf.reshape(cand_slot, [-1])
    unit_len = tf.reshape(tf.math.unsorted_segment_sum(
        tf.reshape(tf.cast(candidate, tf.int32), [-1]), flat, b * (length + 1)),
        [b, length + 1])[:, :length]
    cum_len = tf.pad(tf.cumsum(unit_len, axis=1), [[0, 0], [1, 0]])     # [B, L + 1]
    # A span ends with its segment (A, B, or a document of a full-sentences example):
    # segment number = [CLS]/[SEP]s before it, above all past the last unit; a unit's
    # span ends by the number of units whose segment number is at most its own.
    segment = tf.cumsum(tf.cast(~candidate, tf.int32), axis=1)
    unit_segment = tf.reshape(tf.math.unsorted_segment_max(
        tf.reshape(tf.where(candidate, segment, 0), [-1]), flat,
        b * (length + 1)), [b, length + 1])[:, :length]
    unit_segment = tf.where(tf.range(length)[None, :] < n_units[:, None], unit_segment,
                            length + 1)
    segment_end = tf.searchsorted(unit_segment, unit_segment, side="right",
                                  out_type=tf.int32)
    keys = tf.random.stateless_uniform([b, length], order_seed)
    keys = tf.where(tf.range(length)[None, :] < n_units[:, None], keys, 2.0)
    order = tf.argsort(keys, axis=1, stable=True)                       # [B, L]
    if n_max > 1:
        weights = [1.0 / n for n in range(1, n_max + 1)]
        logits = tf.math.log(tf.constant([weights], tf.float32))
        span_n = tf.reshape(tf.random.stateless_categorical(
            tf.tile(logits, [b * length, 1]), 1, span_seed), [b, length]) + 1
        span_n = tf.cast(span_n, tf.int32)
    else:
        span_n = tf.ones([b, length], tf.int32)

    def at(table, u):
        return tf.gather(table, u, batch_dims=1)

    def step(r, count, taken, group):
        active = (r < n_units) & (count < k)
        u = order[:, r]
        if n_max > 1:
            span = tf.minimum(span_n[:, r], at(segment_end, tf.minimum(u, length - 1)) - u)
        else:
            span = tf.ones_like(u)
        end = tf.minimum(u + span, length)
        size = at(cum_len, end) - at(cum_len, tf.minimum(u, length))
        ok = active & (count + size <= k)
        for j in range(n_max):
            ok &= ~((j < span) & at(taken, tf.minimum(u + j, length)))
        count += tf.where(ok, size, 0)
        for j in range(n_max):
            mark = ok & (j < span)
            where = tf.stack([rows, tf.minimum(u + j, length)], axis=1)
            taken = tf.tensor_scatter_nd_update(taken, where, at(taken, where[:, 1]) | mark)
            group = tf.tensor_scatter_nd_update(
                group, where, tf.where(mark, r, at(group, where[:, 1])))
        return r + 1, count, taken, group

    _, _, taken, group_of_unit = tf.while_loop(
        lambda r, *_: r < tf.reduce_max(n_units), step,
        (tf.constant(0), tf.zeros([b], tf.int32), tf.zeros([b, length + 1], tf.bool),
         tf.fill([b, length + 1], -1)))
    unit = tf.where(candidate, unit_of, length)
    chosen = candidate & at(taken, unit)
    return chosen, tf.where(chosen, at(group_of_unit, unit), -1)
