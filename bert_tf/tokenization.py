"""WordPiece tokenization in the TensorFlow graph, id-for-id identical to google-research/bert.

google's `FullTokenizer` (the tokenizer every released BERT checkpoint was trained with) is
plain Python: clean the text, space out CJK ideographs, split on whitespace, lower-case + NFD +
drop accents per word (uncased models only), split off punctuation, then greedy
longest-match-first WordPiece. `BertTokenizer` below reproduces it with graph ops, so it runs
in tf.data, in tf.function and inside a SavedModel. See docs/tokenization.md for the rules,
the parity tests and the few places where a stock tf-text op alone would have differed.

Two paths, chosen per line:

* printable ASCII (plus tab, newline, carriage return): tf-text's `FastBertTokenizer`, the
  C++ end-to-end normaliser + WordPiece. On this alphabet it is exactly google's algorithm
  and it is the bulk of English text, so it sets the speed.
* anything else: the exact path. Per-code-point classes and mappings are precomputed in
  Python from `unicodedata` (the module google's code uses) into dense lookup tables, so the
  graph sees exactly what Python would: `str.lower()` including its final-sigma rule and
  'İ' -> 'i̇', NFD with canonical reordering, Cc/Cf removal, google's punctuation and CJK
  ranges. The words are then encoded back to UTF-8 and go to tf-text's
  `FastWordpieceTokenizer` (no pre-tokenization). The stock normaliser is not used there
  because it case-folds ('ß' -> 'ss'), turns control characters into spaces (google deletes
  them) and does not space out CJK ideographs.
"""

import functools
import unicodedata

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN = (
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# google-research/bert's `_is_chinese_char` ranges (inclusive). Hangul, kana and the
# CJK Extension G plane are not in it, so they are tokenized like any other script.
CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)
# All non-alphanumeric printable ASCII counts as punctuation ('$', '^', '`' included, which
# Unicode files under symbols).
_ASCII_PUNCT_RANGES = ((33, 47), (58, 64), (91, 96), (123, 126))

# google's WordpieceTokenizer default: a word of more code points than this is one [UNK].
# (HF's port uses 100; google-research/bert's FullTokenizer uses 200.)
DEFAULT_MAX_CHARS_PER_WORD = 200

_NUM_CODE_POINTS = 0x110000
# Lines made only of these bytes take the fast path (validated against the reference on the
# full corpus and on random ASCII in tests/test_tokenization.py).
_FAST_PATH_PATTERN = "[\t\n\r -~]*"

# Classes of an input code point after decoding (low 3 bits of the `info` table).
_OTHER, _DROP, _SPACE, _CJK, _PUNCT = 0, 1, 2, 3, 4
# Final-sigma context classes of an input code point (bits 3-4), as CPython's str.lower()
# sees them: cased (and not case-ignorable), case-ignorable, or neither.
_SIG_CASED, _SIG_IGNORABLE = 1, 2
_CAPITAL_SIGMA, _SMALL_SIGMA, _FINAL_SIGMA = 0x3A3, 0x3C3, 0x3C2
# Bits of the `post` table, looked up on code points after lower-casing + decomposition.
_POST_CCC_MASK, _POST_MN, _POST_PUNCT, _POST_REORDER = 0xFF, 1 << 8, 1 << 9, 1 << 10


def load_vocab(vocab_file):
    """Reads a WordPiece vocabulary: one token per line, id = line number (from 0).

    Lines are stripped of surrounding whitespace, as google's loader does. Raises ValueError
    with one line naming the file when it is missing, empty, has a blank line, repeats a
    token (google's loader would silently give the token its last id) or lacks [UNK].
    """
    path = vocab_file.decode() if isinstance(vocab_file, bytes) else str(vocab_file)
    if not tf.io.gfile.exists(path):
        raise ValueError(f"vocab file not found: {path}")
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"vocab file {path} is not UTF-8: {e}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    tokens = [line.strip() for line in lines]
    if not tokens:
        raise ValueError(f"vocab file {path} is empty")
    seen = {}
    for i, token in enumerate(tokens):
        if not token:
            raise ValueError(f"vocab file {path}: line {i + 1} is blank")
        if token in seen:
            raise ValueError(f"vocab file {path}: token {token!r} appears twice "
                             f"(lines {seen[token] + 1} and {i + 1})")
        seen[token] = i
    if UNK_TOKEN not in seen:
        raise ValueError(f"vocab file {path} has no {UNK_TOKEN} token")
    return tokens


def _is_cjk(cp):
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


def _is_punct(ch):
    cp = ord(ch)
    if any(lo <= cp <= hi for lo, hi in _ASCII_PUNCT_RANGES):
        return True
    return unicodedata.category(ch).startswith("P")


@functools.lru_cache(maxsize=2)
def _code_point_tables(do_lower_case):
    """Per-code-point tables for the exact path, computed once per process (~2 s).

    Returns (info [0x110000] int32, post [0x110000] int32 or None,
    expansion values [E] int32, expansion starts [K] int32, expansion lengths [K] int32).
    info: bits 0-2 class, bits 3-4 final-sigma class, bits 5+ (expansion index + 1) where
    NFD(lower(c)) is not c itself (uncased only).
    """
    info = np.zeros(_NUM_CODE_POINTS, np.int32)
    post = np.zeros(_NUM_CODE_POINTS, np.int32) if do_lower_case else None
    expansions = []
    for cp in range(_NUM_CODE_POINTS):
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if ch in "\t\n\r ":
            cls = _SPACE
        elif cp == 0 or cp == 0xFFFD or cat in ("Cc", "Cf"):
            cls = _DROP
        elif cat == "Zs" or ch in "\u2028\u2029":
            # Zl/Zp survive google's cleaning but then split words in str.split().
            cls = _SPACE
        elif _is_cjk(cp):
            cls = _CJK
        elif _is_punct(ch):
            cls = _PUNCT
        else:
            cls = _OTHER
        value = cls
        if do_lower_case and cat != "Cn":
            ccc = unicodedata.combining(ch)
            post[cp] = (ccc | (_POST_MN if cat == "Mn" else 0)
                        | (_POST_PUNCT if _is_punct(ch) else 0)
                        | (_POST_REORDER if ccc and cat != "Mn" else 0))
            if cls in (_OTHER, _PUNCT, _CJK):
                # CPython decides a capital sigma's form from its neighbours: probe with the
                # neighbour in front of a final capital sigma.
                if (ch + "\u03a3").lower()[-1] == "\u03c2":
                    value |= _SIG_CASED << 3
                elif ("A" + ch + "\u03a3").lower()[-1] == "\u03c2":
                    value |= _SIG_IGNORABLE << 3
                mapped = unicodedata.normalize("NFD", ch.lower())
                if mapped != ch:
                    expansions.append([ord(c) for c in mapped])
                    value |= len(expansions) << 5
        info[cp] = value
    if not do_lower_case:
        return info, None, np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32)
    lengths = np.array([len(e) for e in expansions], np.int32)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32)
    values = np.array([c for e in expansions for c in e], np.int32)
    return info, post, values, starts, lengths


def _utf8_length(cps):
    """Bytes of each code point's UTF-8 encoding. cps: int32 [N] -> int64 [N]."""
    return tf.cast(1 + tf.cast(cps >= 0x80, tf.int32) + tf.cast(cps >= 0x800, tf.int32)
                   + tf.cast(cps >= 0x10000, tf.int32), tf.int64)


def _prev_in_row(x, rows, fill):
    """x shifted right by one inside each row: [N] -> [N], `fill` at the row's first item."""
    shifted = tf.concat([[fill], x[:-1]], axis=0)
    first = tf.concat([[True], rows[1:] != rows[:-1]], axis=0)
    return tf.where(first, fill, shifted)


class BertTokenizer(tf.Module):
    """Text -> WordPiece ids, identical to google-research/bert's `FullTokenizer`.

    Usable eagerly, in `tf.data` maps, inside `tf.function` and in SavedModels (the vocab
    file is tracked as an asset, so the exported directory can be moved).

        tokenizer = BertTokenizer("vocab.txt", do_lower_case=True)
        ids = tokenizer(tf.constant(["Hello, world!"]))    # RaggedTensor [batch, (tokens)]
        ids, starts, ends = tokenizer.tokenize_with_offsets(texts)   # byte offsets
        tokenizer.encode(["Hello, world!"])                # [[7592, 1010, 2088, 999]]

    Args:
      vocab_file: vocabulary, one token per line (see `load_vocab`).
      do_lower_case: True for uncased checkpoints (lower-case, NFD, strip accents).
      max_chars_per_word: a word of more code points than this becomes one [UNK]
        (google's default 200).
    """

    def __init__(self, vocab_file, do_lower_case=True,
                 max_chars_per_word=DEFAULT_MAX_CHARS_PER_WORD, name=None):
        super().__init__(name=name)
        vocab_file = vocab_file.decode() if isinstance(vocab_file, bytes) else str(vocab_file)
        self.vocab = load_vocab(vocab_file)
        self.do_lower_case = bool(do_lower_case)
        self.max_chars_per_word = int(max_chars_per_word)
        if self.max_chars_per_word < 1:
            raise ValueError(f"max_chars_per_word must be >= 1, got {max_chars_per_word}")
        self._ids = {token: i for i, token in enumerate(self.vocab)}
        # Tracked so that tf.saved_model.save copies the file into assets/ and a loaded model
        # finds it wherever the directory was moved (`.vocab_file.asset_path`).
        self.vocab_file = tf.saved_model.Asset(vocab_file)

        # Fast path: printable-ASCII lines (bytes == characters, so the byte limit is the
        # character limit).
        self._fast = tf_text.FastBertTokenizer(
            vocab=self.vocab, token_out_type=tf.int32, unknown_token=UNK_TOKEN,
            max_bytes_per_word=self.max_chars_per_word,
            lower_case_nfd_strip_accents=self.do_lower_case)
        # Exact path: words arrive already split; words over the character limit are replaced
        # before they get here, so the byte limit only has to admit the longest legal word.
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=self.vocab, token_out_type=tf.int32, unknown_token=UNK_TOKEN,
            max_bytes_per_word=4 * self.max_chars_per_word, no_pretokenization=True)

        info, post, exp_values, exp_starts, exp_lengths = _code_point_tables(self.do_lower_case)
        self._info = tf.constant(info)              # [0x110000]
        if self.do_lower_case:
            self._post = tf.constant(post)          # [0x110000]
            self._exp_values = tf.constant(exp_values)    # [E]
            self._exp_starts = tf.constant(exp_starts)    # [K]
            self._exp_lengths = tf.constant(exp_lengths)  # [K]
        self._vocab_tensor = tf.constant(self.vocab)      # [vocab_size]
        self._token_table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                self._vocab_tensor, tf.range(len(self.vocab), dtype=tf.int32)),
            default_value=self.unk_id)

    # ------------------------------------------------------------------ vocabulary

    @property
    def vocab_size(self):
        return len(self.vocab)

    def _special_id(self, token):
        if token not in self._ids:
            raise ValueError(f"vocab file {self.vocab_file.asset_path.numpy().decode()} "
                             f"has no {token} token")
        return self._ids[token]

    @property
    def unk_id(self):
        return self._ids[UNK_TOKEN]

    @property
    def pad_id(self):
        return self._special_id(PAD_TOKEN)

    @property
    def cls_id(self):
        return self._special_id(CLS_TOKEN)

    @property
    def sep_id(self):
        return self._special_id(SEP_TOKEN)

    @property
    def mask_id(self):
        return self._special_id(MASK_TOKEN)

    def token_to_id(self, tokens):
        """Token string(s) -> int32 id(s); unknown tokens give unk_id.

        Python str -> int; a tf.string Tensor/RaggedTensor -> same-shaped int32 ids.
        """
        if isinstance(tokens, str):
            return self._ids.get(tokens, self.unk_id)
        if isinstance(tokens, tf.RaggedTensor):
            return tf.ragged.map_flat_values(self._token_table.lookup, tokens)
        return self._token_table.lookup(tf.convert_to_tensor(tokens, tf.string))

    def id_to_token(self, ids):
        """Id(s) -> token string(s). Python int -> str; a Tensor/RaggedTensor -> tf.string."""
        if isinstance(ids, (int, np.integer)):
            if not 0 <= ids < len(self.vocab):
                raise ValueError(f"token id {ids} is outside the vocabulary [0, "
                                 f"{len(self.vocab)})")
            return self.vocab[ids]
        if isinstance(ids, tf.RaggedTensor):
            return tf.ragged.map_flat_values(tf.gather, self._vocab_tensor, ids)
        return tf.gather(self._vocab_tensor, ids)

    def get_config(self):
        return {"vocab_file": self.vocab_file.asset_path.numpy().decode(),
                "do_lower_case": self.do_lower_case,
                "max_chars_per_word": self.max_chars_per_word}

    # ------------------------------------------------------------------ tokenization

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def __call__(self, texts):
        """texts: tf.string [batch] -> int32 RaggedTensor [batch, (tokens)]."""
        return self._tokenize(texts, with_offsets=False)[0]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize_with_offsets(self, texts):
        """texts: tf.string [batch] -> (ids, starts, ends), each RaggedTensor [batch, (tokens)].

        ids int32; starts/ends int64 byte offsets into each input string, end exclusive. A
        piece covers the input characters it came from: when one character becomes several
        (Hangul syllable -> jamo under NFD, 'İ' -> 'i'), pieces that split it share its span.
        An [UNK] covers its whole word. Dropped characters (controls, U+FFFD, accents) are
        covered only when they sit inside a piece's span.
        """
        return self._tokenize(texts, with_offsets=True)

    def tokenize(self, texts):
        """Same as calling the tokenizer."""
        return self(texts)

    def encode(self, texts, batch_size=8192):
        """Pure-Python convenience: list of str (or bytes) -> list of lists of int ids."""
        if isinstance(texts, (str, bytes)):
            raise ValueError("encode expects a list of strings; wrap a single string in [ ]")
        out = []
        for i in range(0, len(texts), batch_size):
            chunk = [t.encode("utf-8") if isinstance(t, str) else t
                     for t in texts[i:i + batch_size]]
            out.extend(self(tf.constant(chunk, tf.string)).to_list())
        return out

    def encode_as_tokens(self, texts, batch_size=8192):
        """Pure-Python convenience: list of str -> list of lists of word-piece strings."""
        return [[self.vocab[i] for i in row] for row in self.encode(texts, batch_size)]

    def _tokenize(self, texts, with_offsets):
        texts = tf.convert_to_tensor(texts, tf.string)
        # [batch] bool: which lines the C++ end-to-end tokenizer handles exactly.
        fast = tf.strings.regex_full_match(texts, _FAST_PATH_PATTERN)
        fast_idx = tf.where(fast)[:, 0]      # [n_fast]
        exact_idx = tf.where(~fast)[:, 0]    # [n_exact]
        fast_texts = tf.gather(texts, fast_idx)
        exact_texts = tf.gather(texts, exact_idx)
        if with_offsets:
            f_ids, f_starts, f_ends = self._fast.tokenize_with_offsets(fast_texts)
            parts = list(zip((f_ids, f_starts, f_ends),
                             self._exact(exact_texts, with_offsets=True)))
        else:
            parts = [(self._fast.tokenize(fast_texts), self._exact(exact_texts, False)[0])]
        # Put the lines back in input order: position in the concatenation -> input index.
        order = tf.math.invert_permutation(tf.concat([fast_idx, exact_idx], axis=0))
        results = []
        for fast_part, exact_part in parts:
            both = tf.concat([fast_part.with_row_splits_dtype(tf.int64),
                              exact_part.with_row_splits_dtype(tf.int64)], axis=0)
            results.append(tf.gather(both, order))
        return tuple(results)

    def _exact(self, texts, with_offsets):
        """The exact path: texts [n] -> ids (and byte offsets), RaggedTensors [n, (tokens)]."""
        n_lines = tf.shape(texts, out_type=tf.int64)[0]
        chars, char_starts = tf.strings.unicode_decode_with_offsets(
            texts, "UTF-8", errors="ignore")               # [n, (chars)]
        cp = chars.flat_values                             # [N] code points
        rows = chars.value_rowids()                        # [N] line of each
        in_start = char_starts.flat_values                 # [N] byte offset in its line
        in_end = in_start + _utf8_length(cp)
        src = tf.range(tf.size(cp, out_type=tf.int64))     # [N] index of the input char

        # Cleaning: controls, U+0000 and U+FFFD vanish (they do not even split words).
        info = tf.gather(self._info, cp)
        keep = tf.bitwise.bitwise_and(info, 7) != _DROP
        cp, rows, src, info = [tf.boolean_mask(x, keep) for x in (cp, rows, src, info)]
        cls = tf.bitwise.bitwise_and(info, 7)              # [N'] class of each kept char

        if self.do_lower_case:
            cp = self._final_sigma(cp, rows, info)
            cp, rows, src, cls, post = self._lower_nfd(cp, rows, src, cls, info)   # [M] each
            # Only google's ranges become single-character words; after NFD a character may
            # have turned into ASCII punctuation (U+1FEF -> '`'), which counts.
            is_space = cls == _SPACE
            alone = (cls == _CJK) | (tf.bitwise.bitwise_and(post, _POST_PUNCT) != 0)
            not_mn = tf.bitwise.bitwise_and(post, _POST_MN) == 0
            cp, rows, src, is_space, alone = [tf.boolean_mask(x, not_mn) for x in
                                              (cp, rows, src, is_space, alone)]
        else:
            is_space = cls == _SPACE
            alone = (cls == _CJK) | (cls == _PUNCT)

        # Word segmentation: a word starts at a non-space character that is punctuation/CJK
        # or follows a space, punctuation/CJK, or the start of its line.
        prev_breaks = _prev_in_row(is_space | alone, rows, True)
        starts_word = ~is_space & (alone | prev_breaks)
        in_word = ~is_space
        w_cp, w_rows, w_src, w_start = [tf.boolean_mask(x, in_word) for x in
                                        (cp, rows, src, starts_word)]
        word_of_char = tf.cumsum(tf.cast(w_start, tf.int64)) - 1      # [C] word index
        n_words = tf.reduce_sum(tf.cast(w_start, tf.int64))
        word_chars = tf.RaggedTensor.from_value_rowids(
            w_cp, word_of_char, nrows=n_words, validate=False)        # [W, (chars)]
        word_line = tf.boolean_mask(w_rows, w_start)                  # [W]
        too_long = word_chars.row_lengths() > self.max_chars_per_word  # [W]
        words = tf.strings.unicode_encode(word_chars, "UTF-8")        # [W]
        words = tf.where(too_long, "", words)

        # Words over the limit tokenize to nothing here and get one [UNK] appended below.
        unk_rows = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(too_long, tf.int64))], self.unk_id),
            tf.cast(too_long, tf.int64), validate=False)               # [W, (0 or 1)]
        if not with_offsets:
            pieces = self._wordpiece.tokenize(words)                   # [W, (pieces)]
            pieces = tf.concat([pieces.with_row_splits_dtype(tf.int64), unk_rows], axis=1)
            return (tf.RaggedTensor.from_value_rowids(
                pieces, word_line, nrows=n_lines, validate=False).merge_dims(1, 2),)

        pieces, p_start, p_end = self._wordpiece.tokenize_with_offsets(words)
        # Byte offsets inside a word -> input character -> byte offsets in the input line.
        # All word characters laid end to end: g_start[k] = bytes before char k.
        w_len = _utf8_length(w_cp)                                     # [C]
        g_start = tf.cumsum(w_len, exclusive=True)                     # [C]
        word_first = word_chars.row_starts()                           # [W]
        word_base = tf.gather(tf.concat([g_start, [0]], 0), word_first)  # [W] (0 if no chars)
        piece_word = pieces.value_rowids()
        base = tf.gather(word_base, piece_word)
        first_char = tf.searchsorted(g_start, base + p_start.flat_values, side="right") - 1
        last_char = tf.searchsorted(g_start, base + p_end.flat_values - 1, side="right") - 1
        starts = pieces.with_flat_values(tf.gather(in_start, tf.gather(w_src, first_char)))
        ends = pieces.with_flat_values(tf.gather(in_end, tf.gather(w_src, last_char)))
        # [UNK] of an over-long word spans the whole word.
        word_last = word_chars.row_limits() - 1
        unk_starts = unk_rows.with_flat_values(tf.gather(
            in_start, tf.gather(w_src, tf.boolean_mask(word_first, too_long))))
        unk_ends = unk_rows.with_flat_values(tf.gather(
            in_end, tf.gather(w_src, tf.boolean_mask(word_last, too_long))))
        out = []
        for a, b in ((pieces, unk_rows), (starts, unk_starts), (ends, unk_ends)):
            merged = tf.concat([a.with_row_splits_dtype(tf.int64), b], axis=1)
            out.append(tf.RaggedTensor.from_value_rowids(
                merged, word_line, nrows=n_lines, validate=False).merge_dims(1, 2))
        return tuple(out)

    def _final_sigma(self, cp, rows, info):
        """Capital sigma -> final form where CPython's str.lower() would pick it.

        Rule (Unicode's Final_Sigma, as CPython applies it per whitespace word): the nearest
        non-case-ignorable character before it is cased, and the nearest one after it is not
        cased or does not exist. Spaces are neither, so they bound the search; lines too.
        cp, rows, info: [N] -> cp [N] with U+03A3 replaced by U+03C2 where final.
        """
        sig = tf.bitwise.bitwise_and(tf.bitwise.right_shift(info, 3), 3)
        sigma_at = tf.where(cp == _CAPITAL_SIGMA)[:, 0]               # [S]
        not_ignorable = sig != _SIG_IGNORABLE
        anchor = tf.where(not_ignorable)[:, 0]                         # [A] positions
        n_anchor = tf.size(anchor, out_type=tf.int64)
        # rank[i] = how many non-ignorable chars are at or before i (a sigma counts itself).
        rank = tf.gather(tf.cumsum(tf.cast(not_ignorable, tf.int64)), sigma_at)   # [S]
        sigma_row = tf.gather(rows, sigma_at)
        prev = tf.gather(anchor, tf.maximum(rank - 2, 0))
        prev_cased = ((rank >= 2) & (tf.gather(rows, prev) == sigma_row)
                      & (tf.gather(sig, prev) == _SIG_CASED))
        nxt = tf.gather(anchor, tf.minimum(rank, n_anchor - 1))
        next_cased = ((rank < n_anchor) & (tf.gather(rows, nxt) == sigma_row)
                      & (tf.gather(sig, nxt) == _SIG_CASED))
        final = prev_cased & ~next_cased
        return tf.tensor_scatter_nd_update(
            cp, sigma_at[:, None], tf.where(final, _FINAL_SIGMA, _CAPITAL_SIGMA))

    def _lower_nfd(self, cp, rows, src, cls, info):
        """str.lower() then NFD, per character, then canonical reordering.

        Each kept char becomes its precomputed expansion (one or more code points); rows,
        src and cls follow their char. [N] each -> [M] each, plus post-table bits [M].
        """
        expansion = tf.bitwise.right_shift(info, 5) - 1               # [N], -1: unchanged
        # A final sigma was substituted above; it lower-cases to itself.
        expansion = tf.where(cp == _FINAL_SIGMA, -1, expansion)
        has = expansion >= 0
        safe = tf.maximum(expansion, 0)
        lengths = tf.where(has, tf.gather(self._exp_lengths, safe), 1)   # [N]
        owner = tf.repeat(tf.range(tf.size(cp)), lengths)             # [M] source position
        within = tf.range(tf.size(owner)) - tf.gather(
            tf.cumsum(lengths, exclusive=True), owner)                  # [M] index in expansion
        owner_exp = tf.gather(expansion, owner)
        expanded = tf.gather(self._exp_values, tf.gather(
            self._exp_starts, tf.maximum(owner_exp, 0)) + within)
        cp = tf.where(owner_exp >= 0, expanded, tf.gather(cp, owner))
        rows, src, cls = tf.gather(rows, owner), tf.gather(src, owner), tf.gather(cls, owner)
        post = tf.gather(self._post, cp)

        # NFD sorts each run of combining marks by combining class. The sort is only visible
        # after accent stripping for the few spacing marks (Mc) with a non-zero class, so it
        # runs only when one of them is present.
        def reorder():
            ccc = tf.cast(tf.bitwise.bitwise_and(post, _POST_CCC_MASK), tf.int64)
            marked = ccc > 0
            position = tf.range(tf.size(ccc, out_type=tf.int64))
            run_start = marked & ~_prev_in_row(marked, rows, False)
            run_first = tf.gather(tf.where(run_start)[:, 0], tf.maximum(
                tf.cumsum(tf.cast(run_start, tf.int64)) - 1, 0))
            key = tf.where(marked, run_first * 256 + ccc, position * 256)
            order = tf.argsort(key, stable=True)
            return tuple(tf.gather(x, order) for x in (cp, rows, src, cls, post))

        needs_sort = tf.reduce_any(tf.bitwise.bitwise_and(post, _POST_REORDER) != 0)
        return tf.cond(needs_sort, reorder, lambda: (cp, rows, src, cls, post))
