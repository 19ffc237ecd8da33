"""text_rules: google's rules pinned, the same rules as tables (graph tokenizer, offline
tokenizer, NER's word cutter) equal to them on every code point, the vocabulary loader and
its wording for --vocab_file, no TensorFlow."""

import subprocess
import sys

import numpy as np
import pytest

from bert_tf.text import text_rules, words
from bert_tf.data import inputs
from bert_tf.text import python_tokenizer as offline
from bert_tf.text.text_rules import (NUM_CODE_POINTS, is_cjk, is_dropped, is_punctuation,
                                     is_word_break)


@pytest.fixture(scope="module")
def rule_of_every_code_point():
    """[NUM_CODE_POINTS] int8 from the predicates: 1 dropped, 2 word break, 3 CJK, 4
    punctuation, 0 other (the first that applies, in google's order of cleaning)."""
    out = np.zeros(NUM_CODE_POINTS, np.int8)
    for cp in range(NUM_CODE_POINTS):
        ch = chr(cp)
        out[cp] = (1 if is_dropped(ch) else 2 if is_word_break(ch) else 3 if is_cjk(cp)
                   else 4 if is_punctuation(ch) else 0)
    return out


def test_rules_pinned():
    assert text_rules.SPECIAL_TOKENS == ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
    assert text_rules.MAX_CHARS_PER_WORD == 200 and text_rules.CONTINUATION_PREFIX == "##"
    ascii_punct = "".join(chr(c) for c in range(128) if is_punctuation(chr(c)))
    assert ascii_punct == "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    ascii_dropped = [c for c in range(128) if is_dropped(chr(c))]
    assert ascii_dropped == list(range(0, 9)) + [11, 12] + list(range(14, 32)) + [127]
    # Unicode punctuation counts, symbols outside ASCII do not; Hangul and kana are not CJK.
    assert is_punctuation("\u00bf") and is_punctuation("\u3002") and not is_punctuation("\u00a9")
    assert is_cjk(ord("中")) and is_cjk(0x2F800) and not is_cjk(0xAC00) and not is_cjk(0x3042)
    # Zero-width space (Cf) and NEL (Cc) vanish; tab stays, as whitespace.
    assert is_dropped("\u200b") and is_dropped("\x85") and is_dropped("\ufffd")
    assert not is_dropped("\t") and is_word_break("\t")
    # Line/paragraph separators survive cleaning and then split words; NBSP is Zs.
    assert is_word_break("\u2028") and is_word_break("\u2029") and is_word_break("\u00a0")
    assert not is_word_break("\x0b") and not is_word_break("\u200b")


def test_code_point_sets_equal_the_predicates(rule_of_every_code_point):
    rule = rule_of_every_code_point
    punct = np.zeros(NUM_CODE_POINTS, bool)
    punct[list(text_rules.punctuation_code_points())] = True
    assert np.array_equal(punct, np.array([is_punctuation(chr(cp))
                                           for cp in range(NUM_CODE_POINTS)]))
    dropped = np.zeros(NUM_CODE_POINTS, bool)
    dropped[list(text_rules.dropped_code_points())] = True
    assert np.array_equal(dropped, rule == 1)
    breaks = np.zeros(NUM_CODE_POINTS, bool)
    breaks[list(text_rules.word_break_code_points())] = True
    assert np.array_equal(breaks, rule == 2)


def test_graph_tokenizer_tables_equal_the_rules(rule_of_every_code_point):
    from bert_tf.text.tokenization import _DROP, _SPACE, _CJK, _PUNCT, _code_point_tables

    codes = {1: _DROP, 2: _SPACE, 3: _CJK, 4: _PUNCT}
    want = np.zeros(NUM_CODE_POINTS, np.int32)
    for rule, code in codes.items():
        want[rule_of_every_code_point == rule] = code
    for lower in (False, True):
        info = _code_point_tables(lower)[0]
        assert np.array_equal(info & 7, want), lower


def test_ner_word_cutter_equals_the_rules(rule_of_every_code_point):
    alone = np.zeros(NUM_CODE_POINTS, bool)
    for lo, hi in words.single_character_ranges():
        alone[lo:hi + 1] = True
    want = np.array([is_punctuation(chr(cp)) or is_cjk(cp) for cp in range(NUM_CODE_POINTS)])
    assert np.array_equal(alone, want)


def test_offline_tokenizer_tables_equal_the_rules():
    assert offline._ASCII_PUNCT == "".join(
        chr(c) for c in range(128) if is_punctuation(chr(c)))
    assert offline._ASCII_CONTROL == "".join(chr(c) for c in range(128) if is_dropped(chr(c)))


def test_text_rules_and_offline_tokenizer_load_no_tensorflow():
    code = ("import sys; import bert_tf.text.text_rules, bert_tf.text.words, "
            "bert_tf.text.python_tokenizer, bert_tf.data.inputs; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("content, problem, graph, pretraining", [
    (None, "not_found", "vocab file not found: {p}",
     "--vocab_file: cannot read {p}: No such file or directory"),
    (b"[UNK]\n\xffa\n", "not_text", "{p}:2: not UTF-8",
     "--vocab_file: {p} is not UTF-8 (invalid start byte at byte 6)"),
    (b"", "empty", "vocab file {p} is empty", "--vocab_file: {p} is empty"),
    (b"[UNK]\n\na\n", "blank", "vocab file {p}: line 2 is blank",
     "--vocab_file: {p} line 2 is blank"),
    (b"[UNK]\na\nb\na\n", "repeated", "vocab file {p}: token 'a' appears twice (lines 2 and 4)",
     "--vocab_file: {p} has 'a' twice (lines 2 and 4)"),
    (b"[UNK]\n[CLS]\na\n", "missing", None, "--vocab_file: {p} lacks [SEP], [MASK]"),
])
def test_load_vocab_checks_once_worded_twice(tmp_path, content, problem, graph, pretraining):
    path = tmp_path / "vocab.txt"
    if content is not None:
        path.write_bytes(content)
    p = str(path)
    if graph is not None:
        with pytest.raises(text_rules.VocabError) as e:
            text_rules.load_vocab(p)
        assert e.value.problem == problem and str(e.value).startswith(graph.format(p=p))
    with pytest.raises(ValueError) as e:
        inputs.load_vocab(p)
    assert str(e.value) == pretraining.format(p=p)


def test_pretraining_vocab_of_a_folder_is_one_line(tmp_path):
    with pytest.raises(ValueError) as e:
        inputs.load_vocab(str(tmp_path))
    assert str(e.value) == f"--vocab_file: cannot read {tmp_path}: Is a directory"
