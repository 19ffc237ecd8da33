"""SQuAD: official metric, reader, windows and max context, decoding, mapping back to the
original characters, and learning from MiniLM weights vs random initialisation."""

import collections
import json
import math
import os
import random

import numpy as np
import pytest

from bert_tf.models.task_models import BertSpanLabeler
from tasks.families.squad import metrics as squad_metrics
from tasks.families.squad import postprocess as squad_postprocess
from tasks import squad as squad_command
from tests import span_oracles
from tasks.families.squad import task as squad
from tests.testing import fine_tune_minilm_and_random, tiny_config, write_json

# ----------------------------------------------------------------------------- data

TRAIN = {
    "colour": ["red", "blue", "green", "yellow", "black", "white", "brown", "orange", "pink",
               "purple", "grey"],
    "person": ["John", "Mary", "Peter", "Anna", "David", "Sarah", "Michael", "Linda",
               "Robert", "Emma", "James", "Olivia"],
    "place": ["Paris", "London", "Berlin", "Madrid", "Rome", "Tokyo", "Chicago", "Boston",
              "Moscow", "Sydney", "Toronto", "Dublin"],
    "thing": ["car", "boat", "hat", "house", "bike", "cup", "chair", "table", "lamp", "shirt",
              "kite", "ball", "box", "bag"],
}
HELD_OUT = {
    "colour": ["violet", "crimson", "turquoise", "beige", "maroon", "silver", "golden",
               "navy", "scarlet", "lavender", "ivory", "indigo"],
    "person": ["William", "Sophia", "Thomas", "Grace", "Daniel", "Lucy", "George", "Alice",
               "Henry", "Chloe", "Oliver", "Hannah"],
    "place": ["Vienna", "Lisbon", "Oslo", "Cairo", "Athens", "Prague", "Seattle", "Denver",
              "Munich", "Warsaw", "Istanbul", "Bangkok"],
    "thing": ["truck", "coat", "bottle", "sofa", "jacket", "umbrella", "helmet", "wagon",
              "carpet", "bucket", "bench", "basket", "vase"],
}
# The three facts (colour, buyer, place) come in a random order, joined by words that do
# not tell which is which: only the meaning of a word says what it is.
LISTS = ["The label on the {t} says {0}, {1}, {2}.", "About the {t}: {0}, {1} and {2}.",
         "We wrote down {0}, {1} and {2} for the {t}."]
NO_COLOUR_LISTS = ["The label on the {t} says {0}, {1}.", "About the {t}: {0} and {1}.",
                   "We wrote down {0} and {1} for the {t}."]
FILLERS = ["The weather was nice that day.", "It cost a lot of money.",
           "Nobody expected that.", "The shop was very busy."]
QUESTIONS = ["What colour is the {t}?", "Which colour does the {t} have?",
             "What is the colour of the {t}?"]


def make_squad(path, num_paragraphs, words, seed, version_2=False):
    """A SQuAD-format file: each context lists a thing's colour, buyer and place in a
    random order, and its question asks for the colour. Nothing positional tells the
    answer: a model has to know that "violet" is a colour and "Oslo" is not. v2.0: every
    third context has no colour (its question is unanswerable)."""
    rng = random.Random(seed)
    paragraphs = []
    for n in range(num_paragraphs):
        thing = rng.choice(words["thing"])
        facts = {kind: rng.choice(words[kind]) for kind in ("colour", "person", "place")}
        no_colour = version_2 and n % 3 == 0
        order = rng.sample(sorted(facts) if not no_colour else ["person", "place"],
                           2 if no_colour else 3)
        template = rng.choice(NO_COLOUR_LISTS if no_colour else LISTS)
        sentence = template.format(*[facts[k] for k in order], t=thing)
        filler = rng.choice(FILLERS)
        first = rng.random() < 0.5
        context = f"{sentence} {filler}" if first else f"{filler} {sentence}"
        base = 0 if first else len(filler) + 1
        qid = f"{seed}-{n}"
        question = rng.choice(QUESTIONS).format(t=thing)
        if no_colour:
            qas = [{"id": qid, "question": question, "answers": [], "is_impossible": True}]
        else:
            slot = order.index("colour")
            # The answer's offset: the template formatted up to its slot.
            prefix = template[:template.index("{%d}" % slot)]
            start = base + len(prefix.format(*[facts[k] for k in order], t=thing))
            text = facts["colour"]
            assert context[start:start + len(text)] == text, (context, text)
            qas = [{"id": qid, "question": question,
                    "answers": [{"text": text, "answer_start": start}],
                    "is_impossible": False}]
        paragraphs.append({"context": context, "qas": qas})
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": "v2.0" if version_2 else "1.1",
                   "data": [{"title": "labels", "paragraphs": paragraphs}]}, f)
    return path


# ----------------------------------------------------------------------------- metric

def test_normalize_answer_follows_the_official_rules():
    assert squad_metrics.normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert squad_metrics.normalize_answer("an apple a day") == "apple day"
    # Articles go only as whole words; punctuation is removed before, so "the-end" -> "theend".
    assert squad_metrics.normalize_answer("theatre the-end") == "theatre theend"
    # Only ASCII punctuation is stripped; the em dash and accents stay.
    assert squad_metrics.normalize_answer("Café—Bar") == "café—bar"
    assert squad_metrics.normalize_answer("\tA\n") == ""


def test_exact_and_f1_hand_computed():
    # gold {cat, sat}, prediction {cat, sat, down}: P = 2/3, R = 1, F1 = 0.8.
    assert squad_metrics.f1_score("the cat sat", "cat sat down") == pytest.approx(0.8)
    # Repeated tokens are clipped: gold {x, y, y}, pred {y, y, y}: 2 shared -> 2/3.
    assert squad_metrics.f1_score("x y y", "y y y") == pytest.approx(2 / 3)
    assert squad_metrics.f1_score("red", "blue") == 0.0
    assert squad_metrics.exact_match("The Cat.", "cat") == 1
    assert squad_metrics.exact_match("cat", "cats") == 0
    # Both normalise to nothing: v2.0 counts it right, v1.1 has no shared token.
    assert squad_metrics.f1_score("the", "a", "2.0") == 1.0
    assert squad_metrics.f1_score("the", "a", "1.1") == 0.0
    assert squad_metrics.f1_score("", "red", "2.0") == 0.0
    # Chinese: each ideograph is a token (CMRC 2018's rule). gold {北, 京, 大, 学}, pred
    # {北, 京}: P = 1, R = 1/2, F1 = 2/3; mixed text keeps English words whole.
    assert squad_metrics.answer_tokens("北京大学iPhone 15") == ["北", "京", "大", "学",
                                                             "iphone", "15"]
    assert squad_metrics.f1_score("北京大学", "北京") == pytest.approx(2 / 3)
    assert squad_metrics.exact_match("北京大学", "北京大学") == 1


def _dataset(qas):
    return [{"paragraphs": [{"context": "unused", "qas": qas}]}]


def test_evaluate_v1_takes_the_best_gold_answer_and_counts_missing_ones():
    dataset = _dataset([
        {"id": "a", "answers": [{"text": "blue car"}, {"text": "car"}]},
        {"id": "b", "answers": [{"text": "the big house"}]},
        {"id": "c", "answers": [{"text": "x"}]},
    ])
    out = squad_metrics.evaluate(dataset, {"a": "car", "b": "big red house"}, "1.1")
    # a: EM 1 (second answer); b: EM 0, F1 2*(2/3*1)/(2/3+1) = 0.8; c: missing = 0.
    assert out["exact_match"] == pytest.approx(100 / 3)
    assert out["f1"] == pytest.approx(100 * 1.8 / 3)
    assert (out["total"], out["missing"]) == (3, 1)


def test_evaluate_v2_breakdown_threshold_and_best_threshold_search():
    dataset = _dataset([
        {"id": "q1", "answers": [{"text": "red"}]},
        {"id": "q2", "answers": [{"text": "blue car"}]},
        {"id": "q3", "answers": []},
        {"id": "q4", "answers": []},
    ])
    preds = {"q1": "red", "q2": "car", "q3": "", "q4": "green"}
    out = squad_metrics.evaluate(dataset, preds, "2.0")
    # exact: 1, 0, 1, 0; f1: 1, 2/3, 1, 0.
    assert out["exact"] == pytest.approx(50.0)
    assert out["f1"] == pytest.approx(100 * (1 + 2 / 3 + 1) / 4)
    assert out["HasAns_exact"] == pytest.approx(50.0)
    assert out["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert (out["HasAns_total"], out["NoAns_total"]) == (2, 2)
    assert out["NoAns_exact"] == pytest.approx(50.0)

    # With null odds, questions above the threshold count as answered "": q2 (1 > 0)
    # becomes wrong, q3 and q4 become right.
    na = {"q1": -2.0, "q2": 1.0, "q3": 3.0, "q4": 0.5}
    best = {"q1": "red", "q2": "car", "q3": "yellow", "q4": "green"}
    out = squad_metrics.evaluate(dataset, preds, "2.0", na_probs=na, na_prob_thresh=0.0,
                                 best_predictions=best)
    assert out["exact"] == pytest.approx(75.0)
    assert out["f1"] == pytest.approx(75.0)
    # Search from "all null" (2 right): +q1 (1) -> 3 at -2; +q4 (wrong, -1) -> 2;
    # +q2 (exact 0, f1 2/3) -> 2 / 2.67; +q3 (-1). Best: 3 of 4 at threshold -2.
    assert out["best_exact"] == pytest.approx(75.0)
    assert out["best_exact_thresh"] == -2.0
    assert out["best_f1"] == pytest.approx(75.0)
    assert out["best_f1_thresh"] == -2.0
    # q2 answered exactly and q4's null odds above q2's: q1 (+1) -> 3 at -2, q2 (+1) -> 4
    # at 1.0, q4 (-1) -> 3, q3 (-1) -> 2. Best: all four right at threshold 1.0.
    best["q2"] = "blue car"
    out = squad_metrics.evaluate(dataset, preds, "2.0", na_probs=dict(na, q4=2.0),
                                 best_predictions=best)
    assert (out["best_f1"], out["best_f1_thresh"]) == (pytest.approx(100.0), 1.0)
    assert (out["best_exact"], out["best_exact_thresh"]) == (pytest.approx(100.0), 1.0)


# ----------------------------------------------------------------------------- windows

def _max_context_reference(spans, position):
    """run_squad's rule, written out for one position: the window with the largest
    min(left, right) + 0.01 * length, the first one on ties."""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        if not start <= position < start + length:
            continue
        score = min(position - start, start + length - 1 - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return best_index


def test_doc_spans_hand_computed():
    assert span_oracles.doc_spans(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]
    # A stride longer than the window: windows touch without overlap.
    assert span_oracles.doc_spans(10, 4, 128) == [(0, 4), (4, 4), (8, 2)]
    assert span_oracles.doc_spans(3, 384, 128) == [(0, 3)]
    with pytest.raises(ValueError, match="no room"):
        span_oracles.doc_spans(10, 0, 2)


def test_max_context_choice():
    # google's example: "the man went to the store and bought a gallon of milk" with
    # windows A = 0..4, B = 3..7, C = 6..10: "bought" (7) has most context in C.
    spans = [(0, 5), (3, 5), (6, 5)]
    best = span_oracles.max_context_window(spans, 11)
    assert best[7] == 2
    assert best[4] == 1            # "the": 0 right context in A, min(1, 3) in B
    assert best[0] == 0 and best[10] == 2
    # A tie (same min context, same length): the first window keeps the token.
    assert span_oracles.max_context_window([(0, 5), (2, 5)], 7)[3] == 0
    # Against the rule written out, on many window layouts.
    rng = random.Random(0)
    for _ in range(200):
        n, room, stride = rng.randint(1, 40), rng.randint(1, 12), rng.randint(1, 12)
        spans = span_oracles.doc_spans(n, room, stride)
        best = span_oracles.max_context_window(spans, n)
        assert best.tolist() == [_max_context_reference(spans, p) for p in range(n)]
        for w in range(len(spans)):
            mask = span_oracles.max_context_mask(spans, w, n)
            assert mask.tolist() == [best[spans[w][0] + i] == w for i in range(spans[w][1])]


# ----------------------------------------------------------------------------- decoding

def _window(start_logits, end_logits, context_positions, max_context=None):
    """A window of len(start_logits) positions whose context pieces sit at
    context_positions, piece k covering characters [2k, 2k + 1)."""
    n = len(start_logits)
    offsets = np.full((n, 2), -1)
    for k, p in enumerate(context_positions):
        offsets[p] = (2 * k, 2 * k + 1)
    if max_context is None:
        max_context = np.zeros(n, bool)
        max_context[list(context_positions)] = True
    return {"start_logits": np.asarray(start_logits, float),
            "end_logits": np.asarray(end_logits, float), "offsets": offsets,
            "max_context": np.asarray(max_context, bool)}


CONTEXT = "a b c d e f g"     # piece k = character 2k


def test_nbest_filters_invalid_spans():
    # Positions: 0 [CLS], 1-2 question, 3 [SEP], 4-9 context pieces a..f, 10 [SEP], 11 pad.
    # The largest logits sit on positions that cannot hold an answer.
    start = [9, 20, 0, 0, 1, 5, 0, 0, 0, 0, 30, 40]
    end = [9, 20, 0, 0, 0, 0, 0, 6, 2, 0, 30, 40]
    w = _window(start, end, range(4, 10))
    out = squad_postprocess.decode_example(CONTEXT, [w], n_best_size=20, max_answer_length=3)
    # Valid pairs (start <= end, at most 3 pieces) by score, ties in google's order
    # (start rank, then end rank): b..d 11; c..d, d..d 6; b..b, b..c 5; c..e, d..e, e..e 2;
    # a..a, a..b, a..c 1; c..c, d..f, e..f, f..f 0.
    assert [n["text"] for n in out["nbest"]] == [
        "b c d", "c d", "d", "b", "b c", "c d e", "d e", "e", "a", "a b", "a b c", "c",
        "d e f", "e f", "f"]
    assert out["text"] == "b c d"
    assert (out["start_char"], out["end_char"], out["score"]) == (2, 7, 11.0)
    assert not out["is_impossible"]
    probs = [n["probability"] for n in out["nbest"]]
    assert sum(probs) == pytest.approx(1.0)
    assert probs[0] == pytest.approx(1 / (1 + 2 * math.exp(-5) + 2 * math.exp(-6) +
                                          3 * math.exp(-9) + 3 * math.exp(-10) +
                                          4 * math.exp(-11)))
    # n_best_size cuts the list; max_answer_length removes the 3-piece winner.
    out = squad_postprocess.decode_example(CONTEXT, [w], n_best_size=4, max_answer_length=3)
    assert [n["text"] for n in out["nbest"]] == ["b c d", "c d", "d", "b"]
    out = squad_postprocess.decode_example(CONTEXT, [w], n_best_size=20, max_answer_length=2)
    assert out["text"] == "c d"
    # A piece without its max context here may end a span but not start one.
    no_b = w["max_context"].copy()
    no_b[5] = False
    out = squad_postprocess.decode_example(CONTEXT, [dict(w, max_context=no_b)],
                                           max_answer_length=3)
    texts = [n["text"] for n in out["nbest"]]
    assert out["text"] == "c d" and "a b" in texts
    assert not any(t.startswith("b") for t in texts)


def test_nbest_merges_windows_and_drops_duplicate_texts():
    # Two windows over the same pieces a..c; the same span scored in both is one entry.
    w1 = _window([0, 0, 4, 1, 0], [0, 0, 1, 4, 0], [2, 3, 4])
    w2 = _window([0, 0, 3, 1, 0], [0, 0, 1, 6, 0], [2, 3, 4])
    out = squad_postprocess.decode_example("a b c", [w1, w2], max_answer_length=5)
    texts = [n["text"] for n in out["nbest"]]
    assert out["text"] == "a b"           # 3 + 6 = 9 in window 2 beats 4 + 4 in window 1
    assert texts.count("a b") == 1 and out["nbest"][0]["start_logit"] == 3.0


def test_v2_null_score_is_the_minimum_over_windows_and_threshold_decides():
    w1 = _window([2.0, 0, 1, 0], [1.0, 0, 3, 0], [2, 3])       # null 3, best a 1 + 3 = 4
    w2 = _window([0.5, 0, 0, 0], [1.0, 0, 0, 0], [2, 3])       # null 1.5
    out = squad_postprocess.decode_example("a b", [w1, w2], version_2_with_negative=True,
                                           null_score_diff_threshold=0.0)
    assert out["null_score_diff"] == pytest.approx(1.5 - 4.0)
    assert out["text"] == "a" and not out["is_impossible"]
    assert "" in [n["text"] for n in out["nbest"]]
    # Above the threshold the answer is "": threshold -3 < -2.5.
    out = squad_postprocess.decode_example("a b", [w1, w2], version_2_with_negative=True,
                                           null_score_diff_threshold=-3.0)
    assert (out["text"], out["is_impossible"], out["start_char"]) == ("", True, -1)
    assert out["score"] == pytest.approx(1.5)
    assert out["best_non_null"] == "a"
    # The empty answer ranks by its score in the n-best: 1.5 is below a (4) and a b.
    texts = [n["text"] for n in out["nbest"]]
    assert texts.index("") == sum(1 for n in out["nbest"]
                                  if n["start_logit"] + n["end_logit"] >= 1.5 and n["text"])


# ----------------------------------------------------------------------------- features

def _args(**overrides):
    import argparse
    values = dict(version_2_with_negative=False, max_seq_length=64, doc_stride=128,
                  max_query_length=16)
    values.update(overrides)
    return argparse.Namespace(**values)


UNICODE_CONTEXT = ('Der  Café "Zürich"\u00a0liegt in 東京, naïve re\u0301sume\u0301 '
                   '(1895-1943). Japanese\tfood.')
UNICODE_ANSWERS = {                 # answer as annotated -> answer as predicted
    "Zürich": "Zürich",             # inside quotes, before a no-break space
    "Der  Café": "Der  Café",       # two spaces inside the answer stay two
    "東京": "東京",                   # CJK characters are pieces of their own
    "naïve": "naïve",               # accent stripped by the tokenizer, kept in the answer
    "re\u0301sume\u0301": "re\u0301sume\u0301",   # decomposed accents come back as written
    "1895": "1895",                 # a piece inside the word "(1895-1943)."
    "Japan": "Japanese",            # inside a piece: the whole piece, as run_squad
}


def _unicode_file(tmp_path):
    qas = []
    for i, text in enumerate(UNICODE_ANSWERS):
        qas.append({"id": f"u{i}", "question": "Which one?",
                    "answers": [{"text": text,
                                 "answer_start": UNICODE_CONTEXT.index(text)}]})
    return write_json(tmp_path / "unicode.json",
                      {"data": [{"paragraphs": [{"context": UNICODE_CONTEXT, "qas": qas}]}]})


def test_answers_map_back_to_the_exact_original_characters(tmp_path, tokenizer):
    path = _unicode_file(tmp_path)
    examples, contexts, _, features, report = squad.featurize(
        path, tokenizer, _args(), is_training=True)
    assert report["questions"] == len(UNICODE_ANSWERS) == len(features["token_ids"])
    # Logits that point at the re-aligned training labels decode to the original text.
    n, s = features["token_ids"].shape
    start = np.full((n, s), -10.0)
    end = np.full((n, s), -10.0)
    start[np.arange(n), features["start_positions"]] = 10.0
    end[np.arange(n), features["end_positions"]] = 10.0
    results = squad.postprocess(examples, contexts, features, start, end)
    for i, (annotated, expected) in enumerate(UNICODE_ANSWERS.items()):
        r = results[f"u{i}"]
        assert r["text"] == expected, (annotated, r["text"])
        assert UNICODE_CONTEXT[r["start_char"]:r["end_char"]] == expected
    # Every piece's characters, tokenized again, give that piece's word-initial form.
    offsets = features["offsets"][0]
    ids = features["token_ids"][0]
    for p in np.flatnonzero(offsets[:, 0] >= 0):
        piece = tokenizer.vocab[ids[p]]
        again = tokenizer.encode_as_tokens([UNICODE_CONTEXT[offsets[p, 0]:offsets[p, 1]]])[0]
        assert again[0] == piece.removeprefix("##"), (piece, again)


UNSPACED_SENTENCE = "李明在北京大学工作，他住在上海（Shanghai）。《東京新聞》：iPhone15很贵！"
UNSPACED_CONTEXT = UNSPACED_SENTENCE * 8
UNSPACED_ANSWERS = ["北京", "北京大学", "上海", "Shanghai", "東京新聞", "iPhone", "贵！"]


def test_answers_in_unspaced_chinese_text_are_exact_substrings(tmp_path, tokenizer):
    """A Chinese context without spaces (360 characters, one whitespace "word" to
    run_squad): every annotated answer, inside runs of ideographs, between full-width
    punctuation or glued to Latin letters, decodes to exactly the annotated characters."""
    qas = [{"id": f"z{i}", "question": "哪一个？",
            "answers": [{"text": text, "answer_start": UNSPACED_CONTEXT.index(text) + len(UNSPACED_SENTENCE) * i}]}
           for i, text in enumerate(UNSPACED_ANSWERS)]
    path = write_json(tmp_path / "zh.json", {"data": [{"paragraphs": [
        {"context": UNSPACED_CONTEXT, "qas": qas}]}]})
    examples, contexts, _, features, report = squad.featurize(
        path, tokenizer, _args(max_seq_length=48, doc_stride=16), is_training=True)
    assert report["questions"] == len(UNSPACED_ANSWERS) and report["split_into_windows"]
    assert "answer_not_aligned" not in report
    n, s = features["token_ids"].shape
    start = np.full((n, s), -10.0)
    end = np.full((n, s), -10.0)
    answered = features["start_positions"] > 0
    start[np.flatnonzero(answered), features["start_positions"][answered]] = 10.0
    end[np.flatnonzero(answered), features["end_positions"][answered]] = 10.0
    results = squad.postprocess(examples, contexts, features, start, end)
    for q in qas:
        r, gold = results[q["id"]], q["answers"][0]
        assert r["text"] == gold["text"]
        assert (r["start_char"], r["end_char"]) == (
            gold["answer_start"], gold["answer_start"] + len(gold["text"]))
    # Characters missing from the vocabulary are one [UNK] each, never a long [UNK] word.
    in_context = features["offsets"][..., 0] >= 0
    unk = in_context & (features["token_ids"] == tokenizer.unk_id)
    spans = features["offsets"][unk]
    assert len(spans) and (spans[:, 1] - spans[:, 0] == 1).all()


def test_windows_labels_and_max_context(tmp_path, tokenizer):
    rng = random.Random(3)
    words = [rng.choice(["alpha", "beta", "gamma", "delta", "river", "stone"]) for _ in range(70)]
    words[41] = "Zanzibar"
    context = " ".join(words)
    start = context.index("Zanzibar")
    path = write_json(tmp_path / "long.json", {"data": [{"paragraphs": [{
        "context": context, "qas": [{"id": "q", "question": "Where?",
                                     "answers": [{"text": "Zanzibar", "answer_start": start}]}]}]}]})
    args = _args(max_seq_length=24, doc_stride=7, max_query_length=8)
    _, _, _, f, report = squad.featurize(path, tokenizer, args, is_training=True)
    query = tokenizer.encode(["Where?"])[0]
    answer = tokenizer.encode(["Zanzibar"])[0]
    room = 24 - len(query) - 3
    num_pieces = len(tokenizer.encode([context])[0])
    spans = span_oracles.doc_spans(num_pieces, room, 7)
    assert len(f["token_ids"]) == len(spans) == report["features"] > 3
    holds = 0
    for i, (s, length) in enumerate(spans):
        ids = f["token_ids"][i]
        assert ids[0] == tokenizer.cls_id and ids[len(query) + 1] == tokenizer.sep_id
        assert ids[1:len(query) + 1].tolist() == query
        assert f["padding_mask"][i].sum() == len(query) + length + 3
        assert f["segment_ids"][i].sum() == length + 1      # window + final [SEP]
        sp, ep = f["start_positions"][i], f["end_positions"][i]
        if sp == 0:
            assert ep == 0
        else:
            holds += 1
            assert ids[sp:ep + 1].tolist() == answer
            assert context[f["offsets"][i, sp, 0]:f["offsets"][i, ep, 1]] == "Zanzibar"
    assert holds >= 1
    # Each context piece has its max context in exactly one window.
    counts = collections.Counter()
    for i, (s, length) in enumerate(spans):
        doc_offset = len(query) + 2
        for k in np.flatnonzero(f["max_context"][i]):
            counts[s + k - doc_offset] += 1
    assert sorted(counts) == list(range(num_pieces)) and set(counts.values()) == {1}


# ----------------------------------------------------------------------------- bad input

def test_reader_counts_bad_data(tmp_path):
    path = write_json(tmp_path / "bad.json", {"data": [{"paragraphs": [
        {"context": "   ", "qas": [{"id": "e1", "question": "x?", "answers": []},
                                   {"id": "e2", "question": "y?", "answers": []}]},
        {"context": "The sky is blue.", "qas": [
            {"id": "ok", "question": "Colour?", "answers": [{"text": "blue", "answer_start": 11}]},
            {"id": "moved", "question": "Colour?",
             "answers": [{"text": "blue", "answer_start": 3}]},
            {"id": "absent", "question": "Colour?", "answers": [{"text": "red", "answer_start": 0}]},
            {"id": "none", "question": "Colour?", "answers": []},
            {"id": "blank", "question": "  ", "answers": [{"text": "sky", "answer_start": 4}]},
        ]}]}]})
    examples, contexts, _, report = squad.read_squad_examples(path, is_training=True)
    assert [e.qas_id for e in examples] == ["ok"]
    assert report["empty_context"] == 2
    assert report["answer_not_in_context"] == 2
    assert report["no_answer"] == 1 and report["empty_question"] == 1
    # For evaluation the questions stay (their gold texts are still scored).
    examples, _, _, report = squad.read_squad_examples(path, is_training=False)
    assert [e.qas_id for e in examples] == ["ok", "moved", "absent", "none"]


def test_reader_errors_name_the_file_and_place(tmp_path, capsys, minilm_dir):
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n  {"paragraphs": [}\n]}')
    with pytest.raises(ValueError, match=r"broken\.json: line 2: not valid JSON"):
        squad.read_squad_examples(str(broken))
    missing = write_json(tmp_path / "missing.json",
                         {"data": [{"paragraphs": [{"qas": []}]}]})
    with pytest.raises(ValueError, match=r"missing\.json: data\[0\]\.paragraphs\[0\]: "
                                         r'missing "context"'):
        squad.read_squad_examples(missing)
    wrong = write_json(tmp_path / "wrong.json", {"data": [{"paragraphs": [{
        "context": "c", "qas": [{"id": "a", "question": "q",
                                 "answers": [{"text": "c", "answer_start": "0"}]}]}]}]})
    with pytest.raises(ValueError, match=r"qas\[0\]\.answers\[0\]\.answer_start: expected int"):
        squad.read_squad_examples(wrong)
    # The CLI: one line on stderr and a non-zero exit.
    with pytest.raises(SystemExit) as exit_info:
        squad_command.main(["--output_dir", str(tmp_path / "out"), "--do_train",
                    "--train_file", missing, "--init_checkpoint", str(minilm_dir)])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing.json" in err


# ----------------------------------------------------------------------------- CLI + model

def test_model_outputs_and_mixed_precision(tmp_path, minilm_dir):
    import keras
    from bert_tf.base.config import BertConfig
    from bert_tf.models.encoder import BertEncoder
    config = BertConfig.from_json_file(tiny_config(tmp_path, minilm_dir))
    inputs = {"token_ids": np.array([[101, 2054, 102, 2417, 102, 0]], "int32"),
              "segment_ids": np.array([[0, 0, 0, 1, 1, 0]], "int32"),
              "padding_mask": np.array([[1, 1, 1, 1, 1, 0]], "int32")}
    encoder = BertEncoder.from_config_object(config)
    model = BertSpanLabeler(encoder)
    out = model(inputs)
    assert tuple(out["start_logits"].shape) == tuple(out["end_logits"].shape) == (1, 6)
    # The head is one dense layer over the encoder's sequence output.
    kernel, bias = model.get_layer("squad_head").dense.get_weights()
    hidden = np.asarray(encoder(inputs)["sequence_output"])                  # [1, 6, H]
    np.testing.assert_allclose(np.asarray(out["start_logits"]), hidden @ kernel[:, 0] + bias[0],
                               atol=1e-5)
    np.testing.assert_allclose(np.asarray(out["end_logits"]), hidden @ kernel[:, 1] + bias[1],
                               atol=1e-5)
    for policy in ("mixed_bfloat16", "mixed_float16"):
        low = BertSpanLabeler(BertEncoder.from_config_object(config, dtype=policy))
        low.set_weights(model.get_weights())
        low_out = low(inputs)
        assert low_out["start_logits"].dtype == "float32"
        np.testing.assert_allclose(np.asarray(low_out["start_logits"]),
                                   np.asarray(out["start_logits"]), atol=0.1)
        squad.compile_squad_model(low, keras.optimizers.AdamW(1e-3))
        # float16 needs loss scaling against underflowing gradients; bfloat16 does not.
        scaled = isinstance(low.optimizer, keras.optimizers.LossScaleOptimizer)
        assert scaled == (policy == "mixed_float16")
    keras.backend.clear_session()


def test_cli_v2_predictions_null_odds_and_tuned_threshold(tmp_path, minilm_dir):
    config = tiny_config(tmp_path, minilm_dir)
    train = make_squad(str(tmp_path / "train.json"), 24, TRAIN, 1, version_2=True)
    dev = make_squad(str(tmp_path / "dev.json"), 15, HELD_OUT, 2, version_2=True)
    out = str(tmp_path / "out")
    shape = ["--max_seq_length", "48", "--max_query_length", "16", "--doc_stride", "8",
             "--version_2_with_negative", "--predict_batch_size", "16"]
    metrics = squad_command.main(["--output_dir", out, "--bert_config_file", config, "--vocab_file",
                          os.path.join(minilm_dir, "vocab.txt"), "--do_train", "--do_eval",
                          "--do_predict", "--train_file", train, "--predict_file", dev,
                          "--train_batch_size", "8", "--num_train_epochs", "1"] + shape)
    for name in ("predictions.json", "nbest_predictions.json", "null_odds.json",
                 "eval_results.txt", "squad_config.json", "bert_config.json", "vocab.txt",
                 "best.weights.h5", "last.weights.h5"):
        assert os.path.exists(os.path.join(out, name)), name
    with open(os.path.join(out, "predictions.json")) as f:
        preds = json.load(f)
    with open(os.path.join(out, "null_odds.json")) as f:
        odds = json.load(f)
    with open(dev) as f:
        data = json.load(f)["data"]
    ids = [qa["id"] for p in data[0]["paragraphs"] for qa in p["qas"]]
    assert sorted(preds) == sorted(odds) == sorted(ids)
    # Predictions at the default threshold 0: "" exactly where null - best > 0.
    assert all((preds[q] == "") == (odds[q] > 0.0) for q in ids)
    # The written metrics are the official ones of the written files.
    again = squad_metrics.evaluate(data, preds, "2.0")
    assert again["exact"] == pytest.approx(metrics["exact"])
    assert again["f1"] == pytest.approx(metrics["f1"])
    assert metrics["HasAns_total"] == 10 and metrics["NoAns_total"] == 5
    tuned = metrics["best_f1_thresh"]
    with open(os.path.join(out, "squad_config.json")) as f:
        assert json.load(f)["null_score_diff_threshold"] == tuned

    # Predicting again from output_dir alone uses the tuned threshold, and its F1 is the
    # best F1 the search promised.
    squad_command.main(["--output_dir", out, "--do_predict", "--predict_file", dev] + shape)
    with open(os.path.join(out, "predictions.json")) as f:
        tuned_preds = json.load(f)
    assert all((tuned_preds[q] == "") == (odds[q] > tuned) for q in ids)
    assert squad_metrics.evaluate(data, tuned_preds, "2.0")["f1"] == \
        pytest.approx(metrics["best_f1"])


def test_chinese_cli_predictions_equal_the_raw_text_signature(tmp_path, minilm_dir):
    """tasks.squad on Chinese files in CMRC 2018's layout (unspaced contexts, cut into
    several windows); the exported signature, given the raw questions and contexts,
    answers exactly what the CLI's predictions.json holds, each a substring of its
    context."""
    import tensorflow as tf
    from export.saved_model import build_module
    from tests.chinese_data import ZH_QA_HELD_OUT, ZH_QA_TRAIN, write_zh_squad
    config = tiny_config(tmp_path, minilm_dir)
    train = write_zh_squad(tmp_path / "train.json", 24, ZH_QA_TRAIN, 1)
    dev = write_zh_squad(tmp_path / "dev.json", 12, ZH_QA_HELD_OUT, 2)
    out = str(tmp_path / "out")
    shape = ["--max_seq_length", "32", "--max_query_length", "12", "--doc_stride", "6"]
    squad_command.main(["--output_dir", out, "--bert_config_file", config, "--vocab_file",
                os.path.join(minilm_dir, "vocab.txt"), "--do_train", "--do_predict",
                "--train_file", train, "--predict_file", dev, "--train_batch_size", "8",
                "--num_train_epochs", "1"] + shape)
    with open(os.path.join(out, "predictions.json"), encoding="utf-8") as f:
        predictions = json.load(f)
    with open(dev, encoding="utf-8") as f:
        paragraphs = json.load(f)["data"][0]["paragraphs"]
    questions = [p["qas"][0]["question"] for p in paragraphs]
    contexts = [p["context"] for p in paragraphs]
    assert max(len(c) for c in contexts) > 20                # several windows each
    serve = build_module("squad", out, None, True).signatures()["serving_default"]
    got = serve(question=tf.constant(questions), context=tf.constant(contexts))
    answers = [a.decode() for a in got["answer"].numpy()]
    assert answers == [predictions[p["qas"][0]["id"]] for p in paragraphs]
    for context, answer, start, end in zip(contexts, answers, got["start_char"].numpy(),
                                           got["end_char"].numpy()):
        assert answer and context[start:end] == answer
    assert any(any("\u4e00" <= c <= "\u9fff" for c in a) for a in answers)


# ----------------------------------------------------------------------------- learning

@pytest.mark.slow
def test_minilm_learns_held_out_colours_and_random_init_does_not(tmp_path, minilm_dir,
                                                                 tokenizer):
    """160 training questions, one epoch of 10 steps; held out: unseen colours, names, cities
    and things. Measured: see tasks/README.md ("Learning from MiniLM: SQuAD and NER")."""
    args = _args(max_seq_length=32, max_query_length=16, doc_stride=128)   # one window each
    train = squad.featurize(make_squad(str(tmp_path / "train.json"), 160, TRAIN, 1),
                            tokenizer, args, is_training=True)
    examples, contexts, dataset, features, _ = squad.featurize(
        make_squad(str(tmp_path / "dev.json"), 60, HELD_OUT, 2), tokenizer, args,
        is_training=False)

    def score(model):
        start, end = squad.predict_logits(model, features, 60)
        results = squad.postprocess(examples, contexts, features, start, end)
        return squad.evaluate_results(dataset, results, False, 0.0)

    pretrained, random_init = fine_tune_minilm_and_random(
        minilm_dir, BertSpanLabeler, squad.compile_squad_model,
        squad.make_dataset(train[3], 16, training=True, seed=1).repeat(),
        len(train[3]["token_ids"]), score, learning_rate=2e-4, batch_size=16)
    print("minilm", pretrained, "random", random_init)
    assert pretrained["exact_match"] >= 70.0
    assert pretrained["f1"] >= 75.0
    assert random_init["f1"] <= 55.0
    assert pretrained["f1"] - random_init["f1"] >= 30.0


@pytest.mark.slow
def test_minilm_answers_in_unspaced_chinese_and_random_init_does_not(tmp_path, minilm_dir,
                                                                     tokenizer):
    """The colour test in Chinese (CMRC 2018's layout: SQuAD JSON, unspaced contexts,
    full-width punctuation): "what colour is the X?" over a context listing a colour (an
    English word between Chinese characters and full-width marks), a buyer and a place
    in random order. Held out: unseen colours, names, places and things. Every answer
    must be an exact substring of its context. Measured: see tasks/README.md; at
    max_seq_length 40, MiniLM EM 100 and random init 28.3 (20.0-26.7 with the shuffle
    orders of seeds 2-5)."""
    import keras

    from tests.chinese_data import ZH_QA_HELD_OUT, ZH_QA_TRAIN, write_zh_squad
    # Question and context take up to 37 pieces: one window each at 40 (64 only added
    # padding to every step).
    args = _args(max_seq_length=40, max_query_length=16, doc_stride=128)
    train = squad.featurize(write_zh_squad(tmp_path / "train.json", 160, ZH_QA_TRAIN, 1),
                            tokenizer, args, is_training=True)
    examples, contexts, dataset, features, _ = squad.featurize(
        write_zh_squad(tmp_path / "dev.json", 60, ZH_QA_HELD_OUT, 2), tokenizer, args,
        is_training=False)
    assert len(train[3]["token_ids"]) == 160 and len(features["token_ids"]) == 60

    def score(model):
        start, end = squad.predict_logits(model, features, 60)
        results = squad.postprocess(examples, contexts, features, start, end)
        for e in examples:                       # every answer is a substring, exactly
            r = results[e.qas_id]
            assert contexts[e.context_index][r["start_char"]:r["end_char"]] == r["text"]
        return squad.evaluate_results(dataset, results, False, 0.0)

    # The shuffle order follows the global seed at the time the dataset is made: set, so
    # that the scores do not depend on which tests ran before.
    keras.utils.set_random_seed(1)
    pretrained, random_init = fine_tune_minilm_and_random(
        minilm_dir, BertSpanLabeler, squad.compile_squad_model,
        squad.make_dataset(train[3], 16, training=True, seed=1).repeat(),
        len(train[3]["token_ids"]), score, learning_rate=2e-4, batch_size=16)
    print("minilm", pretrained, "random", random_init)
    assert pretrained["exact_match"] >= 70.0
    assert random_init["exact_match"] <= 40.0
    assert pretrained["exact_match"] - random_init["exact_match"] >= 40.0
