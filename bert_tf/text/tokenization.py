"""WordPiece tokenization in the TensorFlow graph, id-for-id identical to google-research/bert.

google's `FullTokenizer` (the tokenizer every released BERT checkpoint was trained with) is
plain Python: clean the text, space out CJK ideographs, split on whitespace, lower-case + NFD +
drop accents per word (uncased models only), split off punctuation, then greedy
longest-match-first WordPiece. `BertTokenizer` below reproduces it with graph ops, so it runs
in tf.data, in tf.function and inside a SavedModel. See docs/tokenization.md for the rules,
the parity tests and the few places where a stock tf-text op alone would have differed.

Two paths, chosen per line:

* the fast path: tf-text's `FastBertTokenizer`, the C++ end-to-end normaliser + WordPiece.
  Its normaliser is ICU's NFKC case folding, not google's lower() + NFD, so it is exact only
  on some characters. Which ones is measured, not assumed: at construction every assigned
  code point is run through it and compared with google's rule (see `_fast_path_alphabet`);
  ~129k of ~134k pass when uncased (all of ASCII, most letters, accents, punctuation). A
  line goes this way when all its characters pass and no run of non-space characters is
  longer than the word limit. This path sets the speed.
* the exact path, for every other line: per-code-point classes and mappings precomputed in
  Python from `unicodedata` (the module google's code uses) into dense lookup tables, so the
  graph sees exactly what Python would: `str.lower()` including its final-sigma rule and
  'İ' -> 'i̇', NFD with canonical reordering, Cc/Cf removal, google's punctuation and CJK
  ranges. The words are encoded back to UTF-8 and go to tf-text's `FastWordpieceTokenizer`
  (no pre-tokenization), and over-long words become [UNK] by their character count.

Why one file: the two paths must agree character for character, and the tables that
decide between them (`_fast_path_alphabet`) are built from the same code-point rules as the
exact path's tables; kept together, one reading shows that they cannot drift apart.
"""

import functools
import os
import sys
import unicodedata

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.base.files import decode_text
from bert_tf.base.graph_calls import not_inlined
# CJK_RANGES and load_vocab are also this module's public API (tasks/families/squad/metrics.py,
# the README's examples); check_case_matches_vocab too (tasks/driver.py), defined without
# TensorFlow so commands check the flag before they import it.
from bert_tf.text.text_rules import (CJK_RANGES, CLS_TOKEN, CONTINUATION_PREFIX, MASK_TOKEN,
                                     MAX_CHARS_PER_WORD, NUM_CODE_POINTS, PAD_TOKEN, SEP_TOKEN,
                                     UNK_TOKEN, check_case_matches_vocab, dropped_code_points,
                                     is_punctuation, load_vocab, punctuation_code_points,
                                     unicode_categories, word_break_code_points)

# RE2 refuses counted repetitions above 1000.
_RE2_MAX_REPEAT = 1000

# Classes of an input code point after decoding (low 3 bits of the `info` table).
_OTHER, _DROP, _SPACE, _CJK, _PUNCT = 0, 1, 2, 3, 4
# Final-sigma context classes of an input code point (bits 3-4), as CPython's str.lower()
# sees them: cased (and not case-ignorable), case-ignorable, or neither.
_SIG_CASED, _SIG_IGNORABLE = 1, 2
_CAPITAL_SIGMA, _FINAL_SIGMA = 0x3A3, 0x3C2
# Bits of the `post` table, looked up on code points after lower-casing + decomposition.
_POST_CCC_MASK, _POST_MN, _POST_PUNCT, _POST_REORDER = 0xFF, 1 << 8, 1 << 9, 1 << 10


def check_vocab_fits(vocab_file, vocab_size):
    """ValueError naming `vocab_file` when it has more tokens than a model's `vocab_size`
    (the model has no embedding for the extra ids: a vocabulary of another model). Fewer
    tokens are allowed, since released tables are sometimes padded up (to a multiple of
    8, for instance), but said in one note on stderr: a vocabulary of another, smaller
    model fits too, and nothing else would tell."""
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        lines = decode_text(f.read(), vocab_file).split("\n")
    count = len(lines) - (lines[-1] == "")      # the newline that ends the last line
    if count > vocab_size:
        raise ValueError(f"{vocab_file}: {count} tokens, more than the model's vocab_size "
                         f"{vocab_size} (a vocabulary of another model?)")
    if count < vocab_size:
        print(f"note: {vocab_file} has {count} tokens, the model's embedding table "
              f"{vocab_size} rows: ids {count}..{vocab_size - 1} are never produced",
              file=sys.stderr, flush=True)


@functools.lru_cache(maxsize=1)
def _assigned_code_points():
    """Code points that are not unassigned, private-use or surrogates (int array)."""
    categories = unicode_categories()
    return np.array([cp for cp in range(NUM_CODE_POINTS)
                     if categories[cp] not in ("Cn", "Co", "Cs")], np.int64)


@functools.lru_cache(maxsize=2)
def _code_point_tables(do_lower_case):
    """`_compute_code_point_tables`, once per process, kept in the table cache."""
    names = ("info", "post", "values", "starts", "lengths")
    tables = _cached_tables("code_point_tables", do_lower_case, lambda: dict(zip(
        names, _compute_code_point_tables(do_lower_case))))
    return tuple(tables[n] if n != "post" or do_lower_case else None for n in names)


def _compute_code_point_tables(do_lower_case):
    """Per-code-point tables for the exact path (~3 s of Python per casing).

    Returns (info [0x110000] int32, post [0x110000] int32 (empty when cased),
    expansion values [E] int32, expansion starts [K] int32, expansion lengths [K] int32).
    info: bits 0-2 class, bits 3-4 final-sigma class, bits 5+ (expansion index + 1) where
    NFD(lower(c)) is not c itself (uncased only).
    """
    categories = unicode_categories()
    # The classes are text_rules' rules as a table (text_rules.is_dropped, is_word_break,
    # is_cjk, is_punctuation); tests/text/test_text_rules.py holds them equal on every code point.
    punct = np.zeros(NUM_CODE_POINTS, bool)
    punct[list(punctuation_code_points())] = True
    # Precedence as in google's cleaning: dropped, then whitespace, then CJK, then
    # punctuation; assigned here from lowest to highest.
    info = np.zeros(NUM_CODE_POINTS, np.int32)
    info[punct] = _PUNCT
    for lo, hi in CJK_RANGES:
        info[lo:hi + 1] = _CJK
    info[list(word_break_code_points())] = _SPACE
    info[list(dropped_code_points())] = _DROP
    if not do_lower_case:
        empty = np.zeros(0, np.int32)
        return info, empty, empty, empty, empty

    # Unassigned, private-use and surrogate code points have no case, decomposition or
    # combining class, so only assigned characters need the slow per-character probes.
    post = np.zeros(NUM_CODE_POINTS, np.int32)
    post[punct] |= _POST_PUNCT
    post[np.fromiter((c == "Mn" for c in categories), bool, NUM_CODE_POINTS)] |= _POST_MN
    expansions = []
    for cp in _assigned_code_points().tolist():
        ch = chr(cp)
        ccc = unicodedata.combining(ch)
        if ccc:
            post[cp] |= ccc | (_POST_REORDER if categories[cp] != "Mn" else 0)
        cls = info[cp]
        if cls == _DROP or cls == _SPACE:
            continue
        # CPython decides a capital sigma's form from its neighbours: probe with the
        # neighbour in front of a final capital sigma.
        if (ch + "\u03a3").lower()[-1] == "\u03c2":
            info[cp] |= _SIG_CASED << 3
        elif ("A" + ch + "\u03a3").lower()[-1] == "\u03c2":
            info[cp] |= _SIG_IGNORABLE << 3
        mapped = unicodedata.normalize("NFD", ch.lower())
        if mapped != ch:
            expansions.append([ord(c) for c in mapped])
            info[cp] |= len(expansions) << 5
    lengths = np.array([len(e) for e in expansions], np.int32)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32)
    values = np.array([c for e in expansions for c in e], np.int32)
    return info, post, values, starts, lengths


@functools.lru_cache(maxsize=2)
def _normalizer_model(do_lower_case):
    """tf-text's FastBertNormalizer model (built from ICU tables, ~0.6 s), once per process,
    kept in the table cache."""
    return _cached_tables("fast_bert_normalizer", do_lower_case, lambda: {
        "model": np.frombuffer(tf_text.build_fast_bert_normalizer_model(do_lower_case),
                               np.uint8)})["model"].tobytes()


@functools.lru_cache(maxsize=2)
def _fast_path_alphabet(do_lower_case):
    """`_compute_fast_path_alphabet`, once per process, kept in the table cache."""
    return _cached_tables("fast_path_alphabet", do_lower_case, lambda: {
        "code_points": _compute_fast_path_alphabet(do_lower_case)})["code_points"]


def _table_cache_path(name, do_lower_case):
    """Where a table lives in the cache: $BERT_TF_CACHE/tables (bert_tf/base/files.py), under
    a key of everything it is computed from (this module's and text_rules' source, the
    Unicode tables of this Python, tf-text's and TensorFlow's versions), so a change to
    any of them computes it again."""
    import hashlib
    from bert_tf.text import text_rules
    from bert_tf.base.files import cache_dir
    key = hashlib.sha256()
    for module in (__file__, text_rules.__file__):
        with open(module, "rb") as f:
            key.update(f.read())
    key.update(repr((name, bool(do_lower_case), unicodedata.unidata_version,
                     sys.version_info[:2], tf_text.__version__, tf.__version__)).encode())
    casing = "uncased" if do_lower_case else "cased"
    return os.path.join(cache_dir(), "tables", f"{name}-{casing}-{key.hexdigest()[:16]}.npz")


def _cached_tables(name, do_lower_case, compute):
    """The arrays `compute()` returns ({name: array}), read from the table cache when a
    whole copy is there, else computed and stored (under a private name, then renamed, so
    concurrent processes never read half a file). Computing them costs seconds in every
    process that builds a tokenizer; reading them, milliseconds. A cache that cannot be
    read or written is only slower."""
    import tempfile
    import zipfile
    path = _table_cache_path(name, do_lower_case)
    try:
        with np.load(path, allow_pickle=False) as stored:
            return {k: stored[k] for k in stored.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        pass
    arrays = compute()
    tmp = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=os.path.dirname(path), suffix=".tmp",
                                         delete=False) as f:
            tmp = f.name
            np.savez_compressed(f, **arrays)
        os.replace(tmp, path)
    except OSError:
        if tmp and os.path.exists(tmp):
            os.remove(tmp)
    return arrays


def _compute_fast_path_alphabet(do_lower_case):
    """Code points on which FastBertTokenizer behaves exactly like google's rules.

    The normaliser and the pre-tokenizer of FastBertTokenizer act on each character alone,
    so a line made only of characters that behave right one at a time is tokenized right.
    Each candidate c is checked twice: the normaliser must turn c into what google's rule
    makes of it (g: '' if dropped, lower()+NFD-Mn if uncased), and the tokenization of
    'a' + c + 'a' with the vocabulary [UNK], a, ##a must show the same split decision as
    google's (c or g a space, a word of its own, part of the word, or gone).
    Left out up front: characters whose google form depends on their neighbours (capital
    sigma when lower-casing; spacing marks with a non-zero combining class, which NFD may
    reorder), whose form is longer than one character (a raw run then bounds no word
    length), and unassigned, private-use and surrogate code points. Returns a sorted int
    array of code points.
    """
    info, post, exp_values, exp_starts, exp_lengths = _code_point_tables(do_lower_case)
    candidates, expected = [], []
    for cp in _assigned_code_points().tolist():
        if do_lower_case and cp == _CAPITAL_SIGMA:
            continue
        cls = info[cp] & 7
        if cls == _DROP:
            google = ""
        elif cls == _SPACE:
            google = " "
        elif do_lower_case and info[cp] >> 5:
            k = (info[cp] >> 5) - 1
            mapped = exp_values[exp_starts[k]:exp_starts[k] + exp_lengths[k]]
            if any(post[m] & _POST_REORDER for m in mapped):
                continue
            google = "".join(chr(m) for m in mapped if not post[m] & _POST_MN)
        elif do_lower_case and post[cp] & (_POST_REORDER | _POST_MN):
            if post[cp] & _POST_REORDER:
                continue
            google = ""
        else:
            google = chr(cp)
        if len(google) > 1:
            continue
        candidates.append(cp)
        expected.append(google)

    model = tf.constant(np.frombuffer(_normalizer_model(do_lower_case), np.uint8))
    probe = tf_text.FastBertTokenizer(
        vocab=[UNK_TOKEN, "a", "##a"], token_out_type=tf.int32, max_bytes_per_word=64,
        fast_bert_normalizer_model_buffer=model)
    chars = tf.constant([chr(cp).encode("utf-8") for cp in candidates])
    normalized = tf_text.FastBertNormalizer(model_buffer=model).normalize(chars).numpy()
    tokens = probe.tokenize(tf.strings.join(["a", chars, "a"]))
    lengths = tokens.row_lengths().numpy()
    flat = tokens.flat_values.numpy()
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])

    unk, a, suffix_a = 0, 1, 2
    passed = []
    for i, (cp, google, norm) in enumerate(zip(candidates, expected, normalized)):
        got = flat[starts[i]:starts[i] + lengths[i]].tolist()
        if google == " ":
            ok = got == [a, a]
        else:
            if google == "":
                want = [a, suffix_a]
            elif (info[cp] & 7) == _CJK or is_punctuation(google):
                want = [a, unk, a]
            elif google == "a":
                want = [a, suffix_a, suffix_a]
            else:
                want = [unk]
            ok = norm == google.encode("utf-8") and got == want
        if ok:
            passed.append(cp)
    return np.array(passed, np.int64)


def _char_class(code_points):
    """Sorted code points -> an RE2 character class of their ranges, e.g. [\\x{9}-\\x{a}]."""
    if len(code_points) == 0:
        return "[^\\x{0}-\\x{10ffff}]"
    breaks = np.nonzero(np.diff(code_points) != 1)[0]
    firsts = np.concatenate([code_points[:1], code_points[breaks + 1]])
    lasts = np.concatenate([code_points[breaks], code_points[-1:]])
    parts = [f"\\x{{{lo:x}}}" if lo == hi else f"\\x{{{lo:x}}}-\\x{{{hi:x}}}"
             for lo, hi in zip(firsts.tolist(), lasts.tolist())]
    return "[" + "".join(parts) + "]"


def _long_run_pattern(max_chars_per_word):
    """RE2 pattern: the line holds more than max_chars_per_word characters in a row that
    are not ASCII whitespace (so it may hold a word over the limit)."""
    n = max_chars_per_word + 1
    atom = "[^\\t\\n\\r ]"
    if n <= _RE2_MAX_REPEAT:
        run = f"{atom}{{{n}}}"
    else:
        q, r = divmod(n, _RE2_MAX_REPEAT)
        run = f"(?:{atom}{{{_RE2_MAX_REPEAT}}}){{{q}}}{atom}{{{r}}}"
    return f"(?s).*{run}.*"


def _as_uint8(model_bytes):
    return tf.constant(np.frombuffer(model_bytes, np.uint8))


def _utf8_length(cps):
    """Bytes of each code point's UTF-8 encoding. cps: int32 [N] -> int64 [N]."""
    return tf.cast(1 + tf.cast(cps >= 0x80, tf.int32) + tf.cast(cps >= 0x800, tf.int32)
                   + tf.cast(cps >= 0x10000, tf.int32), tf.int64)


def _row_ids(row_splits, n):
    """Row of each of the n values of a ragged tensor with these row splits.

    RaggedTensor.value_rowids() goes through tf.repeat, which builds a [rows, longest row]
    mask; one long line made it the slowest op of the exact path. This is O(n log rows).
    """
    return tf.searchsorted(row_splits[1:], tf.range(n, dtype=row_splits.dtype), side="right",
                           out_type=row_splits.dtype)


def _prev_in_row(x, rows, fill):
    """x shifted right by one inside each row: [N] -> [N], `fill` at the row's first item."""
    shifted = tf.concat([[fill], x[:-1]], axis=0)
    first = tf.concat([[True], rows[1:] != rows[:-1]], axis=0)
    return tf.where(first, fill, shifted)


class _TwoStageTable(tf.Module):
    """A per-code-point int32 table stored as 128-entry blocks plus a block index.

    Most blocks repeat (unassigned planes, runs of letters with the same class), so the
    0x110000-entry tables shrink from 4.4 MB to under 0.2 MB each in a SavedModel, for one
    extra gather per character.
    """

    BITS = 7

    def __init__(self, table):
        super().__init__()
        rows = table.astype(np.int32).reshape(-1, 1 << self.BITS)
        first_seen = {}   # block bytes -> block number (np.unique(axis=0) is 50x slower)
        block_of = np.array([first_seen.setdefault(r.tobytes(), len(first_seen)) for r in rows],
                            np.int32)
        blocks = np.stack([rows[i] for i in np.unique(block_of, return_index=True)[1]])
        self._block_of = tf.constant(block_of)             # [0x110000 / 128]
        self._blocks = tf.constant(blocks.reshape(-1))     # [blocks * 128]

    def lookup(self, cps):
        """cps: int32 code points [N] -> table values [N]."""
        block = tf.gather(self._block_of, tf.bitwise.right_shift(cps, self.BITS))
        return tf.gather(self._blocks, block * (1 << self.BITS)
                         + tf.bitwise.bitwise_and(cps, (1 << self.BITS) - 1))


class BasicTokenizer(tf.Module):
    """google's BasicTokenizer in the graph: text -> words, exactly as `FullTokenizer` splits.

    Cleans (deletes U+0000, U+FFFD and Cc/Cf characters except tab/newline/return; other
    whitespace becomes a space), puts CJK ideographs in words of their own, and when
    `do_lower_case` lower-cases with Python's rules (final sigma included), decomposes
    (NFD, canonical order) and drops Mn marks; then splits at whitespace and around each
    punctuation character. No vocabulary involved: `build_vocab` counts its words.

        BasicTokenizer(do_lower_case=True).words(tf.constant(["Héllo, WORLD!"]))
        # <tf.RaggedTensor [[b'hello', b',', b'world', b'!']]>
    """

    def __init__(self, do_lower_case=True, name=None):
        super().__init__(name=name)
        self.do_lower_case = bool(do_lower_case)
        info, post, exp_values, exp_starts, exp_lengths = _code_point_tables(self.do_lower_case)
        self._info = _TwoStageTable(info)
        if self.do_lower_case:
            self._post = _TwoStageTable(post)
            self._exp_values = tf.constant(exp_values)    # [E]
            self._exp_starts = tf.constant(exp_starts)    # [K]
            self._exp_lengths = tf.constant(exp_lengths)  # [K]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def words(self, texts):
        """texts: tf.string [batch] -> words, tf.string RaggedTensor [batch, (words)]."""
        split = self._split(texts, with_sources=False)
        words = tf.strings.unicode_encode(split["word_chars"], "UTF-8")   # [W]
        return tf.RaggedTensor.from_value_rowids(
            words, split["word_line"], nrows=split["n_lines"], validate=False)

    def _split(self, texts, with_sources):
        """texts [n] -> dict: "word_chars" code points [W, (chars)], "word_line" [W] line of
        each word, "n_lines"; with_sources also "source" [C] input character of each word
        character, "char_starts"/"char_rows" [N] byte offset and line of each input
        character, "alive" [S] sorted input characters that survived normalisation.

        Works on the code points of all lines laid end to end ([N] arrays), carried together
        in a dict: "cp" code point, "rows" line, "cls" class, "src" input character.
        """
        n_lines = tf.shape(texts, out_type=tf.int64)[0]
        chars, char_starts = tf.strings.unicode_decode_with_offsets(
            texts, "UTF-8", errors="ignore")               # [n, (chars)]
        cp = chars.flat_values                             # [N] code points
        n_chars = tf.size(cp, out_type=tf.int64)
        rows = _row_ids(chars.row_splits, n_chars)         # [N] line of each
        info = self._info.lookup(cp)                       # [N]
        c = {"cp": cp, "rows": rows, "cls": tf.bitwise.bitwise_and(info, 7)}
        if with_sources:
            c["src"] = tf.range(n_chars)

        # Cleaning: controls, U+0000 and U+FFFD vanish (they do not even split words).
        keep = c["cls"] != _DROP
        info = tf.boolean_mask(info, keep)
        c = {k: tf.boolean_mask(v, keep) for k, v in c.items()}

        if self.do_lower_case:
            c["cp"] = self._final_sigma(c["cp"], c["rows"], info)
            c, post = self._lower_nfd(c, info)                              # [M] each
            # Only google's ranges become single-character words; after NFD a character may
            # have turned into ASCII punctuation (U+1FEF -> '`'), which counts.
            alone = (c["cls"] == _CJK) | (tf.bitwise.bitwise_and(post, _POST_PUNCT) != 0)
            not_mn = tf.bitwise.bitwise_and(post, _POST_MN) == 0
            alone = tf.boolean_mask(alone, not_mn)
            c = {k: tf.boolean_mask(v, not_mn) for k, v in c.items()}
        else:
            alone = (c["cls"] == _CJK) | (c["cls"] == _PUNCT)
        is_space = c["cls"] == _SPACE

        # Word segmentation: a word starts at a non-space character that is punctuation/CJK
        # or follows a space, punctuation/CJK, or the start of its line.
        prev_breaks = _prev_in_row(is_space | alone, c["rows"], True)
        starts_word = ~is_space & (alone | prev_breaks)
        w = {k: tf.boolean_mask(v, ~is_space) for k, v in c.items()}      # [C] word chars
        w_start = tf.boolean_mask(starts_word, ~is_space)
        word_of_char = tf.cumsum(tf.cast(w_start, tf.int64)) - 1         # [C] word index
        n_words = tf.reduce_sum(tf.cast(w_start, tf.int64))
        out = {
            "word_chars": tf.RaggedTensor.from_value_rowids(
                w["cp"], word_of_char, nrows=n_words, validate=False),  # [W, (chars)]
            "word_line": tf.boolean_mask(w["rows"], w_start),            # [W]
            "n_lines": n_lines,
        }
        if with_sources:
            survivors = c["src"]                                          # [K]
            out["source"] = w["src"]
            out["char_starts"] = char_starts.flat_values
            out["char_rows"] = rows
            out["alive"] = tf.where(tf.scatter_nd(
                survivors[:, None], tf.ones_like(survivors), [n_chars]) > 0)[:, 0]
        return out

    def _final_sigma(self, cp, rows, info):
        """Capital sigma -> final form where CPython's str.lower() would pick it.

        Rule (Unicode's Final_Sigma, as CPython applies it per whitespace word): the nearest
        non-case-ignorable character before it is cased, and the nearest one after it is not
        cased or does not exist. Spaces are neither, so they bound the search; lines too.
        cp, rows, info: [N] -> cp [N] with U+03A3 replaced by U+03C2 where final.
        """
        def resolve():
            sig = tf.bitwise.bitwise_and(tf.bitwise.right_shift(info, 3), 3)
            sigma_at = tf.where(cp == _CAPITAL_SIGMA)[:, 0]               # [S]
            not_ignorable = sig != _SIG_IGNORABLE
            anchor = tf.where(not_ignorable)[:, 0]                         # [A] positions
            n_anchor = tf.size(anchor, out_type=tf.int64)
            # rank = how many non-ignorable chars are at or before it (counting itself).
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

        return tf.cond(tf.reduce_any(cp == _CAPITAL_SIGMA), resolve, lambda: cp)

    def _lower_nfd(self, c, info):
        """str.lower() then NFD, per character, then canonical reordering.

        Each char becomes its precomputed expansion (one or more code points); the other
        fields follow their char. c: dict of [N] arrays -> (dict of [M] arrays, post bits [M]).
        """
        cp = c["cp"]
        expansion = tf.bitwise.right_shift(info, 5) - 1               # [N], -1: unchanged
        # A final sigma was substituted above; it lower-cases to itself.
        expansion = tf.where(cp == _FINAL_SIGMA, -1, expansion)
        lengths = tf.where(expansion >= 0,
                           tf.gather(self._exp_lengths, tf.maximum(expansion, 0)), 1)  # [N]
        ends = tf.cumsum(lengths)                                       # [N]
        out_pos = tf.range(tf.reduce_sum(lengths))                      # [M]
        owner = tf.searchsorted(ends, out_pos, side="right")            # [M] source position
        within = out_pos - (tf.gather(ends, owner) - tf.gather(lengths, owner))
        owner_exp = tf.gather(expansion, owner)
        expanded = tf.gather(self._exp_values, tf.gather(
            self._exp_starts, tf.maximum(owner_exp, 0)) + within)
        out = {k: tf.gather(v, owner) for k, v in c.items() if k != "cp"}
        out["cp"] = tf.where(owner_exp >= 0, expanded, tf.gather(cp, owner))
        post = self._post.lookup(out["cp"])
        keys = sorted(out)

        # NFD sorts each run of combining marks by combining class. The sort is only visible
        # after accent stripping for the few spacing marks (Mc) with a non-zero class, so it
        # runs only when one of them is present.
        def reorder():
            ccc = tf.cast(tf.bitwise.bitwise_and(post, _POST_CCC_MASK), tf.int64)
            marked = ccc > 0
            position = tf.range(tf.size(ccc, out_type=tf.int64))
            run_start = marked & ~_prev_in_row(marked, out["rows"], False)
            run_first = tf.gather(tf.where(run_start)[:, 0], tf.maximum(
                tf.cumsum(tf.cast(run_start, tf.int64)) - 1, 0))
            key = tf.where(marked, run_first * 256 + ccc, position * 256)
            order = tf.argsort(key, stable=True)
            return tuple(tf.gather(out[k], order) for k in keys) + (tf.gather(post, order),)

        needs_sort = tf.reduce_any(tf.bitwise.bitwise_and(post, _POST_REORDER) != 0)
        result = tf.cond(needs_sort, reorder,
                         lambda: tuple(out[k] for k in keys) + (post,))
        return dict(zip(keys, result[:-1])), result[-1]


class _Vocab:
    """tokens: list of str (id order); ids: token -> id."""

    def __init__(self, tokens):
        self.tokens = tokens
        self.ids = {token: i for i, token in enumerate(tokens)}


class BertTokenizer(tf.Module):
    """Text -> WordPiece ids, identical to google-research/bert's `FullTokenizer`.

    Usable eagerly, in `tf.data` maps, inside `tf.function` and in SavedModels (the vocab
    file is tracked as an asset, so the exported directory can be moved).

    Example (any BERT vocab.txt, e.g. bert-base-uncased's):

        tokenizer = BertTokenizer("vocab.txt", do_lower_case=True)
        ids = tokenizer(tf.constant(["Hello, world!"]))    # RaggedTensor [batch, (tokens)]
        ids, starts, ends = tokenizer.tokenize_with_offsets(texts)   # byte offsets
        tokenizer.encode(["Hello, world!"])                # [[7592, 1010, 2088, 999]]

    Args:
      vocab_file: vocabulary, one token per line (see `load_vocab`).
      do_lower_case: True for uncased checkpoints (lower-case, NFD, strip accents).
      max_chars_per_word: a word of more code points than this becomes one [UNK]
        (google's default 200).
      fast_shards: slices the fast path cuts a batch into, to use several cores in one call
        (default: the number of CPUs, at most 16). Results do not depend on it.
    """

    def __init__(self, vocab_file, do_lower_case=True,
                 max_chars_per_word=MAX_CHARS_PER_WORD, fast_shards=None, name=None):
        super().__init__(name=name)
        vocab_file = vocab_file.decode() if isinstance(vocab_file, bytes) else str(vocab_file)
        # Plain-Python lookups live outside tf.Module's attribute tracking, which would wrap
        # a 30k-entry list and dict element by element (a second of construction time).
        self._lookup = _Vocab(load_vocab(vocab_file))
        self.do_lower_case = bool(do_lower_case)
        self.max_chars_per_word = int(max_chars_per_word)
        if self.max_chars_per_word < 1:
            raise ValueError(f"max_chars_per_word must be >= 1, got {max_chars_per_word}")
        # Tracked so that tf.saved_model.save copies the file into assets/ and a loaded model
        # finds it wherever the directory was moved (`.vocab_file.asset_path`).
        self.vocab_file = tf.saved_model.Asset(vocab_file)

        # A word of max_chars_per_word characters has at most 4x as many UTF-8 bytes; lines
        # that might hold a longer word go to the exact path, which counts characters.
        max_bytes = 4 * self.max_chars_per_word
        self._fast_pattern = _char_class(_fast_path_alphabet(self.do_lower_case)) + "*"
        self._long_run_pattern = _long_run_pattern(self.max_chars_per_word)
        # Fast path = FastBertTokenizer's two halves, kept apart so that the offsets can be
        # mapped back with flat gathers. Models are passed as uint8 tensors: tf-text would
        # otherwise convert the bytes through a Python list (seconds for a 30k vocabulary).
        self._normalizer = tf_text.FastBertNormalizer(
            model_buffer=_as_uint8(_normalizer_model(self.do_lower_case)))
        self._fast_wordpiece = tf_text.FastWordpieceTokenizer(
            token_out_type=tf.int32,
            model_buffer=_as_uint8(tf_text.build_fast_wordpiece_model(
                self.vocab, max_bytes, CONTINUATION_PREFIX, UNK_TOKEN, False, False)))
        self._fast_shards = max(1, min(int(fast_shards or os.cpu_count() or 1), 16))
        # Exact path: words arrive already split, over-long ones already replaced.
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            token_out_type=tf.int32,
            model_buffer=_as_uint8(tf_text.build_fast_wordpiece_model(
                self.vocab, max_bytes, CONTINUATION_PREFIX, UNK_TOKEN, True, False)))

        self._basic = BasicTokenizer(self.do_lower_case)
        self._vocab_tensor = tf.constant(self.vocab)      # [vocab_size]
        self._token_table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                self._vocab_tensor, tf.range(len(self.vocab), dtype=tf.int32)),
            default_value=self.unk_id)

    # ------------------------------------------------------------------ vocabulary

    @property
    def vocab(self):
        """The tokens, in id order (a list; do not modify)."""
        return self._lookup.tokens

    @property
    def vocab_size(self):
        return len(self._lookup.tokens)

    def _special_id(self, token):
        if token not in self._lookup.ids:
            raise ValueError(f"vocab file {self.vocab_file.asset_path.numpy().decode()} "
                             f"has no {token} token")
        return self._lookup.ids[token]

    @property
    def unk_id(self):
        return self._lookup.ids[UNK_TOKEN]

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
            return self._lookup.ids.get(tokens, self.unk_id)
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

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def __call__(self, texts):
        """texts: tf.string [batch] -> int32 RaggedTensor [batch, (tokens)]."""
        return self._tokenize(texts, with_offsets=False)[0]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize_with_offsets(self, texts):
        """texts: tf.string [batch] -> (ids, starts, ends), each RaggedTensor [batch, (tokens)].

        ids int32; starts/ends int64 byte offsets into each input string, end exclusive. A
        piece starts at the first input character it came from and ends where the next
        surviving input character starts (or at the end of the line), so characters the
        normalisation deleted (accents, zero-width and control characters, invalid bytes)
        stay with the piece before them. When one character becomes several (a Hangul
        syllable -> jamo under NFD), the pieces that split it share its span. An [UNK]
        spans its whole word.
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
        fast = self._takes_fast_path(texts)
        # Most batches of English text are all fast: they skip the split below, whose ~100
        # small ops of the exact path are then one node (bert_tf/base/graph_calls.py).
        mixed = not_inlined(functools.partial(self._fast_and_exact, with_offsets=with_offsets))
        return tf.cond(tf.reduce_all(fast), lambda: self._fast(texts, with_offsets),
                       lambda: mixed(texts, fast))

    def _fast_and_exact(self, texts, fast, with_offsets):
        """Lines where `fast` is true through the fast path, the others through the exact
        path, in input order."""
        fast_idx = tf.where(fast)[:, 0]      # [n_fast]
        exact_idx = tf.where(~fast)[:, 0]    # [n_exact]
        fast_texts = tf.gather(texts, fast_idx)
        exact_texts = tf.gather(texts, exact_idx)
        fast_out = self._fast(fast_texts, with_offsets)
        exact_out = self._exact(exact_texts, with_offsets)
        parts = list(zip(fast_out, exact_out))
        # Put the lines back in input order: position in the concatenation -> input index.
        order = tf.math.invert_permutation(tf.concat([fast_idx, exact_idx], axis=0))
        results = []
        for fast_part, exact_part in parts:
            results.append(tf.gather(tf.concat([fast_part, exact_part], axis=0), order))
        return tuple(results)

    def _takes_fast_path(self, texts):
        """[n] strings -> [n] bool: only characters of the measured alphabet, and no run of
        non-space characters longer than the word limit."""
        return (tf.strings.regex_full_match(texts, self._fast_pattern)
                & ~tf.strings.regex_full_match(texts, self._long_run_pattern))

    def _fast(self, texts, with_offsets):
        """The fast path: texts [n] -> ids (and byte offsets), RaggedTensors [n, (tokens)].

        The C++ kernels walk their batch on one thread; cutting the batch into one slice per
        core lets TF's executor run the slices side by side.
        """
        shards = self._fast_shards
        if shards == 1:
            return self._fast_slice(texts, with_offsets)
        n = tf.shape(texts, out_type=tf.int64)[0]
        bounds = [n * i // shards for i in range(shards + 1)]
        parts = [self._fast_slice(texts[bounds[i]:bounds[i + 1]], with_offsets)
                 for i in range(shards)]
        return tuple(tf.concat(list(p), axis=0) for p in zip(*parts))

    def _fast_slice(self, texts, with_offsets):
        if not with_offsets:
            ids = self._fast_wordpiece.tokenize(self._normalizer.normalize(texts))
            return (ids.with_row_splits_dtype(tf.int64),)
        normalized, offsets = self._normalizer.normalize_with_offsets(texts)
        # offsets: [n, (normalized bytes + 1)], input byte offset of each normalized byte.
        ids, starts, ends = self._fast_wordpiece.tokenize_with_offsets(normalized)
        ids = ids.with_row_splits_dtype(tf.int64)
        line = _row_ids(ids.row_splits, tf.size(ids.flat_values, out_type=tf.int64))
        base = tf.gather(offsets.with_row_splits_dtype(tf.int64).row_splits, line)
        to_input = lambda x: ids.with_flat_values(
            tf.gather(offsets.flat_values, base + x.flat_values))
        return ids, to_input(starts), to_input(ends)

    def _exact(self, texts, with_offsets):
        """The exact path: texts [n] -> ids (and byte offsets), RaggedTensors [n, (tokens)]."""
        split = self._basic._split(texts, with_sources=with_offsets)
        word_chars, word_line = split["word_chars"], split["word_line"]   # [W, (chars)], [W]
        too_long = word_chars.row_lengths() > self.max_chars_per_word    # [W]
        words = tf.strings.unicode_encode(word_chars, "UTF-8")           # [W]
        words = tf.where(too_long, "", words)

        # Words over the limit tokenize to nothing here and get one [UNK] appended below.
        unk_rows = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(too_long, tf.int64))], self.unk_id),
            tf.cast(too_long, tf.int64), validate=False)                  # [W, (0 or 1)]

        def per_line(*parts):
            """[W, (pieces)] parts, concatenated per word -> [n, (tokens)]."""
            merged = tf.concat([p.with_row_splits_dtype(tf.int64) for p in parts], axis=1)
            return tf.RaggedTensor.from_value_rowids(
                merged, word_line, nrows=split["n_lines"], validate=False).merge_dims(1, 2)

        if not with_offsets:
            return (per_line(self._wordpiece.tokenize(words), unk_rows),)

        pieces, p_start, p_end = self._wordpiece.tokenize_with_offsets(words)
        # Byte offsets inside a word -> word character -> input character. All word characters
        # laid end to end: g_start[k] = bytes before word character k.
        g_start = tf.cumsum(_utf8_length(word_chars.flat_values), exclusive=True)   # [C]
        word_first = word_chars.row_starts()                             # [W]
        word_base = tf.gather(tf.concat([g_start, [0]], 0), word_first)  # [W]
        piece_word = _row_ids(pieces.row_splits, tf.size(pieces.flat_values, out_type=tf.int64))
        base = tf.gather(word_base, piece_word)                          # [P]
        first_char = tf.searchsorted(g_start, base + p_start.flat_values, side="right") - 1
        last_char = tf.searchsorted(g_start, base + p_end.flat_values - 1, side="right") - 1
        # An [UNK] of an over-long word spans the whole word.
        unk_first = tf.boolean_mask(word_first, too_long)
        unk_last = tf.boolean_mask(word_chars.row_limits() - 1, too_long)

        # Input characters -> byte offsets. A piece ends where the next surviving input
        # character starts (or at the end of the line): characters the normalisation deleted
        # (accents, zero-width and control characters, invalid bytes) stay with the piece
        # before them. FastBertTokenizer's offsets follow the same convention, so the two
        # paths agree on every line both can take.
        source = split["source"]                 # [C] input character of each word character
        in_start, rows = split["char_starts"], split["char_rows"]        # [N] each
        alive = split["alive"]                   # [S] input characters that survived, sorted
        line_bytes = tf.cast(tf.strings.length(texts), tf.int64)         # [n]
        n_alive = tf.size(alive, out_type=tf.int64)

        def start_of(char):
            return tf.gather(in_start, tf.gather(source, char))

        def end_of(char):
            src = tf.gather(source, char)
            k = tf.searchsorted(alive, src, side="right", out_type=tf.int64)
            after = tf.gather(alive, tf.minimum(k, n_alive - 1))
            row = tf.gather(rows, src)
            same_line = (k < n_alive) & (tf.gather(rows, after) == row)
            return tf.where(same_line, tf.gather(in_start, after), tf.gather(line_bytes, row))

        starts = per_line(pieces.with_flat_values(start_of(first_char)),
                          unk_rows.with_flat_values(start_of(unk_first)))
        ends = per_line(pieces.with_flat_values(end_of(last_char)),
                        unk_rows.with_flat_values(end_of(unk_last)))
        return per_line(pieces, unk_rows), starts, ends
