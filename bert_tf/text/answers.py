"""Answer spans from a span model's start and end logits, google-research/bert's
run_squad.py decoding restated, in TensorFlow ops: the one definition that SQuAD's
evaluation (tasks/families/squad/postprocess.py, eagerly over a file's windows) and its
export (tasks/families/squad/serving.py, in the signature) run.

* `candidates`: the k best starts (positions that may start an answer: context pieces
  with their max context) and the k best ends (context pieces) of each window, top_k
  putting the lower position first on ties (a stable sort's order); the pairs with
  start <= end < start + max_answer_length, scored start + end logit in float64, in
  (start rank, end rank) order.
* `best`: a question's answer over its windows: the highest score, the first in (window,
  start rank, end rank) order on ties.
* `null_scores` (SQuAD v2.0): the least start + end logit of [CLS] (position 0) over a
  question's windows.

Positions that cannot hold an answer are left out before the top-k choice, not after
(postprocess.py says why).
"""

import tensorflow as tf


def candidates(start_logits, end_logits, may_start, may_end, k, max_answer_length):
    """start_logits, end_logits: float [N, S] per window; may_start, may_end: bool [N, S].
    Returns {"start", "end": int32 [N, k * k] positions, "score": float64 [N, k * k],
    "ok": bool [N, k * k]}; k at most S."""
    neg_inf = tf.constant(-float("inf"), start_logits.dtype)
    if start_logits.shape[1] is not None:
        k = min(int(k), start_logits.shape[1])
    start_value, start_index = tf.math.top_k(tf.where(may_start, start_logits, neg_inf), k)
    end_value, end_index = tf.math.top_k(tf.where(may_end, end_logits, neg_inf), k)
    start_ok = tf.gather(may_start, start_index, batch_dims=1)             # [N, k]
    end_ok = tf.gather(may_end, end_index, batch_dims=1)
    s, e = start_index[:, :, None], end_index[:, None, :]                  # [N, k, 1], [N, 1, k]
    ok = start_ok[:, :, None] & end_ok[:, None, :] & (s <= e) & (e < s + max_answer_length)
    score = tf.cast(start_value, tf.float64)[:, :, None] + \
        tf.cast(end_value, tf.float64)[:, None, :]                         # [N, k, k]
    flat = lambda x: tf.reshape(x, [tf.shape(start_logits)[0], -1])
    return {"start": flat(tf.broadcast_to(s, tf.shape(ok))),
            "end": flat(tf.broadcast_to(e, tf.shape(ok))),
            "score": flat(tf.where(ok, score, tf.constant(-float("inf"), tf.float64))),
            "ok": flat(ok)}


def best(found, example, num_questions):
    """`candidates`' output and each window's question (int64 [N], windows of a question
    in order) -> {"has_answer" bool [B], "score" float64 [B] (-inf without an answer),
    "window" int64 [B] (0 without), "start", "end" int64 [B] positions (0 without)}."""
    ok, score = found["ok"], found["score"]
    width = tf.shape(ok, out_type=tf.int64)[1]
    has_answer = tf.math.unsorted_segment_sum(
        tf.reduce_sum(tf.cast(ok, tf.int64), 1), example, num_questions) > 0
    top = tf.math.unsorted_segment_max(tf.reduce_max(score, 1), example, num_questions)
    n = tf.shape(ok, out_type=tf.int64)[0]
    pair_id = tf.range(n * width, dtype=tf.int64)
    is_best = tf.reshape(ok & tf.equal(score, tf.gather(top, example)[:, None]), [-1])
    chosen = tf.math.unsorted_segment_min(
        tf.boolean_mask(pair_id, is_best),
        tf.boolean_mask(tf.repeat(example, width), is_best), num_questions)
    chosen = tf.where(has_answer, chosen, 0)
    position = lambda x: gather_or(tf.cast(tf.reshape(x, [-1]), tf.int64), chosen,
                                    has_answer, 0)
    return {"has_answer": has_answer,
            "score": tf.where(has_answer, top, tf.constant(-float("inf"), tf.float64)),
            "window": tf.where(has_answer, chosen // width, 0),
            "start": position(found["start"]), "end": position(found["end"])}


def null_scores(start_logits, end_logits, example, num_questions):
    """float64 [B]: the least start + end logit of [CLS] over each question's windows
    (-inf for a question without a window)."""
    null = tf.cast(start_logits[:, 0], tf.float64) + tf.cast(end_logits[:, 0], tf.float64)
    has_window = tf.math.unsorted_segment_sum(tf.ones_like(example), example,
                                              num_questions) > 0
    return tf.where(has_window, tf.math.unsorted_segment_min(null, example, num_questions),
                    tf.constant(-float("inf"), tf.float64))


def gather_or(params, indices, valid, default):
    """params[indices] where valid, else default (params may be empty)."""
    padded = tf.concat([params, tf.fill([1], tf.cast(default, params.dtype))], 0)
    n = tf.shape(params, out_type=indices.dtype)[0]
    return tf.gather(padded, tf.where(valid, indices, n))
