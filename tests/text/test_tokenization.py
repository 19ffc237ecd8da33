"""BertTokenizer vs the pure-Python oracle of google's FullTokenizer (tests/reference_tokenizer.py).

The contract is identical ids on every input. Checked on every line of the stdlib corpus in
both casings, on a hand-made list of hard cases, on random Unicode and random bytes, and on
random text drawn from the fast path's alphabet; the oracle itself is checked against HF's
two BERT tokenizers where they follow the same rules.
"""

import os
import random
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.text import tokenization
from bert_tf.text.tokenization import BertTokenizer, load_vocab

try:
    from tests.reference_tokenizer import ReferenceTokenizer
except ImportError:  # pytest run without the repository root on sys.path
    from reference_tokenizer import ReferenceTokenizer


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def corpus_lines(stdlib_corpus):
    """Every line of the stdlib corpus (conftest's session fixture), as bytes."""
    with open(stdlib_corpus, "rb") as f:
        lines = f.read().split(b"\n")
    assert len(lines) > 30000
    return lines


@pytest.fixture(scope="session")
def uncased_vocab(minilm_dir):
    """bert-base-uncased's vocabulary, shipped with the MiniLM package."""
    return os.path.join(str(minilm_dir), "vocab.txt")


@pytest.fixture(scope="session")
def cased_vocab(uncased_vocab, tmp_path_factory):
    """bert-base-uncased's tokens plus Capitalized and UPPER forms of its whole-word tokens:
    a cased vocabulary in which capitals, accents and case-sensitive pieces all occur."""
    tokens = load_vocab(uncased_vocab)
    seen = set(tokens)
    extra = []
    for t in tokens:
        if t.startswith("[") or t.startswith("##") or not t.isalpha():
            continue
        for form in (t.capitalize(), t.upper(), "##" + t.upper()):
            if form not in seen:
                seen.add(form)
                extra.append(form)
    path = tmp_path_factory.mktemp("cased") / "vocab.txt"
    path.write_text("\n".join(tokens + extra) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def uncased(uncased_vocab):
    return BertTokenizer(uncased_vocab, do_lower_case=True), \
        ReferenceTokenizer(uncased_vocab, do_lower_case=True)


@pytest.fixture(scope="session")
def cased(cased_vocab):
    return BertTokenizer(cased_vocab, do_lower_case=False), \
        ReferenceTokenizer(cased_vocab, do_lower_case=False)


@pytest.fixture(scope="session")
def reference_corpus_tokens(uncased, corpus_lines):
    """The oracle's uncased word pieces for every corpus line (shared by two tests)."""
    return [uncased[1].tokenize(line) for line in corpus_lines]


def mismatches(tokenizer, reference, texts):
    """(text, ours, reference) for every text where the ids differ."""
    ours = tokenizer.encode(texts)
    return [(t, o, reference.encode(t)) for t, o in zip(texts, ours) if o != reference.encode(t)]


# ----------------------------------------------------------------------------- hard cases

HARD_CASES = [
    "", " ", "\t\n\r ", "Hello, World!", "HELLO wOrLd",
    # accents, precomposed and decomposed
    "Ünïcödé àccénts café naïve résumé", "cafe\u0301 cafe\u0301s", "\u0301 lone mark",
    "a\u0308\u0301", "Ångström \u212b \u212a \u2126",
    # CJK ideographs (spaced out), kana and hangul (not), compatibility ideographs
    "中文字符测试", "mixed中文and English", "日本語のテキスト", "한국어 텍스트 입니다",
    "\uf900\uf901 \U0002f800", "\u3400\U00020000\U0002a700\U0002ceaf",
    # Greek: capital sigma is lower-cased by context (final sigma), per whitespace word
    "ΟΔΟΣ ΟΔΟΣ. ΣΑΣ ΑΣ Σ ΑΣ'Α ΑΣ.Α", "ὈΔΥΣΣΕΎΣ", "ΑΣ\u00adΑ", "Α\u00adΣ", "AΣ 1Σ Σ1",
    "ΑΣ\u0301 ΑΣ\u0301Β", "ΑΣ\x00 ΑΣ\x01Α",
    # German and Turkish casing
    "Straße STRASSE ß ẞ", "İstanbul ıi IĞDIR İ\u0307",
    # other scripts
    "العربية النص", "हिन्दी पाठ", "ภาษาไทย", "Ελληνικά Кириллица Ελλάδα",
    # emoji, joiners, variation selectors, flags
    "emoji 😀👍🏽 👨\u200d👩\u200d👧 ❤️ 🇩🇪", "zero\u200bwidth\u200djoiner\u200cnon\ufeffbom",
    # control characters are deleted (no word break); whitespace of all kinds splits
    "control\x00\x01\x07\x1b\x7f chars", "a\x1cb\x1dc\x1ed\x1fe", "next\u0085line",
    "a\x0bb\x0cc", "nbsp\u00a0here", "\u2028line\u2029para", "\u3000ideographic\u2003em",
    "mixed   \t whitespace\n\nlines\r\n", "replacement \ufffd char", "nul\x00byte",
    # word length limit: 200 characters (google), counted in characters, not bytes
    "a" * 99, "a" * 100, "a" * 101, "a" * 200, "a" * 201, "x" * 250 + " after",
    "é" * 150, "é" * 201, "ab" * 150, "hello " + "b" * 201 + " world",
    "e\u0301" * 150,
    # punctuation of all kinds (ASCII symbols count as punctuation)
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "¡¿«»„“”‘’‹›–—…·•†‡§¶", "question\u037e",
    "varia\u1fef oxia\u1ffd", "\u00b4acute\u00b4", "¬¦°±×÷", "x\u2012y\u2E3Az",
    # compatibility characters (not touched by NFD)
    "Ⅷ ① ﬁ ﬀ ½ ² Ａｂｃ ǅǈǋ", "\u2000\u2001 spaces",
    # combining-class reordering that survives accent stripping
    "\U0001D15E\U0001D16D\U0001D165", "\U0001D165\U0001D16D \U0001D16D\u0301\U0001D165",
    "\u1715\u0301", "\u302e\u302f",
    # format, private-use and unassigned characters
    "\U000E0041tag\U000E007F", "\ue000\U000F0000 private", "\u0378\U0003FFFF unassigned",
    # the special tokens are plain text to FullTokenizer
    "[CLS] [SEP] [MASK] [UNK] [PAD]",
    "http://example.com/path?query=1&x=y#frag", "C++ / C# / F#", "3.14159 1,000,000 $100",
]

# Invalid UTF-8: like FullTokenizer's bytes.decode("utf-8", "ignore"), undecodable bytes are
# dropped before anything else, so they do not split words: b"abc\x80def" is "abcdef".
INVALID_UTF8 = [
    b"\xff\xfe", b"abc\x80def", b"\xc3\x28", b"\xe2\x82 end", b"\xed\xa0\x80 surrogate",
    b"\xf0\x9f\x98", b"ok \xc0\xaf overlong", b"\xf4\x90\x80\x80 beyond", b"caf\xc3",
]


@pytest.mark.parametrize("casing", ["uncased", "cased"])
def test_hard_cases_match_reference(casing, request):
    tokenizer, reference = request.getfixturevalue(casing)
    texts = [t.encode("utf-8") for t in HARD_CASES] + INVALID_UTF8
    assert mismatches(tokenizer, reference, texts) == []


def test_pinned_values(uncased):
    tokenizer, _ = uncased
    tokens = tokenizer.encode_as_tokens
    assert tokenizer.encode(["Hello, World!"]) == [[7592, 1010, 2088, 999]]
    assert tokens(["ΟΔΟΣ"]) == [["ο", "##δ", "##ος"]]     # final sigma at the word's end
    # ... but not before '.' + a cased letter ('.' is case-ignorable)
    assert tokens(["ΣΑΣ ΑΣ.Α"]) == [["σ", "##α", "##ς", "α", "##σ", ".", "α"]]
    assert tokens(["Straße"]) == [["st", "##raße"]]       # no ICU case folding to 'ss'
    assert tokens(["İstanbul"]) == [["istanbul"]]
    assert tokens(["cafe\u0301"]) == tokens(["café"]) == [["cafe"]]
    assert tokens(["a\x01b c\u200bd"]) == [["ab", "cd"]]  # deleted, not a word break
    assert tokens(["中文"]) == [["中", "文"]]
    # 200 characters is still a word, 201 is [UNK]; 'é' * 150 is 300 bytes but 150 chars.
    at_limit, over, accented, accented_over = tokens(
        ["a" * 200, "a" * 201, "é" * 150, "é" * 201])
    assert "".join(p.removeprefix("##") for p in at_limit) == "a" * 200
    assert "".join(p.removeprefix("##") for p in accented) == "e" * 150
    assert over == accented_over == ["[UNK]"]
    assert tokenizer.encode([b"abc\x80def"]) == tokenizer.encode(["abcdef"])
    assert tokens(["varia\u1fef"]) == [["var", "##ia", "`"]]  # NFD turns it into '`'


# ----------------------------------------------------------------------------- corpus

def test_corpus_uncased_identical(uncased, corpus_lines, reference_corpus_tokens):
    tokenizer, reference = uncased
    ours = tokenizer.encode(corpus_lines)
    bad = [(line, o, [reference.ids[t] for t in r]) for line, o, r in
           zip(corpus_lines, ours, reference_corpus_tokens) if o != [reference.ids[t] for t in r]]
    assert bad == [], f"{len(bad)} of {len(corpus_lines)} lines differ, first: {bad[:2]}"
    assert sum(map(len, ours)) > 500000


def test_corpus_cased_identical(cased, corpus_lines):
    tokenizer, reference = cased
    bad = mismatches(tokenizer, reference, corpus_lines)
    assert bad == [], f"{len(bad)} of {len(corpus_lines)} lines differ, first: {bad[:2]}"


# ----------------------------------------------------------------------------- fuzzing

def random_unicode(rng, n):
    """Strings mixing ASCII, the BMP, all planes (surrogates included, as raw UTF-8) and the
    characters with context rules (capital sigma, combining marks, reordered marks)."""
    specials = [0x3A3, 0x345, 0x130, 0x20, 0x1D16D, 0x1D165, 0x301, 0x1FEF, 0xDF, 0x200B,
                0xAD, 0x4E2D, 0xFFFD, 0x0]
    out = []
    for _ in range(n):
        cps = [rng.choice([rng.randint(0, 0x7F), rng.randint(0, 0x3000),
                           rng.randint(0, 0x10FFFF), rng.choice(specials)])
               for _ in range(rng.randint(0, 30))]
        out.append("".join(map(chr, cps)).encode("utf-8", "surrogatepass"))
    return out


@pytest.mark.parametrize("casing", ["uncased", "cased"])
def test_random_unicode_and_bytes(casing, request):
    tokenizer, reference = request.getfixturevalue(casing)
    rng = random.Random(1234)
    texts = random_unicode(rng, 4000)
    texts += [bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 24))) for _ in range(2000)]
    assert mismatches(tokenizer, reference, texts) == []


@pytest.mark.parametrize("casing", ["uncased", "cased"])
def test_fast_path_alphabet(casing, request):
    """Random text from the characters measured safe for FastBertTokenizer: all of it takes
    the fast path and all of it matches the reference."""
    tokenizer, reference = request.getfixturevalue(casing)
    alphabet = tokenization._fast_path_alphabet(casing == "uncased")
    assert len(alphabet) > 120000          # most assigned characters qualify
    for c in "aZ09 \t.,'\"$é—’“ÆçЖж":
        assert ord(c) in set(alphabet.tolist())
    # ICU case folding ('ß' -> 'ss') and final sigma matter only when lower-casing; control
    # characters are deleted by google but become spaces in FastBertNormalizer.
    unsafe = "ß\u03a3\x01\u0085" if casing == "uncased" else "\x01\u0085"
    assert not set(map(ord, unsafe)) & set(alphabet.tolist())
    if casing == "cased":
        assert {ord("ß"), 0x3A3} <= set(alphabet.tolist())
    rng = random.Random(99)
    common = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ     .,;-"
    texts = ["".join(rng.choice(common) if rng.random() < 0.6 else
                     chr(int(alphabet[rng.randrange(len(alphabet))]))
                     for _ in range(rng.randint(0, 40))).encode("utf-8")
             for _ in range(6000)]
    assert bool(tf.reduce_all(tokenizer._takes_fast_path(texts)))
    assert mismatches(tokenizer, reference, texts) == []


# ----------------------------------------------------------------------------- offsets

def test_offsets_ascii_lines_recover_pieces(uncased, corpus_lines):
    """On ASCII lines a piece's bytes, lower-cased, are the piece (without '##')."""
    tokenizer, _ = uncased
    lines = [l for l in corpus_lines if l.isascii()][:5000]
    ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(lines))
    checked = 0
    for line, row, s_row, e_row in zip(lines, ids.to_list(), starts.to_list(), ends.to_list()):
        for i, s, e in zip(row, s_row, e_row):
            if i != tokenizer.unk_id:
                assert line[s:e].decode().lower() == tokenizer.vocab[i].removeprefix("##")
                checked += 1
    assert checked > 50000
    assert ids.to_list() == tokenizer(tf.constant(lines)).to_list()


def test_offsets_exact_path_pinned(uncased):
    tokenizer, _ = uncased
    text = "Ça\u0301fé ΟΔΟΣ\x01x 中文 ß"
    ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant([text]))
    pieces = [tokenizer.vocab[i] for i in ids.to_list()[0]]
    spans = list(zip(starts.to_list()[0], ends.to_list()[0]))
    raw = text.encode("utf-8")
    assert pieces == ["cafe", "ο", "##δ", "##ο", "##σ", "##x", "中", "文", "ß"]
    assert spans[:2] == [(0, 8), (9, 11)]
    # The deleted control character stays with the piece before it.
    assert [raw[s:e].decode() for s, e in spans] == [
        "Ça\u0301fé", "Ο", "Δ", "Ο", "Σ\x01", "x", "中", "文", "ß"]


@pytest.mark.parametrize("casing", ["uncased", "cased"])
def test_offsets_same_on_both_paths(casing, request):
    """Lines the fast path can take get the same ids and offsets from the exact path."""
    tokenizer, _ = request.getfixturevalue(casing)
    rng = random.Random(5)
    alphabet = tokenization._fast_path_alphabet(casing == "uncased")
    texts = tf.constant(["".join(rng.choice("abc  XYZ.,") if rng.random() < 0.6 else
                                 chr(int(alphabet[rng.randrange(len(alphabet))]))
                                 for _ in range(rng.randint(0, 30))).encode("utf-8")
                         for _ in range(1500)])
    fast = tokenizer._fast(texts, with_offsets=True)
    exact = tokenizer._exact(texts, with_offsets=True)
    for a, b in zip(fast, exact):
        assert a.to_list() == b.to_list()


# ----------------------------------------------------------------------------- graph use

def test_tf_data_and_tf_function(uncased):
    tokenizer, reference = uncased
    texts = [t.encode("utf-8") for t in HARD_CASES]
    ds = tf.data.Dataset.from_tensor_slices(texts).batch(7).map(tokenizer)
    got = [row for batch in ds for row in batch.to_list()]
    assert got == [reference.encode(t) for t in texts]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def pieces_and_count(batch):
        ids = tokenizer(batch)
        return tokenizer.id_to_token(ids), ids.row_lengths()

    pieces, counts = pieces_and_count(tf.constant(["Hello, World!", "", "中文"]))
    assert pieces.to_list() == [[b"hello", b",", b"world", b"!"], [],
                                ["中".encode(), "文".encode()]]
    assert counts.numpy().tolist() == [4, 0, 2]


@pytest.mark.slow
def test_saved_model_with_moved_asset(cased, cased_vocab, tmp_path):
    tokenizer, _ = cased
    tf.saved_model.save(tokenizer, str(tmp_path / "saved"))
    assert os.listdir(tmp_path / "saved" / "assets") == ["vocab.txt"]
    # The vocab is found in the moved directory even when the original file is gone.
    os.rename(cased_vocab, cased_vocab + ".hidden")
    try:
        moved = tmp_path / "moved"
        shutil.move(str(tmp_path / "saved"), str(moved))
        loaded = tf.saved_model.load(str(moved))
    finally:
        os.rename(cased_vocab + ".hidden", cased_vocab)
    texts = tf.constant(["Hello, World!", "ΟΔΟΣ straße 中文", ""])
    assert loaded(texts).to_list() == tokenizer(texts).to_list()
    for a, b in zip(loaded.tokenize_with_offsets(texts), tokenizer.tokenize_with_offsets(texts)):
        assert a.to_list() == b.to_list()
    asset = loaded.vocab_file.asset_path.numpy().decode()
    assert asset.startswith(str(moved)) and load_vocab(asset) == tokenizer.vocab


# ----------------------------------------------------------------------------- vocabulary

def test_special_ids_and_lookups(uncased):
    tokenizer, _ = uncased
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id) == (0, 100, 101, 102, 103)
    assert tokenizer.vocab_size == 30522
    assert tokenizer.token_to_id("hello") == 7592
    assert tokenizer.token_to_id("no-such-token") == 100
    assert tokenizer.id_to_token(7592) == "hello"
    ids = tokenizer.token_to_id(tf.constant(["[CLS]", "##ing", "zzzzqq"]))
    assert ids.numpy().tolist() == [101, 2075, 100]
    assert tokenizer.id_to_token(tf.constant([101, 2075])).numpy().tolist() == [b"[CLS]", b"##ing"]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.id_to_token(30522)


def test_missing_special_token_is_a_clear_error(tmp_path):
    path = tmp_path / "v.txt"
    path.write_text("[UNK]\na\n", encoding="utf-8")
    tokenizer = BertTokenizer(str(path))
    assert tokenizer.encode(["a b"]) == [[1, 0]]
    with pytest.raises(ValueError, match=r"v\.txt has no \[CLS\] token"):
        tokenizer.cls_id


@pytest.mark.parametrize("content, message", [
    (None, "vocab file not found"),
    ("", "is empty"),
    ("[UNK]\na\nb\na\n", r"token 'a' appears twice \(lines 2 and 4\)"),
    ("[PAD]\na\n", r"has no \[UNK\] token"),
    ("[UNK]\n\na\n", "line 2 is blank"),
    (b"[UNK]\n\xff\n", "vocab.txt:2: not UTF-8"),
])
def test_load_vocab_errors(tmp_path, content, message):
    path = tmp_path / "vocab.txt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as e:
        load_vocab(str(path))
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_load_vocab_strips_like_google(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\r\n[UNK] \n  hello\nworld")
    assert load_vocab(str(path)) == ["[PAD]", "[UNK]", "hello", "world"]


# ----------------------------------------------------------------------------- the oracle

# Where HF's ports leave google's rules (found by this test; see docs/tokenization.md):
#  * both: a word of 101..200 characters is [UNK] (HF's limit is 100, google's 200), and
#    '[CLS]' etc. inside the text stay whole (google splits them like any text);
#  * both delete private-use characters (google keeps them: it deletes only Cc and Cf);
#  * slow BertTokenizerLegacy also deletes unassigned code points (every category C*) and
#    applies NFC first ('e' + U+0301 becomes one character, which matters for the limit);
#  * tokenizers' BertNormalizer lower-cases character by character: no final sigma.
HF_BOTH_DIFFER = {"a" * 101, "a" * 200, "é" * 150, "e\u0301" * 150,
                  "[CLS] [SEP] [MASK] [UNK] [PAD]", "\ue000\U000F0000 private"}
HF_SLOW_DIFFERS = HF_BOTH_DIFFER | {"\u3400\U00020000\U0002a700\U0002ceaf",
                                   "\u0378\U0003FFFF unassigned"}
HF_FAST_DIFFERS = HF_BOTH_DIFFER | {
    "ΟΔΟΣ ΟΔΟΣ. ΣΑΣ ΑΣ Σ ΑΣ'Α ΑΣ.Α", "ὈΔΥΣΣΕΎΣ", "Α\u00adΣ", "AΣ 1Σ Σ1", "ΑΣ\u0301 ΑΣ\u0301Β",
    "ΑΣ\x00 ΑΣ\x01Α"}


@pytest.mark.slow
def test_reference_agrees_with_hf(uncased_vocab, corpus_lines, reference_corpus_tokens):
    from tokenizers import BertWordPieceTokenizer
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    reference = ReferenceTokenizer(uncased_vocab, do_lower_case=True)
    slow = BertTokenizerLegacy(uncased_vocab, do_lower_case=True)
    fast = BertWordPieceTokenizer(uncased_vocab, lowercase=True)

    differs_slow = {t for t in HARD_CASES if slow.tokenize(t) != reference.tokenize(t)}
    fast_hard = fast.encode_batch(HARD_CASES, add_special_tokens=False)
    differs_fast = {t for t, e in zip(HARD_CASES, fast_hard)
                    if e.tokens != reference.tokenize(t)}
    assert differs_slow == HF_SLOW_DIFFERS
    assert differs_fast == HF_FAST_DIFFERS

    text = [l.decode("utf-8") for l in corpus_lines]
    fast_corpus = fast.encode_batch(text, add_special_tokens=False)
    assert [t for t, e, r in zip(text, fast_corpus, reference_corpus_tokens)
            if e.tokens != r] == []
    # The slow port is pure Python too; every 10th line keeps the test quick.
    assert [t for t, r in zip(text[::10], reference_corpus_tokens[::10])
            if slow.tokenize(t) != r] == []


# ------------------------------------------------------------------------ table cache

def _clear_table_caches():
    for fn in (tokenization._fast_path_alphabet, tokenization._code_point_tables,
               tokenization._normalizer_model):
        fn.cache_clear()


def test_the_table_cache_holds_what_the_computation_gives(tmp_path, monkeypatch):
    """The tables a tokenizer is built from are computed once per machine and read back
    by later processes (seconds saved per command): what is read equals a fresh
    computation; a damaged file is computed again and replaced; a cache folder that
    cannot be written leaves the tables computed, not an error."""
    monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path / "cache"))
    _clear_table_caches()
    try:
        alphabet = tokenization._fast_path_alphabet(True)
        files = sorted(os.listdir(tmp_path / "cache" / "tables"))
        assert [f.split("-")[0] for f in files] == ["code_point_tables", "fast_bert_normalizer",
                                                    "fast_path_alphabet"]
        _clear_table_caches()
        assert np.array_equal(tokenization._fast_path_alphabet(True), alphabet)
        assert np.array_equal(tokenization._compute_fast_path_alphabet(True), alphabet)
        for lower in (True, False):
            read = tokenization._code_point_tables(lower)
            fresh = tokenization._compute_code_point_tables(lower)
            assert (read[1] is None) == (not lower)
            for a, b in zip(read, fresh):
                assert a is None or np.array_equal(a, b)
        assert tokenization._normalizer_model(True) == \
            tf_text.build_fast_bert_normalizer_model(True)
        # Cut in half: computed again, and the file is whole again.
        path = tmp_path / "cache" / "tables" / files[2]
        whole = path.read_bytes()
        path.write_bytes(whole[:len(whole) // 2])
        _clear_table_caches()
        assert np.array_equal(tokenization._fast_path_alphabet(True), alphabet)
        assert path.read_bytes() == whole
        assert not [f for f in os.listdir(path.parent) if f.endswith(".tmp")]
        # A cache "folder" that is a file: nothing can be written, the tables still come.
        (tmp_path / "blocked").write_text("")
        monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path / "blocked"))
        _clear_table_caches()
        assert np.array_equal(tokenization._fast_path_alphabet(False),
                              tokenization._compute_fast_path_alphabet(False))
    finally:
        _clear_table_caches()
