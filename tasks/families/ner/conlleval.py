"""Entity-level precision, recall and F1 with conlleval's chunk semantics.

conlleval (the CoNLL-2000/2003 shared-task scorer) decides between every two tokens
whether a chunk ended and whether one started, from the two tags' prefixes and types:

* a chunk starts at B- and S-, at I- or E- after O (IOB1 and repaired sequences: an
  "I-PER" after "O" opens a PER chunk), at I- after E- or S-, at E- after E- or S-, and at
  any tag whose type differs from the previous tag's;
* a chunk ends before B-, S- and O, after E- and S-, and wherever the type changes.

A predicted entity is correct when a gold entity has the same first token, last token and
type. Sentence boundaries end every chunk. For B/I/O tags these are exactly the rules of
conlleval's 2004 version; its IOBES variant adds the S- and E- -> B- pairs used here.
Scores are percentages, as conlleval prints them.
"""

import collections
import re

_TAG = re.compile(r"^([^-]*)-(.*)$")   # conlleval splits at the first hyphen

# (previous prefix, prefix) pairs, from conlleval's endOfChunk / startOfChunk.
_ENDS = {("B", "B"), ("B", "O"), ("B", "S"), ("I", "B"), ("I", "O"), ("I", "S"),
         ("E", "E"), ("E", "I"), ("E", "O"), ("E", "S"), ("E", "B"),
         ("S", "E"), ("S", "I"), ("S", "O"), ("S", "S"), ("S", "B")}
_STARTS = {("B", "B"), ("I", "B"), ("O", "B"), ("S", "B"), ("E", "B"),
           ("B", "S"), ("I", "S"), ("O", "S"), ("S", "S"), ("E", "S"),
           ("O", "I"), ("S", "I"), ("E", "I"), ("S", "E"), ("E", "E"), ("O", "E")}


def split_tag(tag):
    """"B-PER" -> ("B", "PER"); "O" -> ("O", ""); "B-MISC-X" -> ("B", "MISC-X")."""
    match = _TAG.match(tag)
    return (match.group(1), match.group(2)) if match else (tag, "")


def _chunk_ends(prev_tag, tag, prev_type, type_):
    return (prev_tag, tag) in _ENDS or (prev_tag != "O" and prev_type != type_)


def _chunk_starts(prev_tag, tag, prev_type, type_):
    return (prev_tag, tag) in _STARTS or (tag != "O" and prev_type != type_)


def chunks(tags):
    """One sentence's tags -> list of (first token, end token exclusive, type)."""
    out, start = [], None
    prev_tag, prev_type = "O", ""
    for i, raw in enumerate(list(tags) + ["O"]):        # the boundary closes the last one
        tag, type_ = split_tag(raw)
        if start is not None and _chunk_ends(prev_tag, tag, prev_type, type_):
            out.append((start, i, prev_type))
            start = None
        if _chunk_starts(prev_tag, tag, prev_type, type_):
            start = i
        prev_tag, prev_type = tag, type_
    return out


def _prf(correct, guessed, gold):
    precision = 100.0 * correct / guessed if guessed else 0.0
    recall = 100.0 * correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def evaluate(gold_sentences, pred_sentences):
    """gold_sentences, pred_sentences: lists of tag lists (one list per sentence, equal
    lengths). Returns {"precision", "recall", "f1", "accuracy", "found_gold",
    "found_guessed", "correct", "tokens", "per_type": {type: {"precision", "recall",
    "f1", "found_gold", "found_guessed", "correct"}}}."""
    if len(gold_sentences) != len(pred_sentences):
        raise ValueError(f"{len(gold_sentences)} gold sentences but "
                         f"{len(pred_sentences)} predicted")
    found_gold, found_guessed, correct = (collections.Counter() for _ in range(3))
    tokens = correct_tags = 0
    for i, (gold, pred) in enumerate(zip(gold_sentences, pred_sentences)):
        if len(gold) != len(pred):
            raise ValueError(f"sentence {i}: {len(gold)} gold tags but {len(pred)} predicted")
        gold_chunks, pred_chunks = chunks(gold), chunks(pred)
        found_gold.update(c[2] for c in gold_chunks)
        found_guessed.update(c[2] for c in pred_chunks)
        correct.update(c[2] for c in set(gold_chunks) & set(pred_chunks))
        tokens += len(gold)
        correct_tags += sum(g == p for g, p in zip(gold, pred))
    precision, recall, f1 = _prf(sum(correct.values()), sum(found_guessed.values()),
                                 sum(found_gold.values()))
    per_type = {}
    for type_ in sorted(set(found_gold) | set(found_guessed)):
        p, r, f = _prf(correct[type_], found_guessed[type_], found_gold[type_])
        per_type[type_] = {"precision": p, "recall": r, "f1": f,
                           "found_gold": found_gold[type_],
                           "found_guessed": found_guessed[type_],
                           "correct": correct[type_]}
    return {"precision": precision, "recall": recall, "f1": f1,
            "accuracy": 100.0 * correct_tags / tokens if tokens else 0.0,
            "found_gold": sum(found_gold.values()),
            "found_guessed": sum(found_guessed.values()),
            "correct": sum(correct.values()), "tokens": tokens, "per_type": per_type}
