"""The words of raw text, with their character spans, as google's BasicTokenizer cuts them.

NER labels words, so a raw text must be cut into the same kind of words as the training
files, and an entity's characters must point into the original text. Whitespace alone
does not do that for Chinese and Japanese (no spaces between words: a whole sentence would
be one word with one tag) nor for punctuation glued to a word ("Paris," would put the
comma inside the entity). BasicTokenizer, the first half of google's tokenizer, starts a
new word at each whitespace run and puts every punctuation character and every CJK
ideograph in a word of its own; WordPiece then works inside those words. The same cut is
used here, computed on the original characters so that spans are exact:

* separators: the characters Python's `str.split()` and regular-expression `\\s` split on
  (CoNLL files are read with `str.split()`, so a file's words are never cut across);
* single-character words: google's punctuation (every non-alphanumeric printable ASCII
  character and Unicode category P*) and google's CJK ideograph ranges;
* everything else (letters, digits, kana, Hangul, emoji, control characters) runs on
  until one of the above.

Cutting is idempotent: the words of a word are the word itself. This module holds the
rule's tables, TF-free; bert_tf/text/graph_words.py cuts with them, in the graph (the
signatures) and eagerly (`graph_words.word_spans`: NER's training files and raw texts),
and tests/span_oracles.py keeps the cut in plain Python as the tests' oracle.

    graph_words.word_spans(["我在北京工作, Paris."])[0]
    # [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (8, 13), (13, 14)]
"""

import functools
import re

import numpy as np

from bert_tf.text.text_rules import CJK_RANGES, NUM_CODE_POINTS, punctuation_code_points


@functools.lru_cache(maxsize=1)
def separators():
    """The characters that separate words (Python's `\\s` on str): ASCII whitespace,
    \\x1c-\\x1f, and Unicode's spaces and line/paragraph separators."""
    # One regex pass over all code points (one re.match per character took a second).
    return "".join(re.findall(r"\s", "".join(map(chr, range(NUM_CODE_POINTS)))))


@functools.lru_cache(maxsize=1)
def single_character_ranges():
    """Sorted, disjoint, inclusive (first, last) code point ranges of the characters that
    are always a word alone: google's punctuation and CJK ideographs."""
    alone = np.zeros(NUM_CODE_POINTS + 2, np.int8)     # a False on each side
    alone[1 + np.asarray(punctuation_code_points())] = 1
    for lo, hi in CJK_RANGES:
        alone[1 + lo:2 + hi] = 1
    edges = np.flatnonzero(np.diff(alone))              # rises and falls, alternating
    ranges = [(int(lo), int(hi) - 1) for lo, hi in zip(edges[::2], edges[1::2])]
    return tuple(ranges)


# run_squad.py's whitespace (its `is_whitespace`): the four ASCII ones and U+202F (narrow
# no-break space). SQuAD cuts contexts into words on it alone, in Python
# (tasks/families/squad/data.py) and in the graph (its serving module).
SQUAD_WHITESPACE = " \t\r\n\u202f"
