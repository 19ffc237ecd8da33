"""google-research/bert's text rules and the vocabulary file, in plain Python (no TensorFlow).

Every tokenizer here follows the same rules: the graph tokenizer (`bert_tf.text.tokenization`),
the offline one of the data script (`bert_tf.text.python_tokenizer`, which must not
load TensorFlow), the word cutter of NER (`bert_tf.text.words`) and the vocabulary learner
(`bert_tf.text.wordpiece_learner`). Each rule is defined here once, as google's
`tokenization.py` defines it:

* special tokens and the '##' prefix of a word's continuation pieces;
* CJK ideographs (`is_cjk`): google's `_is_chinese_char` ranges, each a word of its own;
* punctuation (`is_punctuation`): every non-alphanumeric printable ASCII character and
  Unicode's P* categories, each a word of its own;
* cleaning (`is_dropped`): U+0000, U+FFFD and control characters (Cc, Cf, except tab,
  newline and return, which are whitespace) are deleted and do not even split words;
* word breaks (`is_word_break`): google's whitespace, and what `str.split()` splits on
  among the characters cleaning keeps;
* the word limit: a word of more code points than `MAX_CHARS_PER_WORD` is one [UNK];
* the input layout (`pair_layout`): [CLS] A [SEP] B [SEP], column by column, which the
  graph packer (`bert_tf.text.packing.BertPacker`) and the data script's NumPy packer
  (`bert_tf.data.masking.pack`) both follow.

The graph tokenizer cannot call these functions on each character; it looks characters up
in tables built from the `*_code_points()` sets below. tests/text/test_text_rules.py holds the
sets, the graph tables and the offline tokenizer's ASCII tables equal to the predicates on
every code point.
"""

import collections
import functools
import os
import re
import unicodedata

from bert_tf.base.files import decode_text

PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN = (
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# The order of a new vocabulary's first lines (ids 0-4; [PAD] at 0 as in bert-base's).
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)
# What marks a piece that continues a word ('##ing').
CONTINUATION_PREFIX = "##"

# google-research/bert's `_is_chinese_char` ranges (inclusive). Hangul, kana and the
# CJK Extension G plane are not in it, so they are tokenized like any other script.
CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)
# All non-alphanumeric printable ASCII counts as punctuation ('$', '^', '`' included, which
# Unicode files under symbols).
ASCII_PUNCT_RANGES = ((33, 47), (58, 64), (91, 96), (123, 126))
# Unicode's punctuation categories all start with this letter (Pc Pd Pe Pf Pi Po Ps).
PUNCT_CATEGORY_PREFIX = "P"
# Control characters that google's cleaning keeps, as whitespace.
WHITESPACE_CONTROLS = "\t\n\r"

# google's WordpieceTokenizer default: a word of more code points than this is one [UNK].
# (HF's port uses 100; google-research/bert's FullTokenizer uses 200.)
MAX_CHARS_PER_WORD = 200

NUM_CODE_POINTS = 0x110000


def is_cjk(cp):
    """Code point (int) -> True for a CJK ideograph, which becomes a word of its own."""
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


def is_punctuation(ch):
    """Character -> True for google's punctuation, which becomes a word of its own."""
    cp = ord(ch)
    return (any(lo <= cp <= hi for lo, hi in ASCII_PUNCT_RANGES)
            or unicodedata.category(ch).startswith(PUNCT_CATEGORY_PREFIX))


def is_whitespace(ch):
    """google's `_is_whitespace`: space, tab, newline, return and Unicode's Zs."""
    return ch == " " or ch in WHITESPACE_CONTROLS or unicodedata.category(ch) == "Zs"


def is_control(ch):
    """google's `_is_control`: Cc and Cf characters other than tab, newline and return."""
    return ch not in WHITESPACE_CONTROLS and unicodedata.category(ch) in ("Cc", "Cf")


def is_dropped(ch):
    """True for what google's cleaning deletes: U+0000, U+FFFD and control characters.
    They vanish without splitting the word around them."""
    return ch in ("\0", "\ufffd") or is_control(ch)


def is_word_break(ch):
    """True for a character that ends a word once a line is cleaned: google's whitespace,
    and the line/paragraph separators (Zl, Zp) that cleaning keeps but `str.split()`
    splits on."""
    return not is_dropped(ch) and (is_whitespace(ch) or ch.isspace())


@functools.lru_cache(maxsize=1)
def unicode_categories():
    """Unicode general category of every code point, as Python's unicodedata has it (a
    list of NUM_CODE_POINTS str; built once, ~0.3 s)."""
    return [unicodedata.category(chr(cp)) for cp in range(NUM_CODE_POINTS)]


# The same rules over all code points at once, for lookup tables: calling the predicates a
# million times would take seconds. Same rules as the predicates above;
# tests/text/test_text_rules.py holds them equal.

@functools.lru_cache(maxsize=1)
def punctuation_code_points():
    """Sorted tuple of the code points `is_punctuation` accepts."""
    ascii_punct = {cp for lo, hi in ASCII_PUNCT_RANGES for cp in range(lo, hi + 1)}
    return tuple(cp for cp, category in enumerate(unicode_categories())
                 if cp in ascii_punct or category.startswith(PUNCT_CATEGORY_PREFIX))


@functools.lru_cache(maxsize=1)
def dropped_code_points():
    """Sorted tuple of the code points `is_dropped` accepts."""
    keep = {ord(c) for c in WHITESPACE_CONTROLS}
    return tuple(cp for cp, category in enumerate(unicode_categories())
                 if cp in (0, 0xFFFD) or (category in ("Cc", "Cf") and cp not in keep))


@functools.lru_cache(maxsize=1)
def word_break_code_points():
    """Sorted tuple of the code points `is_word_break` accepts."""
    breaks = {ord(c) for c in " " + WHITESPACE_CONTROLS}
    breaks.update(cp for cp, category in enumerate(unicode_categories())
                  if category in ("Zs", "Zl", "Zp"))
    return tuple(sorted(breaks))


# ---------------------------------------------------------------------------- input layout

Layout = collections.namedtuple("Layout", "in_a in_b is_sep real second_segment")


def pair_layout(col, keep_a, keep_b):
    """BERT's input layout, column by column: google's `[CLS] A [SEP] B [SEP]`, then
    padding; a B of no tokens is no segment ([CLS] A [SEP], no second [SEP]).

        0: [CLS] | 1..a: A | a+1: [SEP] | a+2..a+1+b: B | a+2+b: [SEP] (b > 0) | padding

    Written with operators only, so NumPy arrays and TensorFlow tensors both go through it.
    col: the columns, [1, L]; keep_a, keep_b: each row's A and B lengths, [N, 1] (B 0: one
    segment). -> Layout of bool [N, L]: in_a, in_b (the segments' tokens), is_sep, real
    (not padding) and second_segment (segment id 1: B and its [SEP])."""
    end = keep_a + 2 + keep_b                   # the second [SEP]'s column
    has_b = keep_b > 0
    real = (col <= keep_a + 1) | ((col <= end) & has_b)
    return Layout(in_a=(col >= 1) & (col <= keep_a),
                  in_b=(col >= keep_a + 2) & (col < end),
                  is_sep=(col == keep_a + 1) | ((col == end) & has_b),
                  real=real,
                  second_segment=real & (col >= keep_a + 2))


# ------------------------------------------------------------------------------ vocabulary

class VocabError(ValueError):
    """A vocabulary file refused: one line naming the file. `problem` says which check
    failed ("not_found", "not_text", "empty", "blank", "repeated", "missing") and `details`
    where, so that a command can word the line its own way."""

    def __init__(self, message, problem, **details):
        super().__init__(message)
        self.problem = problem
        self.details = details


def _read(path):
    """The bytes of `path`; a path with a scheme (gs://...) through tf.io.gfile."""
    if "://" in path:
        import tensorflow as tf
        if not tf.io.gfile.exists(path):
            raise VocabError(f"vocab file not found: {path}", "not_found")
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()
    if not os.path.exists(path):
        raise VocabError(f"vocab file not found: {path}", "not_found")
    with open(path, "rb") as f:
        return f.read()


def load_vocab(vocab_file, required=(UNK_TOKEN,)):
    """Reads a WordPiece vocabulary: one token per line, id = line number (from 0).

    Lines are stripped of surrounding whitespace, as google's loader does. Raises
    VocabError (a ValueError) with one line naming the file when it is missing, not UTF-8
    text, empty, has a blank line, repeats a token (google's loader would silently give
    the token its last id) or lacks one of the `required` tokens.
    """
    path = vocab_file.decode() if isinstance(vocab_file, bytes) else str(vocab_file)
    raw = _read(path)
    try:
        text = decode_text(raw, path)
    except ValueError as e:
        # Where the first byte that is not UTF-8 lies in the file (none for a NUL byte),
        # for commands that say it that way.
        try:
            raw.decode("utf-8")
            where = {}
        except UnicodeDecodeError as bad:
            where = {"reason": bad.reason, "byte": bad.start}
        raise VocabError(str(e), "not_text", **where) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    tokens = [line.strip() for line in lines]
    if not tokens:
        raise VocabError(f"vocab file {path} is empty", "empty")
    seen = {}
    for i, token in enumerate(tokens):
        if not token:
            raise VocabError(f"vocab file {path}: line {i + 1} is blank", "blank", line=i + 1)
        if token in seen:
            raise VocabError(f"vocab file {path}: token {token!r} appears twice "
                             f"(lines {seen[token] + 1} and {i + 1})", "repeated",
                             token=token, first=seen[token] + 1, second=i + 1)
        seen[token] = i
    missing = [t for t in required if t not in seen]
    if missing:
        raise VocabError(f"vocab file {path} has no {' or '.join(missing)} token", "missing",
                         tokens=missing)
    return tokens


# A vocabulary's own markers ([CLS], [UNK], [unused7]): their capitals say nothing about
# whether the vocabulary's words keep case.
_BRACKETED = re.compile(r"\[[^\]]*\]")
_ASCII_UPPER = re.compile("[A-Z]")
_ASCII_LOWER = re.compile("[a-z]")


def check_case_matches_vocab(vocab_file, do_lower_case):
    """ValueError naming --do_lower_case and `vocab_file` when do_lower_case is false over
    an uncased vocabulary: one whose tokens hold lowercase ASCII letters but no token
    (its [BRACKETED] markers aside) holds an uppercase A-Z. Without lower-casing, text is
    matched against such a vocabulary as written, so every word with a capital letter
    becomes [UNK] without a word said (google-research/bert's validate_case_matches_checkpoint
    guards the same mistake by checkpoint name). A vocabulary without latin letters
    (Chinese) is case-blind and passes; a cased one with do_lower_case true is left to
    the user (lossy, but a known choice)."""
    if do_lower_case:
        return
    lower = False
    for token in load_vocab(vocab_file):
        if _BRACKETED.fullmatch(token):
            continue
        if _ASCII_UPPER.search(token):
            return
        lower = lower or _ASCII_LOWER.search(token) is not None
    if lower:
        raise ValueError(f"--do_lower_case=false with {vocab_file}, an uncased vocabulary "
                         f"(lowercase a-z, no token with an uppercase A-Z): every word "
                         f"with a capital letter would become [UNK]; pass "
                         f"--do_lower_case=true")
