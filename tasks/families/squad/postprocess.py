"""SQuAD post-processing as small pure functions (numpy in, numpy/Python out).

The rules are google-research/bert run_squad.py's, restated on character offsets. The
windows come from data.py (bert_tf/text/windows.py's ops: a context longer than the room
left after the question is cut into windows of `max_tokens_for_doc` pieces, each starting
`doc_stride` pieces after the previous one, the last one reaching the end; a piece that
is in several windows has its max context in the window where min(left context, right
context) + 0.01 * window length is largest, the first such window on ties):

* decoding (`decode_windows`: bert_tf/text/answers.py's ops, the export's): the
  `n_best_size` best start and end positions of each window, pairs kept when both are
  context pieces, the start has its max context, end >= start and the span is at most
  `max_answer_length` pieces; the answer, the best start logit + end logit over all
  windows; the n-best list (`example_result`): all windows' pairs ranked by score,
  duplicates of an answer text dropped, `n_best_size` kept, softmax over them.
* v2.0 (`example_result`): null score = start[CLS] + end[CLS], the minimum over windows;
  the answer is "" when null - best non-null score > `null_score_diff_threshold`.

One deliberate difference: positions that cannot hold an answer (question, [CLS], [SEP],
padding, starts without max context) are removed *before* the top-n choice, not after.
google's top-n can be filled by such positions and then yield fewer or no candidates; this
way the best valid span is always among the candidates, and the two agree whenever
google's top-n already held it.

Answers are mapped back to the original text through per-piece character offsets into the
context (`offsets[i] = (start, end)`, end exclusive; -1 off the context), so the answer is
the exact original substring: accents, unicode and inner whitespace as written. This
replaces google's `get_final_text` re-alignment heuristic and is expressible in TF ops.
"""

import math

import numpy as np


def decode_windows(start_logits, end_logits, offsets, max_context, example_index,
                   num_examples, n_best_size=20, max_answer_length=30):
    """bert_tf/text/answers.py's decoding (the export's) over every window of a file at
    once: start_logits, end_logits [N, S]; offsets [N, S, 2] (-1 off the context);
    max_context [N, S] bool; example_index [N] (each example's windows in order).
    Returns numpy arrays: "start", "end", "score", "ok" [N, k * k] (`candidates`), and
    per example "has_answer", "best_score", "window", "best_start", "best_end"
    (`best`) and "null" (`null_scores`)."""
    import tensorflow as tf

    from bert_tf.text import answers
    start_logits = np.asarray(start_logits)
    end_logits = np.asarray(end_logits)
    if start_logits.dtype.kind != "f":
        start_logits, end_logits = (x.astype(np.float64) for x in (start_logits, end_logits))
    in_context = np.asarray(offsets)[..., 0] >= 0                       # [N, S]
    may_start = in_context & np.asarray(max_context, bool)
    example = tf.constant(np.asarray(example_index, np.int64))
    found = answers.candidates(tf.constant(start_logits), tf.constant(end_logits),
                               tf.constant(may_start), tf.constant(in_context),
                               n_best_size, max_answer_length)
    chosen = answers.best(found, example, num_examples)
    out = {k: v.numpy() for k, v in found.items()}
    out.update({"has_answer": chosen["has_answer"].numpy(),
                "best_score": chosen["score"].numpy(), "window": chosen["window"].numpy(),
                "best_start": chosen["start"].numpy(), "best_end": chosen["end"].numpy(),
                "null": answers.null_scores(tf.constant(start_logits), tf.constant(end_logits),
                                            example, num_examples).numpy()})
    return out


def _softmax(scores):
    if not scores:
        return []
    top = max(scores)
    exp = [math.exp(s - top) for s in scores]
    total = sum(exp)
    return [x / total for x in exp]


def decode_example(context, windows, n_best_size=20, max_answer_length=30,
                   version_2_with_negative=False, null_score_diff_threshold=0.0):
    """One question's answer from the logits of all its windows.

    context: the original context string. windows: a list, one per window, of dicts with
    "start_logits" [S], "end_logits" [S], "offsets" [S, 2], "max_context" [S].
    `example_result` of `decode_windows` over them."""
    stack = lambda key: np.stack([np.asarray(w[key]) for w in windows])
    decoded = decode_windows(stack("start_logits"), stack("end_logits"), stack("offsets"),
                             stack("max_context"), np.zeros(len(windows), np.int64), 1,
                             n_best_size, max_answer_length)
    return example_result(context, decoded, 0, np.arange(len(windows)), stack("offsets"),
                          stack("start_logits"), stack("end_logits"), n_best_size,
                          version_2_with_negative, null_score_diff_threshold)


def example_result(context, decoded, e, rows, offsets, start_logits, end_logits,
                   n_best_size=20, version_2_with_negative=False,
                   null_score_diff_threshold=0.0):
    """Example e's answer from `decode_windows`' output; rows: its windows' indexes, in
    order; offsets, start_logits, end_logits: every window's, as given to it.

    Returns a dict: "text" (the answer, "" for no answer), "start_char", "end_char"
    (offsets of the answer in the context, end exclusive; -1 for ""), "score" (start +
    end logit of the answer; the null score for ""), "is_impossible", "null_score_diff"
    (null - best non-null score; v2.0 only, +inf when no span is possible), "best_non_null"
    (text of the best span, what threshold tuning needs) and "nbest" (a list of dicts:
    text, probability, start_logit, end_logit, start_char, end_char): the op's answer
    first, then the other candidates of its windows by score (window, start rank, end
    rank order on ties), duplicates of an answer text dropped, `n_best_size` kept.
    """
    logit = lambda logits, w, i: float(np.float64(logits[w][i]))
    span = lambda w, s, e: (int(offsets[w][s][0]), int(offsets[w][e][1]))
    prelim = []   # (score, window, start_index, end_index)
    for w in rows:
        ok = decoded["ok"][w]
        prelim += [(float(score), w, int(s), int(t)) for score, s, t in zip(
            decoded["score"][w][ok], decoded["start"][w][ok], decoded["end"][w][ok])]
    # Python's sort is stable: equal scores keep window, start-rank, end-rank order.
    prelim.sort(key=lambda p: p[0], reverse=True)

    nbest, seen = [], set()
    for score, w, s, t in prelim:
        if len(nbest) >= n_best_size:
            break
        start_char, end_char = span(w, s, t)
        text = context[start_char:end_char]
        if text in seen:
            continue
        seen.add(text)
        nbest.append({"text": text, "start_logit": logit(start_logits, w, s),
                      "end_logit": logit(end_logits, w, t),
                      "start_char": start_char, "end_char": end_char})
    best_non_null = None
    if decoded["has_answer"][e]:
        w, s, t = (int(decoded[k][e]) for k in ("window", "best_start", "best_end"))
        start_char, end_char = span(w, s, t)
        best_non_null = {"text": context[start_char:end_char],
                         "start_logit": logit(start_logits, w, s),
                         "end_logit": logit(end_logits, w, t),
                         "start_char": start_char, "end_char": end_char}
    null = None   # (score, start_logit, end_logit) of the window with the smallest null
    if version_2_with_negative and len(rows):
        score = float(decoded["null"][e])
        w = next(w for w in rows if logit(start_logits, w, 0) + logit(end_logits, w, 0)
                 == score)
        null = (score, logit(start_logits, w, 0), logit(end_logits, w, 0))
        # The empty answer competes in the n-best at its own rank (google adds it to the
        # candidates, and appends it when it fell out of the top n).
        entry = {"text": "", "start_logit": null[1], "end_logit": null[2],
                 "start_char": -1, "end_char": -1}
        rank = sum(1 for n in nbest if n["start_logit"] + n["end_logit"] >= null[0])
        if rank < n_best_size:
            nbest = nbest[:rank] + [entry] + nbest[rank:n_best_size - 1]
        else:
            nbest.append(entry)
    probs = _softmax([n["start_logit"] + n["end_logit"] for n in nbest])
    for n, p in zip(nbest, probs):
        n["probability"] = p

    result = {"nbest": nbest,
              "best_non_null": best_non_null["text"] if best_non_null else ""}
    if not version_2_with_negative:
        best = best_non_null
        result.update(is_impossible=best is None, null_score_diff=None)
    else:
        diff = (null[0] - best_non_null["start_logit"] - best_non_null["end_logit"]
                if best_non_null else math.inf)
        result["null_score_diff"] = diff
        best = None if diff > null_score_diff_threshold else best_non_null
        result["is_impossible"] = best is None
    if best is None:
        result.update(text="", start_char=-1, end_char=-1,
                      score=null[0] if null is not None else -math.inf)
    else:
        result.update(text=best["text"], start_char=best["start_char"],
                      end_char=best["end_char"],
                      score=best["start_logit"] + best["end_logit"])
    return result
