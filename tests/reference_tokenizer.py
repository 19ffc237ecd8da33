"""A slow, independent pure-Python oracle for google-research/bert's `FullTokenizer`.

Written from the rules (not from google's code) and used only by the tests: the graph
tokenizer in `bert_tf/text/tokenization.py` must give the same ids on every input. The rules:

1. Text arrives as bytes or str; bytes are decoded as UTF-8 and undecodable bytes dropped.
2. Cleaning, per code point: U+0000, U+FFFD and every category Cc/Cf character except tab,
   newline and carriage return disappear (they are not even a word break); tab, newline,
   carriage return, ' ' and category Zs become ' '. (Only Cc and Cf: private-use,
   surrogate and unassigned characters stay.)
3. Each CJK ideograph of the ranges below gets a space on each side.
4. Split on Python whitespace (`str.split()`, which also breaks at U+2028/U+2029).
5. Uncased only, per whitespace word: `str.lower()` (whose final-sigma rule looks only inside
   that word), NFD, then drop every category Mn character.
6. Each punctuation character becomes its own word; punctuation is ASCII 33-47, 58-64,
   91-96, 123-126 plus every category P* character, judged after step 5.
7. WordPiece per word: a word of more than `max_chars_per_word` code points is one [UNK];
   otherwise take the longest vocabulary prefix, then repeatedly the longest '##'-prefixed
   continuation; if some position has no match, the whole word is one [UNK].
"""

import functools
import unicodedata

CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)
ASCII_PUNCT = frozenset(
    chr(c) for lo, hi in ((33, 47), (58, 64), (91, 96), (123, 126)) for c in range(lo, hi + 1))


# The predicates are cached per character only to keep the corpus-wide parity test fast.
@functools.lru_cache(maxsize=None)
def is_cjk(ch):
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


@functools.lru_cache(maxsize=None)
def is_dropped(ch):
    if ch in "\t\n\r":
        return False
    return ch in "\x00\ufffd" or unicodedata.category(ch) in ("Cc", "Cf")


@functools.lru_cache(maxsize=None)
def is_blank(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


@functools.lru_cache(maxsize=None)
def is_punct(ch):
    return ch in ASCII_PUNCT or unicodedata.category(ch)[0] == "P"


def basic_words(text, do_lower_case=True):
    """Text -> list of words (steps 1-6 of the module docstring)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="ignore")
    cleaned = []
    for ch in text:
        if is_dropped(ch):
            continue
        if is_blank(ch):
            cleaned.append(" ")
        elif is_cjk(ch):
            cleaned.append(f" {ch} ")
        else:
            cleaned.append(ch)
    words = []
    for chunk in "".join(cleaned).split():
        words.extend(chunk_words(chunk, do_lower_case))
    return words


@functools.lru_cache(maxsize=1 << 20)
def chunk_words(chunk, do_lower_case):
    """One whitespace-delimited chunk -> tuple of its words (steps 5 and 6); cached because
    a corpus repeats its chunks."""
    if do_lower_case:
        chunk = unicodedata.normalize("NFD", chunk.lower())
        chunk = "".join(c for c in chunk if unicodedata.category(c) != "Mn")
    words = []
    current = ""
    for ch in chunk:
        if is_punct(ch):
            if current:
                words.append(current)
                current = ""
            words.append(ch)
        else:
            current += ch
    if current:
        words.append(current)
    return tuple(words)


def wordpieces(word, vocab, unk_token="[UNK]", max_chars_per_word=200):
    """Greedy longest-match-first WordPiece of one word (step 7)."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces = []
    start = 0
    while start < len(word):
        for end in range(len(word), start, -1):
            candidate = word[start:end] if start == 0 else "##" + word[start:end]
            if candidate in vocab:
                pieces.append(candidate)
                start = end
                break
        else:
            return [unk_token]
    return pieces


class ReferenceTokenizer:
    """FullTokenizer's behaviour: `tokenize(text)` -> word pieces, `encode(text)` -> ids."""

    def __init__(self, vocab, do_lower_case=True, unk_token="[UNK]", max_chars_per_word=200):
        if isinstance(vocab, str):
            with open(vocab, encoding="utf-8") as f:
                vocab = [line.strip() for line in f]
        self.tokens = list(vocab)
        self.ids = {token: i for i, token in enumerate(self.tokens)}
        self.do_lower_case = do_lower_case
        self.unk_token = unk_token
        self.max_chars_per_word = max_chars_per_word
        self._memo = {}  # word -> pieces

    def tokenize(self, text):
        out = []
        for word in basic_words(text, self.do_lower_case):
            if word not in self._memo:
                self._memo[word] = wordpieces(word, self.ids, self.unk_token,
                                              self.max_chars_per_word)
            out.extend(self._memo[word])
        return out

    def encode(self, text):
        return [self.ids[t] for t in self.tokenize(text)]
