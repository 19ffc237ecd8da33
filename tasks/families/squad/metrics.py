"""The official SQuAD metrics: exact match and F1 (v1.1 and v2.0), with v2.0's HasAns/NoAns
breakdown and no-answer threshold search.

Re-implemented from the rules of the official evaluation scripts (evaluate-v1.1.py and
evaluate-v2.0.py), which both normalise an answer the same way: lower-case, drop every
character of `string.punctuation`, drop the words "a", "an", "the", collapse whitespace.
Where the two scripts differ, each version follows its own script:

* v1.1 F1 is 0 when prediction and answer share no token, even when both normalise to
  nothing; v2.0 gives 1 when both are empty (that is how "" scores on unanswerable ones).
* v2.0 ignores gold answers that normalise to nothing; a question left without any is
  scored against [""]. HasAns/NoAns still follow the raw list (answers present or not).

F1 counts words: on Chinese text, with no spaces between words, the scripts' whitespace
split would make a whole answer one word, so each CJK ideograph (google's ranges) is a
token of its own there, as CMRC 2018's evaluation counts it. Text without CJK ideographs
scores exactly as the official scripts score it.

A question without a prediction scores 0 in both (v1.1's rule; v2.0's script would fail on
it in the breakdown) and is counted in `missing`. Scores are percentages, as the scripts
print them.
"""

import collections
import re
import string

from bert_tf.text.text_rules import CJK_RANGES

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_CJK = re.compile("([%s])" % "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in CJK_RANGES))


def normalize_answer(text):
    """Lower-case, strip punctuation, remove articles, collapse whitespace (the official
    order: lower, punctuation, articles, whitespace)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(gold, prediction):
    return int(normalize_answer(gold) == normalize_answer(prediction))


def answer_tokens(text):
    """The normalised answer's tokens: whitespace words, each CJK ideograph alone."""
    return _CJK.sub(r" \1 ", normalize_answer(text)).split()


def f1_score(gold, prediction, version="2.0"):
    """Token-overlap F1 of the normalised texts (bag of words, counts clipped)."""
    gold_tokens = answer_tokens(gold)
    pred_tokens = answer_tokens(prediction)
    if version == "2.0" and (not gold_tokens or not pred_tokens):
        # v2.0: an empty answer is right only when the gold is empty too.
        return float(gold_tokens == pred_tokens)
    common = collections.Counter(gold_tokens) & collections.Counter(pred_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_answers(qa, version):
    """The answer texts a prediction is compared with; [""] for an unanswerable v2.0
    question (no answers, or only answers that normalise to nothing)."""
    texts = [a["text"] for a in qa.get("answers", [])]
    if version == "2.0":
        texts = [t for t in texts if normalize_answer(t)]
        return texts or [""]
    return texts


def raw_scores(dataset, predictions, version="2.0"):
    """Per-question best EM and F1 over the gold answers.

    dataset: the "data" list of a SQuAD file; predictions: {qid: text}.
    Returns (exact {qid: 0/1}, f1 {qid: float}, has_answer {qid: bool}, missing [qid]).
    """
    exact, f1, has_answer, missing = {}, {}, {}, []
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qid = qa["id"]
                golds = gold_answers(qa, version)
                # The official split uses the raw list: a question is answerable when it
                # has any answer at all.
                has_answer[qid] = bool(qa.get("answers"))
                if qid not in predictions:
                    missing.append(qid)
                    exact[qid], f1[qid] = 0, 0.0
                    continue
                pred = predictions[qid]
                exact[qid] = max(exact_match(g, pred) for g in golds)
                f1[qid] = max(f1_score(g, pred, version) for g in golds)
    return exact, f1, has_answer, missing


def apply_no_answer_threshold(scores, na_probs, has_answer, threshold):
    """v2.0: a question whose no-answer score exceeds `threshold` is answered "" (right
    only for unanswerable questions)."""
    return {qid: (float(not has_answer[qid]) if na_probs.get(qid, 0.0) > threshold else s)
            for qid, s in scores.items()}


def find_best_threshold(predictions, scores, na_probs, has_answer):
    """The official search: start from "every question answered with ''" (score = number
    of unanswerable ones) and switch questions to their prediction in increasing no-answer
    score, keeping the best total. Returns (best score in %, threshold): predicting ""
    exactly when na_prob > threshold reaches that score.

    predictions should hold each question's best non-null answer, so that the search can
    weigh every answer the model could give.
    """
    score = best = sum(1 for qid in scores if not has_answer[qid])
    best_threshold = 0.0
    for qid in sorted(na_probs, key=lambda q: na_probs[q]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            score += scores[qid]
        elif predictions.get(qid):
            score -= 1
        if score > best:
            best, best_threshold = score, na_probs[qid]
    return 100.0 * best / max(len(scores), 1), best_threshold


def evaluate(dataset, predictions, version="1.1", na_probs=None, na_prob_thresh=1.0,
             best_predictions=None):
    """Official EM/F1 (%) of `predictions` ({qid: text}) on `dataset` (a file's "data").

    v1.1: {"exact_match", "f1", "total", "missing"} (the v1.1 script's key names).
    v2.0: {"exact", "f1", "total", "missing", "HasAns_exact", "HasAns_f1", "HasAns_total",
    "NoAns_exact", "NoAns_f1", "NoAns_total"}; with `na_probs` ({qid: no-answer score,
    e.g. null_odds.json}) also "best_exact", "best_exact_thresh", "best_f1",
    "best_f1_thresh", searched over `best_predictions` (default: `predictions`).
    """
    if version not in ("1.1", "2.0"):
        raise ValueError(f"SQuAD version must be 1.1 or 2.0, got {version!r}")
    exact, f1, has_answer, missing = raw_scores(dataset, predictions, version)
    total = len(exact)
    if total == 0:
        raise ValueError("the dataset has no questions")
    if version == "1.1":
        return {"exact_match": 100.0 * sum(exact.values()) / total,
                "f1": 100.0 * sum(f1.values()) / total,
                "total": total, "missing": len(missing)}
    probs = na_probs or {}
    exact_t = apply_no_answer_threshold(exact, probs, has_answer, na_prob_thresh)
    f1_t = apply_no_answer_threshold(f1, probs, has_answer, na_prob_thresh)
    out = {"exact": 100.0 * sum(exact_t.values()) / total,
           "f1": 100.0 * sum(f1_t.values()) / total,
           "total": total, "missing": len(missing)}
    for name, keep in (("HasAns", True), ("NoAns", False)):
        qids = [q for q in exact if has_answer[q] == keep]
        if qids:
            out[f"{name}_exact"] = 100.0 * sum(exact_t[q] for q in qids) / len(qids)
            out[f"{name}_f1"] = 100.0 * sum(f1_t[q] for q in qids) / len(qids)
            out[f"{name}_total"] = len(qids)
    if na_probs is not None:
        searched = best_predictions if best_predictions is not None else predictions
        if best_predictions is not None:
            exact, f1, _, _ = raw_scores(dataset, best_predictions, version)
        out["best_exact"], out["best_exact_thresh"] = find_best_threshold(
            searched, exact, na_probs, has_answer)
        out["best_f1"], out["best_f1_thresh"] = find_best_threshold(
            searched, f1, na_probs, has_answer)
    return out
