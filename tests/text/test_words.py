"""bert_tf.text.words: where words of raw text start and end (whitespace; punctuation and CJK
ideographs alone): the graph's cut (bert_tf.text.graph_words, what training and the
signatures run) pinned, equal to the plain-Python oracle (tests/span_oracles.py) and to
google's BasicTokenizer."""

import pytest
import tensorflow as tf

from bert_tf.text import words
from bert_tf.base.corpus import docstrings, stdlib_sources
from bert_tf.text import graph_words
from tests import span_oracles


def cut(text):
    """The words of text, by the op training and the signatures run."""
    return [text[a:b] for a, b in graph_words.word_spans([text])[0]]


def docstring_lines(limit):
    """Real English lines: the standard library's docstrings, line by line."""
    lines = []
    for path in stdlib_sources():
        for doc in docstrings(path):
            lines.extend(line for line in doc.split("\n") if line.strip())
        if len(lines) >= limit:
            return lines[:limit]
    return lines


MIXED = [
    "我在北京大学工作，John Smith也是。",
    "《东京新闻》报道：Sony（索尼）的新产品iPhone15很贵！",
    "ＡＢＣ１２３　全角空格和全角字母",
    "日本語のテキストです。カタカナも。",
    "한국어 문장입니다. 😀 emoji!",
    "U.S. policy, isn't it? e-mail: a@b.c",
    "\x00 nul\x00in\x7fside \u200bzero-width\u2028line",
    "",
    "   ",
]


def test_word_spans_hand_checked():
    text = "我在北京工作, Paris. 「東京」ＡＢＣ"
    assert cut(text) == ["我", "在", "北", "京", "工", "作", ",", "Paris", ".", "「",
                         "東", "京", "」", "ＡＢＣ"]
    assert graph_words.word_spans(["U.S. isn't"])[0] == [(0, 1), (1, 2), (2, 3), (3, 4),
                                                         (5, 8), (8, 9), (9, 10)]
    assert graph_words.word_spans(["", " \t\u3000"]) == [[], []]


def test_words_are_cut_idempotently():
    for text in MIXED:
        for word in cut(text):
            assert cut(word) == [word], word


def test_graph_split_equals_python():
    texts = MIXED + docstring_lines(400)
    got, begin, end = graph_words.split_words(
        tf.constant(texts), words.separators(), words.single_character_ranges())
    rows = begin.value_rowids()                     # the word split, back to characters
    to_char = lambda x: tf.RaggedTensor.from_value_rowids(graph_words.byte_to_char(
        tf.constant(texts), rows, x.flat_values), rows, nrows=len(texts)).to_list()
    spans = [list(zip(s, e)) for s, e in zip(to_char(begin), to_char(end))]
    assert spans == [span_oracles.word_spans(text) for text in texts]
    assert graph_words.word_spans(texts) == spans
    assert [[w.decode() for w in row] for row in got.to_list()] == \
        [span_oracles.words(text) for text in texts]
    assert sum(len(s) for s in spans) > 3000


def test_same_cut_as_google_basic_tokenizer():
    """On text without characters google's cleaning deletes, a cased BasicTokenizer gives
    exactly these words (it only differs by deleting control characters)."""
    from bert_tf.text.tokenization import BasicTokenizer
    import unicodedata
    lines = docstring_lines(2000) + MIXED[:6]
    clean = [line for line in lines
             if not any(unicodedata.category(c) in ("Cc", "Cf") and c not in "\t\n\r"
                        for c in line) and "\u2028" not in line]
    basic = BasicTokenizer(do_lower_case=False)       # (a tf.function holds it weakly)
    google = basic.words(tf.constant(clean))
    for line, spans, expected in zip(clean, graph_words.word_spans(clean), google.to_list()):
        assert [line[a:b] for a, b in spans] == [w.decode() for w in expected], line
    assert len(clean) > 1000


@pytest.mark.parametrize("tag,n,expected", [
    ("O", 3, ["O", "O", "O"]),
    ("B-LOC", 1, ["B-LOC"]),
    ("B-LOC", 3, ["B-LOC", "I-LOC", "I-LOC"]),
    ("I-LOC", 2, ["I-LOC", "I-LOC"]),
    ("E-ORG", 3, ["I-ORG", "I-ORG", "E-ORG"]),
    ("S-PER", 2, ["B-PER", "E-PER"]),
    ("S-PER", 4, ["B-PER", "I-PER", "I-PER", "E-PER"]),
])
def test_ner_tags_continue_over_units_and_merge_back(tag, n, expected):
    from tasks.families.ner import task as ner
    assert ner.continue_tag(tag, n) == expected
    assert ner.word_tag(expected) == tag
