"""google's FullTokenizer in plain Python: exact, fast through caching, no TensorFlow.

`create_pretraining_data` must not load TensorFlow: importing it costs ~0.7 GB of resident
memory per process, four times the whole budget of the data script (see
docs/pretraining_data.md). `bert_tf.text.tokenization.BertTokenizer` is the graph tokenizer used
everywhere else; this module gives the same ids (tests/commands/test_create_pretraining_data.py
checks both against each other and against tests/reference_tokenizer.py).

The rules are google's (docs/tokenization.md lists them). What makes it fast: the rules act
on each whitespace-delimited chunk on its own once a line is cleaned, so the ids of a chunk
are computed once and looked up afterwards. Real text repeats its chunks (Zipf), so after
the first few hundred kB almost every chunk is a dict hit; only line cleaning and
`str.split()` (both C code) touch every character.
"""

import array
import itertools
import operator
import re
import unicodedata

import numpy as np

from bert_tf.text.text_rules import (CONTINUATION_PREFIX, MAX_CHARS_PER_WORD, UNK_TOKEN, is_cjk,
                                     is_dropped, is_punctuation)

# The ASCII part of text_rules' rules as strings, for str.translate and the regexes below
# (built from the rules, so nothing here can disagree with them).
_ASCII_PUNCT = "".join(chr(c) for c in range(128) if is_punctuation(chr(c)))
# An ASCII chunk (no whitespace in it) -> its words: runs of non-punctuation, and each
# punctuation character alone.
_ASCII_WORDS = re.compile("[^" + re.escape(_ASCII_PUNCT) + "]+|[" + re.escape(_ASCII_PUNCT) + "]")
# The same over many chunks joined by newlines; each newline is a piece of its own.
_ASCII_WORDS_JOINED = re.compile(
    "[^\n" + re.escape(_ASCII_PUNCT) + "]+|[" + re.escape(_ASCII_PUNCT) + "]|\n")
# ASCII control characters google deletes (tab, newline and return are whitespace instead).
# Python's str.split() would treat \x0b, \x0c and \x1c-\x1f as word breaks, google does not.
_ASCII_CONTROL = "".join(chr(c) for c in range(128) if is_dropped(chr(c)))
_NOT_CONTROL = bytes(b for b in range(256) if chr(b) not in _ASCII_CONTROL)
# Lines of a batch are joined with this chunk between them (cleaning deletes \x01 from the
# text itself, so it cannot occur in a cleaned line).
_LINE_SEPARATOR = "\x01"
_SEPARATOR_JOIN = " \x01 "


class CachedTokenizer:
    """Lines of text -> WordPiece ids, identical to google's FullTokenizer.

        tok = CachedTokenizer(inputs.load_vocab("vocab.txt"), do_lower_case=True)
        ids, counts = tok.tokenize_lines(["Hello, world!", "Second line."])
        # ids: int32 [total tokens], counts: int64 [lines]

    Caches are bounded (`max_cache_entries` chunks and as many words, ~12 MB), so memory
    does not grow with the corpus.
    """

    def __init__(self, vocab, do_lower_case=True, max_chars_per_word=MAX_CHARS_PER_WORD,
                 max_cache_entries=50_000):
        self.vocab = list(vocab)
        self.ids = {t: i for i, t in enumerate(self.vocab)}
        self.unk_id = self.ids[UNK_TOKEN]
        self.do_lower_case = bool(do_lower_case)
        self.max_chars_per_word = int(max_chars_per_word)
        self.max_cache_entries = int(max_cache_entries)
        # No vocabulary entry is longer than this, so no longer prefix needs a lookup.
        self._longest = max(len(t) for t in self.vocab)
        # word (after normalisation and punctuation split) -> ids; "\n" separates chunks
        # in _add_ascii_chunks and is the only entry without ids.
        self._words = {"\n": ()}
        self._reset_chunks()
        # Per-character decisions that must be made on the whole line, before str.split():
        # deleted characters (no word break) and CJK ideographs (a word each).
        # `_line_map` is a str.translate table; `_special` the characters in it; `_known`
        # every non-ASCII character already classified.
        self._line_map = {ord(c): None for c in _ASCII_CONTROL}
        self._special = set(_ASCII_CONTROL)
        self._known = set()

    def _reset_chunks(self):
        """The chunk cache: chunk -> number k >= 1; the ids of chunk k are
        pool[start[k]:start[k] + length[k]]. Chunk numbers instead of tuples let numpy
        gather the ids of a whole block at once. Number 0 is the line separator."""
        self._chunks = {_LINE_SEPARATOR: 0}
        self._pool = array.array("i")
        self._starts = array.array("q", [0])
        self._lengths = array.array("q", [0])

    # -------------------------------------------------------------------------- lines

    def tokenize_lines(self, lines, batch=4096):
        """list of str -> (int32 [total] ids, int64 [len(lines)] number of ids per line).
        Works `batch` lines at a time, to bound the memory of the intermediate lists."""
        if len(lines) <= batch:
            return self._tokenize_batch(lines)
        parts = [self._tokenize_batch(lines[i:i + batch]) for i in range(0, len(lines), batch)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def _tokenize_batch(self, lines):
        if not lines:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        if all(line.isascii() for line in lines):
            cleaned = lines
        else:
            cleaned = [line if line.isascii() else self._clean_non_ascii(line)
                       for line in lines]
        text = _SEPARATOR_JOIN.join(cleaned)
        # Deleting every byte but the ASCII controls leaves only the separators, unless a
        # line holds a control character (rare: then those lines are cleaned).
        if len(text.encode("utf-8").translate(None, _NOT_CONTROL)) != len(cleaned) - 1:
            text = _SEPARATOR_JOIN.join(line.translate(self._line_map) for line in cleaned)
        # After cleaning no line holds the separator (an ASCII control character), so one
        # str.split() of the joined batch yields every chunk, line ends marked by it.
        chunks = text.split()
        new = set(chunks).difference(self._chunks)
        if new:
            self._add_chunks(new)
        # itemgetter looks up all chunks in one C call (a third faster than map()).
        found = operator.itemgetter(*chunks)(self._chunks) if len(chunks) > 1 else \
            tuple(self._chunks[c] for c in chunks)
        numbers = np.fromiter(found, np.int64, len(chunks))
        starts = np.frombuffer(self._starts, np.int64)[numbers]
        lengths = np.frombuffer(self._lengths, np.int64)[numbers]
        pool = np.frombuffer(self._pool, np.int32) if len(self._pool) else \
            np.zeros(1, np.int32)
        ends = np.cumsum(lengths)                                  # [chunks]
        total = int(ends[-1]) if len(ends) else 0
        # ids: for chunk j, pool[starts[j] : starts[j] + lengths[j]], laid end to end.
        gather = np.arange(total, dtype=np.int64) + np.repeat(starts - (ends - lengths),
                                                              lengths)
        ids = pool[gather]
        # Token count per line: cumulative ids at each separator (and at the end).
        sep_at = np.flatnonzero(numbers == 0)
        line_end = np.concatenate([ends[sep_at], [total]])         # [lines]
        counts = np.diff(line_end, prepend=0)
        if len(self._chunks) > self.max_cache_entries:
            self._shrink_cache(chunks)
        return ids, counts

    def _shrink_cache(self, recent):
        """Keeps only the chunks of the latest batch (the likeliest to come back), so the
        cache stays bounded without losing the common chunks."""
        keep = set(recent)
        old_chunks, old_pool = self._chunks, np.frombuffer(self._pool, np.int32).copy()
        old_starts = np.frombuffer(self._starts, np.int64).copy()
        old_lengths = np.frombuffer(self._lengths, np.int64).copy()
        self._reset_chunks()
        for chunk in keep:
            k = old_chunks[chunk]
            if k == 0:
                continue
            self._chunks[chunk] = len(self._starts)
            self._starts.append(len(self._pool))
            self._lengths.append(int(old_lengths[k]))
            self._pool.extend(old_pool[old_starts[k]:old_starts[k] + old_lengths[k]].tolist())

    def tokenize(self, text):
        """One text -> list of ids (convenience for tests and small inputs)."""
        ids, _ = self.tokenize_lines([text])
        return ids.tolist()

    def _clean_non_ascii(self, line):
        """Deletes google's dropped characters and spaces out CJK ideographs."""
        chars = set(line)
        for ch in chars - self._known:
            self._known.add(ch)
            cp = ord(ch)
            if is_dropped(ch):
                self._line_map[cp] = None
                self._special.add(ch)
            elif is_cjk(cp):
                self._line_map[cp] = f" {ch} "
                self._special.add(ch)
        if self._special.isdisjoint(chars):
            return line
        return line.translate(self._line_map)

    # -------------------------------------------------------------------------- chunks

    def _add_chunks(self, new):
        """Computes the ids of chunks not in the cache. ASCII chunks (nearly all) go
        together: one lower(), one regex pass and a few numpy calls for all of them."""
        ascii_chunks = []
        for chunk in new:
            if chunk.isascii():
                ascii_chunks.append(chunk)
            else:
                self._chunk_miss(chunk)
        if not ascii_chunks:
            return
        text = "\n".join(ascii_chunks)
        if self.do_lower_case:
            text = text.lower()
        pieces = _ASCII_WORDS_JOINED.findall(text)    # words, punctuation, "\n" between
        words = self._words
        for word in set(pieces).difference(words):
            words[word] = self._wordpiece(word)
        found = operator.itemgetter(*pieces)(words) if len(pieces) > 1 else \
            tuple(words[p] for p in pieces)
        lengths = np.fromiter(map(len, found), np.int64, len(found))
        ends = np.cumsum(lengths)
        ids = np.fromiter(itertools.chain.from_iterable(found), np.int32,
                          int(ends[-1]) if len(ends) else 0)
        # Only the "\n" pieces have no ids: they end each chunk but the last.
        chunk_end = np.concatenate([ends[lengths == 0], ends[-1:]])
        chunk_len = np.diff(chunk_end, prepend=0)
        base = len(self._pool)
        self._pool.frombytes(ids.tobytes())
        first = len(self._starts)
        self._starts.frombytes((base + chunk_end - chunk_len).astype(np.int64).tobytes())
        self._lengths.frombytes(chunk_len.astype(np.int64).tobytes())
        self._chunks.update(zip(ascii_chunks, range(first, first + len(ascii_chunks))))
        if len(words) > self.max_cache_entries:
            words.clear()
            words["\n"] = ()

    def _chunk_miss(self, chunk):
        """Number of a new whitespace chunk, after computing its ids (lower-case, strip
        accents, split punctuation, WordPiece) into the pool."""
        if self.do_lower_case:
            chunk_norm = chunk.lower()
            if not chunk_norm.isascii():
                chunk_norm = "".join(c for c in unicodedata.normalize("NFD", chunk_norm)
                                     if unicodedata.category(c) != "Mn")
        else:
            chunk_norm = chunk
        if chunk_norm.isascii():
            words = _ASCII_WORDS.findall(chunk_norm)
        else:
            words = self._split_punct(chunk_norm)
        start = len(self._pool)
        get = self._words.get
        for word in words:
            word_ids = get(word)
            if word_ids is None:
                word_ids = self._words[word] = self._wordpiece(word)
            self._pool.extend(word_ids)
        if len(self._words) > self.max_cache_entries:
            self._words.clear()
            self._words["\n"] = ()
        number = len(self._starts)
        self._starts.append(start)
        self._lengths.append(len(self._pool) - start)
        self._chunks[chunk] = number
        return number

    @staticmethod
    def _split_punct(text):
        words, current = [], []
        for ch in text:
            if is_punctuation(ch):
                if current:
                    words.append("".join(current))
                    current = []
                words.append(ch)
            else:
                current.append(ch)
        if current:
            words.append("".join(current))
        return words

    def _wordpiece(self, word):
        """Greedy longest-match-first WordPiece; a word with an unmatched position, or of
        more than max_chars_per_word code points, is one [UNK]."""
        n = len(word)
        if n > self.max_chars_per_word:
            return (self.unk_id,)
        vocab = self.ids
        out = []
        start = 0
        while start < n:
            end = min(n, start + self._longest)
            while end > start:
                piece = word[start:end] if start == 0 else \
                    CONTINUATION_PREFIX + word[start:end]
                token_id = vocab.get(piece)
                if token_id is not None:
                    break
                end -= 1
            else:
                return (self.unk_id,)
            out.append(token_id)
            start = end
        return tuple(out)
