"""SQuAD post-processing as small pure functions (numpy in, numpy/Python out).

The rules are google-research/bert run_squad.py's, restated on character offsets. The
windows come from data.py (bert_tf/text/windows.py's ops: a context longer than the room
left after the question is cut into windows of `max_tokens_for_doc` pieces, each starting
`doc_stride` pieces after the previous one, the last one reaching the end; a piece that
is in several windows has its max context in the window where min(left context, right
context) + 0.01 * window length is largest, the first such window on ties):

* decoding (`feature_candidates`, `decode_example`): the `n_best_size` best start and end
  positions of each window, pairs kept when both are context pieces, the start has its
  max context, end >= start and the span is at most `max_answer_length` pieces; all
  windows' pairs ranked by start logit + end logit, duplicates of an answer text dropped,
  `n_best_size` kept, softmax over them.
* v2.0 (`decode_example`): null score = start[CLS] + end[CLS], the minimum over windows;
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


def _top_indexes(logits, valid, k):
    """Indexes of the k largest logits among valid positions, best first (lower index
    first on ties, as a stable sort of google's)."""
    index = np.flatnonzero(valid)
    order = np.argsort(-logits[index], kind="stable")[:k]
    return index[order]


def feature_candidates(start_logits, end_logits, offsets, max_context, n_best_size,
                       max_answer_length):
    """The candidate spans of one window.

    start_logits, end_logits: [S] float; offsets: [S, 2] int character offsets of each
    position in the context (-1 where it is not a context piece); max_context: [S] bool.
    Returns a list of (start_index, end_index, start_logit, end_logit), in google's order
    (start rank, then end rank).
    """
    start_logits = np.asarray(start_logits, np.float64)
    end_logits = np.asarray(end_logits, np.float64)
    in_context = np.asarray(offsets)[:, 0] >= 0                          # [S]
    starts = _top_indexes(start_logits, in_context & np.asarray(max_context, bool),
                          n_best_size)
    ends = _top_indexes(end_logits, in_context, n_best_size)
    out = []
    for s in starts:
        for e in ends:
            if s <= e < s + max_answer_length:
                out.append((int(s), int(e), float(start_logits[s]), float(end_logits[e])))
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

    Returns a dict: "text" (the answer, "" for no answer), "start_char", "end_char"
    (offsets of the answer in the context, end exclusive; -1 for ""), "score" (start +
    end logit of the answer; the null score for ""), "is_impossible", "null_score_diff"
    (null - best non-null score; v2.0 only, +inf when no span is possible), "best_non_null"
    (text of the best span, what threshold tuning needs) and "nbest" (a list of dicts:
    text, probability, start_logit, end_logit, start_char, end_char).
    """
    prelim = []   # (score, window, start_index, end_index, start_logit, end_logit)
    null = None   # (score, start_logit, end_logit) of the window with the smallest null
    for w, window in enumerate(windows):
        if version_2_with_negative:
            s0 = float(window["start_logits"][0])
            e0 = float(window["end_logits"][0])
            if null is None or s0 + e0 < null[0]:
                null = (s0 + e0, s0, e0)
        for s, e, sl, el in feature_candidates(
                window["start_logits"], window["end_logits"], window["offsets"],
                window["max_context"], n_best_size, max_answer_length):
            prelim.append((sl + el, w, s, e, sl, el))
    # Python's sort is stable: equal scores keep window, start-rank, end-rank order.
    prelim.sort(key=lambda p: p[0], reverse=True)

    nbest, seen = [], set()
    for score, w, s, e, sl, el in prelim:
        if len(nbest) >= n_best_size:
            break
        offsets = windows[w]["offsets"]
        start_char, end_char = int(offsets[s][0]), int(offsets[e][1])
        text = context[start_char:end_char]
        if text in seen:
            continue
        seen.add(text)
        nbest.append({"text": text, "start_logit": sl, "end_logit": el,
                      "start_char": start_char, "end_char": end_char})
    best_non_null = nbest[0] if nbest else None
    if null is not None:
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
