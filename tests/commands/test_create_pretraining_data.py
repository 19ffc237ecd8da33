"""create_pretraining_data: the records against the spec (REFERENCE.md "Pretraining data"),
against an independent model of google's algorithm (tests/google_reference_data.py) on the
same real text, byte-for-byte against TensorFlow's own writers, and its behaviour as a
command: determinism whatever --num_workers, resume after SIGKILL, bad input.

The text is a slice of the stdlib-docstring corpus (conftest's session fixture); the
vocabulary is bert-base-uncased's.
"""

import collections
import glob
import gzip
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import create_pretraining_data as cpd
from bert_tf.base import shard_schema, tfrecord
from bert_tf.training.data import feature_spec, pretraining_dataset
from bert_tf.data import example_codec, instances, masking
from bert_tf.data.inputs import iter_blocks, load_vocab, read_block
from bert_tf.text.python_tokenizer import CachedTokenizer
from bert_tf.text.tokenization import BertTokenizer
from tests import ROOT

try:
    from tests import google_reference_data as google
    from tests.reference_tokenizer import ReferenceTokenizer
except ImportError:  # pytest run without the repository root on sys.path
    import google_reference_data as google
    from reference_tokenizer import ReferenceTokenizer

SEQ, PRED = 128, 20
REPO = ROOT


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def vocab_file(minilm_dir):
    return os.path.join(str(minilm_dir), "vocab.txt")


@pytest.fixture(scope="module")
def vocab(vocab_file):
    return load_vocab(vocab_file)


@pytest.fixture(scope="module")
def bert_tokenizer(vocab_file):
    return BertTokenizer(vocab_file, do_lower_case=True)


def _slice(src, dst, n_bytes):
    """The first documents of src, about n_bytes, cut at a blank line."""
    with open(src, "rb") as f:
        data = f.read(n_bytes + 100_000)
    cut = data.find(b"\n\n", n_bytes) + 2
    with open(dst, "wb") as f:
        f.write(data[:cut])
    return dst


@pytest.fixture(scope="module")
def corpus(stdlib_corpus, tmp_path_factory):
    """~700 kB of stdlib docstrings, one sentence per line, blank line between documents."""
    return _slice(stdlib_corpus, str(tmp_path_factory.mktemp("cpd") / "corpus.txt"), 700_000)


@pytest.fixture(scope="module")
def small_corpus(stdlib_corpus, tmp_path_factory):
    return _slice(stdlib_corpus, str(tmp_path_factory.mktemp("cpd") / "small.txt"), 150_000)


def run_cli(*args, expect=0):
    """Runs main() in this process; returns the summary (or the exit code if not 0: a
    bad input raises SystemExit(1), bert_tf/base/cli.py)."""
    argv = [str(a) for a in args] + ["--quiet"]
    if expect == 0:
        return cpd.main(argv)
    with pytest.raises(SystemExit) as exit_info:
        cpd.main(argv)
    assert exit_info.value.code == expect
    return exit_info.value.code


def read_summary(output_file):
    with open(output_file + ".summary.json", encoding="utf-8") as f:
        return json.load(f)


def read_records(paths, compression=None):
    """All records of the files, in order, parsed with google's feature spec (numpy)."""
    ds = tf.data.TFRecordDataset(paths, compression_type=compression).batch(1 << 20)
    parsed = [tf.io.parse_example(b, feature_spec(SEQ, PRED)) for b in ds]
    return {k: np.concatenate([p[k].numpy() for p in parsed]) for k in parsed[0]}


def documents(path, bert_tokenizer):
    """The corpus as google reads it, tokenized by the project's graph tokenizer: list of
    documents, each a list of sentences (lists of ids) without empty ones."""
    with open(path, "rb") as f:
        lines = [line.strip() for line in f.read().split(b"\n")]
    ids = bert_tokenizer(tf.constant(lines))
    flat, splits = ids.flat_values.numpy(), ids.row_splits.numpy()
    docs, current = [], []
    for i, line in enumerate(lines):
        if not line:
            if current:
                docs.append(current)
            current = []
        elif splits[i + 1] > splits[i]:
            current.append(flat[splits[i]:splits[i + 1]].tolist())
    if current:
        docs.append(current)
    return docs


# ----------------------------------------------------------------------------- flags

def test_flags_have_googles_names_and_defaults():
    args = cpd.parse_args(["--input_file=x", "--output_file=y", "--vocab_file=z"])
    google_defaults = {"do_lower_case": True, "do_whole_word_mask": False,
                       "max_seq_length": 128, "max_predictions_per_seq": 20,
                       "random_seed": 12345, "dupe_factor": 10, "masked_lm_prob": 0.15,
                       "short_seq_prob": 0.1}
    assert {k: getattr(args, k) for k in google_defaults} == google_defaults
    assert args.max_ngram_size == 1 and args.gzip is False and args.num_workers >= 1
    off = cpd.parse_args(["--input_file=x", "--output_file=y", "--vocab_file=z",
                          "--do_lower_case=false", "--do_whole_word_mask"])
    assert off.do_lower_case is False and off.do_whole_word_mask is True


# ----------------------------------------------------------------------------- records

def _random_features(rng, n, seq=SEQ, pred=PRED, vocab_size=30522):
    f = {"input_ids": rng.integers(0, vocab_size, (n, seq)),
         "input_mask": rng.integers(0, 2, (n, seq)).astype(bool),
         "segment_ids": rng.integers(0, 2, (n, seq)).astype(np.int8),
         "masked_lm_positions": rng.integers(0, seq, (n, pred)),
         "masked_lm_ids": rng.integers(0, vocab_size, (n, pred)),
         "masked_lm_weights": rng.integers(0, 2, (n, pred)).astype(np.float32),
         "next_sentence_labels": rng.integers(0, 2, (n, 1))}
    # Varint edges: 1, 2 and 3 bytes, and the largest id.
    f["input_ids"][0, :6] = [0, 127, 128, 16383, 16384, vocab_size - 1]
    return f


@pytest.mark.parametrize("seq,pred,vocab_size", [(128, 20, 30522), (512, 80, 250_000),
                                                 (8, 2, 100)])
def test_records_are_byte_identical_to_tensorflows(tmp_path, seq, pred, vocab_size):
    """Our numpy encoder vs tf.train.Example(...).SerializeToString(deterministic=True) and
    tf.io.TFRecordWriter, byte for byte; and TF parses back the values we put in."""
    rng = np.random.default_rng(seq)
    n = 300 if seq == 128 else 40
    feats = _random_features(rng, n, seq, pred, vocab_size)
    ref = str(tmp_path / "ref.tfrecord")
    with tf.io.TFRecordWriter(ref) as writer:
        for i in range(n):
            feature = {}
            for name, kind in shard_schema.KINDS.items():
                values = feats[name][i].astype(np.float32 if kind == "float" else np.int64).tolist()
                feature[name] = tf.train.Feature(
                    int64_list=tf.train.Int64List(value=values)) if kind == "int" else \
                    tf.train.Feature(float_list=tf.train.FloatList(value=values))
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString(deterministic=True))
    ours = example_codec.encode_records(feats)
    with open(ref, "rb") as f:
        assert ours == f.read()
    path = str(tmp_path / "ours.tfrecord")
    with open(path, "wb") as f:
        f.write(ours)
    ds = tf.data.TFRecordDataset(path).batch(n)
    parsed = tf.io.parse_example(next(iter(ds)), feature_spec(seq, pred))
    for name in shard_schema.KINDS:
        np.testing.assert_array_equal(parsed[name].numpy(), feats[name].astype(
            np.float32 if name == "masked_lm_weights" else np.int64))


def test_crc32c_known_values():
    # iSCSI (RFC 3720, B.4) test vectors and the classic check value.
    assert tfrecord.crc32c(b"123456789") == 0xE3069283
    assert tfrecord.crc32c(b"") == 0
    assert tfrecord.crc32c(bytes(32)) == 0x8A9136AA
    assert tfrecord.crc32c(b"\xff" * 32) == 0x62A8AB43
    assert tfrecord.crc32c(bytes(range(32))) == 0x46DD794E
    # Many ranges of one buffer at once (every length mod 4) agree with one at a time.
    buf = np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8)
    first = np.arange(0, 40) * 20
    lengths = np.arange(40, 0, -1) * 3 % 77
    got = tfrecord.crc32c_aligned(buf.view("<u4"), first, lengths)
    want = [tfrecord.crc32c(buf[4 * w:4 * w + n].tobytes()) for w, n in zip(first, lengths)]
    assert got.tolist() == want


# ----------------------------------------------------------------------------- tokenizer

HARD_TEXTS = [
    "", "Hello, World!", "Ünïcödé àccénts café naïve", "cafe\u0301", "\u0301 lone mark",
    "中文字符测试 mixed中文and English", "日本語のテキスト 한국어", "ΟΔΟΣ ΣΑΣ ΑΣ.Α AΣ 1Σ",
    "Straße İstanbul IĞDIR", "emoji 😀👍🏽 👨\u200d👩\u200d👧", "zero\u200bwidth\ufeffbom",
    "control\x00\x01\x07\x1b\x7f chars", "a\x1cb\x1dc\x0bd\x0ce", "next\u0085line",
    "nbsp\u00a0here\u2028line\u2029para\u3000x", "replacement \ufffd char",
    "a" * 200, "a" * 201, "é" * 201, "x" * 250 + " after", "¡¿«»„“”–—…·•", "varia\u1fef",
    "\U000E0041tag\U000E007F \ue000 \u0378", "[CLS] [SEP] [MASK]", "C++ / C# 3.14 $100",
    "\U0001D15E\U0001D16D\U0001D165", "\uf900\uf901 \U0002f800", "\x01\x01", " \x01 ",
]


def _random_texts(rng, n):
    specials = [0, 9, 10, 13, 32, 0x1C, 0x85, 0xA0, 0xAD, 0x200B, 0x3000, 0x3A3, 0x301,
                0x4E2D, 0xFFFD, 0x1F600, 0x1]
    out = []
    for _ in range(n):
        cps = [rng.choice([rng.randint(32, 0x7E), rng.randint(0, 0x3000),
                           rng.randint(0, 0x10FFFF), rng.choice(specials)])
               for _ in range(rng.randint(0, 30))]
        out.append("".join(chr(c) for c in cps if not 0xD800 <= c <= 0xDFFF))
    return out


@pytest.mark.parametrize("lower", [True, False])
def test_tokenizer_matches_the_graph_tokenizer_and_the_reference(
        lower, corpus, vocab, vocab_file):
    """The TF-free tokenizer gives the ids of bert_tf.text.tokenization.BertTokenizer and of
    the pure-Python reference on every line of the corpus slice, on hard cases and on
    random Unicode, uncased and cased."""
    with open(corpus, encoding="utf-8") as f:
        lines = [line.strip() for line in f.read().split("\n")]
    texts = lines + HARD_TEXTS + _random_texts(random.Random(7), 3000)
    ours = CachedTokenizer(vocab, do_lower_case=lower)
    flat, counts = ours.tokenize_lines(texts)
    splits = np.concatenate([[0], np.cumsum(counts)])
    mine = [flat[splits[i]:splits[i + 1]].tolist() for i in range(len(texts))]
    graph = BertTokenizer(vocab_file, do_lower_case=lower).encode(texts)
    assert sum(map(len, mine)) > 150_000
    assert [i for i in range(len(texts)) if mine[i] != graph[i]] == []
    reference = ReferenceTokenizer(vocab_file, do_lower_case=lower)
    special = HARD_TEXTS + texts[-3000:]
    assert [t for t in special if ours.tokenize(t) != reference.encode(t)] == []


def test_tokenizer_cache_stays_bounded(corpus, vocab):
    with open(corpus, encoding="utf-8") as f:
        lines = [line.strip() for line in f.read().split("\n")]
    big = CachedTokenizer(vocab)
    small = CachedTokenizer(vocab, max_cache_entries=500)
    want = big.tokenize_lines(lines)[0]
    for i in range(0, len(lines), 1000):
        batch = lines[i:i + 1000]
        small.tokenize_lines(batch)
        # At most the cap plus one batch's chunks (after a shrink, only those are kept).
        assert len(small._chunks) <= 501 + len(set(" ".join(batch).split()))
    np.testing.assert_array_equal(small.tokenize_lines(lines)[0], want)
    assert len(big._chunks) > 10_000


# ----------------------------------------------------------------------------- algorithm

def test_truncation_counts_and_distribution_match_googles_loop():
    rng = np.random.default_rng(0)
    la = rng.integers(1, 400, 3000)
    lb = rng.integers(1, 400, 3000)
    cut_a, cut_b = instances.truncation_counts(la, lb, 125)
    want = [google.truncation_removed(a, b, 125) for a, b in zip(la.tolist(), lb.tolist())]
    assert list(zip(cut_a.tolist(), cut_b.tolist())) == want
    assert (la - cut_a + lb - cut_b <= 125).all() and (la - cut_a >= 1).all()
    # The part taken from the front is Binomial(cut, 1/2), as google's coin flips give.
    inst = {"a_start": np.zeros(20000, np.int64), "a_len": np.full(20000, 300),
            "b_start": np.zeros(20000, np.int64), "b_len": np.full(20000, 10)}
    assert instances.truncate(inst, 128, np.random.default_rng(1)) == 20000
    front = inst["a_start"]                     # cut from the front of A: 185 removed
    assert abs(front.mean() - 92.5) < 0.2 and abs(front.std() - np.sqrt(185) / 2) < 0.2
    assert (inst["a_len"] == 115).all() and (inst["b_len"] == 10).all()


@pytest.fixture(scope="module")
def generated(corpus, tmp_path_factory):
    """Our shards for the corpus slice: 3 shards, dupe_factor 4, default flags otherwise."""
    out = str(tmp_path_factory.mktemp("gen") / "train")
    return out


@pytest.fixture(scope="module")
def ours(corpus, vocab_file, generated):
    run_cli("--input_file", corpus, "--output_file", generated, "--num_shards", 3,
            "--vocab_file", vocab_file, "--dupe_factor", 4, "--num_workers", 1,
            "--block_size_kb", 256)
    paths = sorted(glob.glob(generated + "-*-of-00003"))
    return paths, read_records(paths), read_summary(generated)


@pytest.fixture(scope="module")
def oracle(corpus, bert_tokenizer):
    docs = documents(corpus, bert_tokenizer)
    return docs, google.create_instances(
        docs, len(bert_tokenizer.vocab), bert_tokenizer.cls_id, bert_tokenizer.sep_id,
        bert_tokenizer.mask_id, dupe_factor=4, seed=5)


def _decisions(ex, mask_id):
    """Counts of masked positions left as [MASK], as the original token, or else."""
    w = ex["masked_lm_weights"] > 0
    rows, cols = np.nonzero(w)
    at = ex["input_ids"][rows, ex["masked_lm_positions"][rows, cols]]
    labels = ex["masked_lm_ids"][rows, cols]
    n_mask = int((at == mask_id).sum())
    n_same = int(((at == labels) & (at != mask_id)).sum())
    return n_mask, n_same, len(rows) - n_mask - n_same


def test_statistics_match_the_spec_and_googles_algorithm(ours, oracle, bert_tokenizer):
    paths, ex, summary = ours
    docs, ref = oracle
    n = len(ex["input_ids"])
    n_tokens = ex["input_mask"].sum(axis=1)
    masked = ex["masked_lm_weights"].sum(axis=1)
    # Masking: exactly google's count per example, 15% +-1% overall, 80/10/10 +-2%.
    np.testing.assert_array_equal(masked, masking.num_to_predict(n_tokens, 0.15, PRED))
    assert abs(masked.sum() / n_tokens.sum() - 0.15) < 0.01
    n_mask, n_same, n_random = _decisions(ex, bert_tokenizer.mask_id)
    total = n_mask + n_same + n_random
    assert abs(n_mask / total - 0.8) < 0.02
    assert abs(n_same / total - 0.1) < 0.02
    assert abs(n_random / total - 0.1) < 0.02
    # Corpus-dependent shares: as the original algorithm gives on the same documents.
    ref_random = np.mean([i.is_random_next for i in ref])
    ref_short = np.mean([i.short_target for i in ref])
    ref_tokens = np.mean([len(i.tokens) for i in ref])
    ref_padded = np.mean([len(i.tokens) < SEQ for i in ref])
    random_next = ex["next_sentence_labels"].mean()
    assert ref_random > 0.6     # many one-sentence documents: above 50%, as in google's
    assert abs(random_next - ref_random) < 0.02
    assert abs(summary["short_target_share"] - ref_short) < 0.02
    assert abs(summary["short_target_pass_share"] - 0.1) < 0.01
    assert abs(n_tokens.mean() - ref_tokens) / ref_tokens < 0.02
    assert abs((n_tokens < SEQ).mean() - ref_padded) < 0.02
    assert abs(n / len(ref) - 1) < 0.02
    # The same documents: the tokenizers agree on the corpus.
    assert summary["input_tokens"] == sum(len(s) for d in docs for s in d)
    assert summary["documents"] == len(docs)


def test_examples_are_well_formed(ours, bert_tokenizer, corpus):
    paths, ex, _ = ours
    cls_id, sep_id = bert_tokenizer.cls_id, bert_tokenizer.sep_id
    ids, seg, mask = ex["input_ids"], ex["segment_ids"], ex["input_mask"]
    pos, labels, weights = ex["masked_lm_positions"], ex["masked_lm_ids"], \
        ex["masked_lm_weights"]
    n_tokens = mask.sum(axis=1)
    p = np.arange(SEQ)[None, :]
    # input_mask: ones then zeros; padding is id 0, segment 0.
    np.testing.assert_array_equal(mask, (p < n_tokens[:, None]).astype(np.int64))
    assert (ids[mask == 0] == 0).all() and (seg[mask == 0] == 0).all()
    # Segments: 0 for [CLS] A [SEP], 1 for B [SEP]; A and B non-empty.
    len_b = seg.sum(axis=1) - 1
    len_a = n_tokens - len_b - 3
    assert (len_a >= 1).all() and (len_b >= 1).all() and (n_tokens <= SEQ).all()
    np.testing.assert_array_equal(seg, ((p >= (len_a + 2)[:, None]) & (mask == 1)))
    rows = np.arange(len(ids))
    # Originals: masked positions get their labels back.
    original = ids.copy()
    w = weights > 0
    r_idx, c_idx = np.nonzero(w)
    original[r_idx, pos[r_idx, c_idx]] = labels[r_idx, c_idx]
    assert (original[:, 0] == cls_id).all()
    assert (original[rows, len_a + 1] == sep_id).all()
    assert (original[rows, n_tokens - 1] == sep_id).all()
    specials = (original == cls_id) | (original == sep_id)
    assert specials.sum() == 3 * len(ids)       # no [CLS]/[SEP] inside the text
    # Predictions: sorted, inside the text, never [CLS]/[SEP], padded with zeros.
    k = w.sum(axis=1)
    assert ((pos[:, 1:] > pos[:, :-1]) | ~w[:, 1:]).all()
    assert (w[:, :-1] >= w[:, 1:]).all()
    assert (pos[~w] == 0).all() and (labels[~w] == 0).all()
    assert (k >= 1).all()
    assert not specials[r_idx, pos[r_idx, c_idx]].any()
    assert (pos[r_idx, c_idx] < n_tokens[r_idx]).all()
    # A is a contiguous span of one document; so is B; for "is next", A + B too.
    text = documents(corpus, bert_tokenizer)
    stream = b"".join(b"".join(np.array(s, "<i4").tobytes() for s in d) + b"\xff" * 4
                      for d in text)
    labels_nsp = ex["next_sentence_labels"][:, 0]
    for r in range(0, len(ids), max(1, len(ids) // 300)):
        a = original[r, 1:len_a[r] + 1].astype("<i4").tobytes()
        b = original[r, len_a[r] + 2:n_tokens[r] - 1].astype("<i4").tobytes()
        assert a in stream and b in stream
        if labels_nsp[r] == 0 and n_tokens[r] < SEQ:   # not truncated: B follows A
            assert a + b in stream


def test_summary_matches_the_records(ours):
    paths, ex, summary = ours
    per_shard = [len(read_records([p])["input_ids"]) for p in paths]
    assert [s["examples"] for s in summary["shards"]] == per_shard
    assert [os.path.getsize(p) for p in paths] == [s["bytes"] for s in summary["shards"]]
    assert summary["complete"] and summary["examples"] == len(ex["input_ids"])
    assert summary["example_tokens"] == int(ex["input_mask"].sum())
    assert summary["counts"]["masked"] == int(ex["masked_lm_weights"].sum())
    assert summary["counts"]["random_next"] == int(ex["next_sentence_labels"].sum())
    assert summary["counts"]["padded_examples"] == int((ex["input_mask"].sum(1) < SEQ).sum())
    assert abs(summary["masked_fraction"] - ex["masked_lm_weights"].sum()
               / ex["input_mask"].sum()) < 1e-6
    assert min(per_shard) > 0.2 * max(per_shard)   # shards by input position: balanced


def test_reads_back_with_the_pretraining_pipeline(ours):
    paths, ex, _ = ours
    ds = pretraining_dataset(paths, batch_size=64, max_seq_length=SEQ,
                             max_predictions_per_seq=PRED, is_training=False)
    batch = next(iter(ds))
    shapes = {k: tuple(v.shape) for k, v in batch.items()}
    assert shapes == {"token_ids": (64, SEQ), "segment_ids": (64, SEQ),
                      "padding_mask": (64, SEQ), "masked_lm_positions": (64, PRED),
                      "masked_lm_ids": (64, PRED), "masked_lm_weights": (64, PRED),
                      "next_sentence_labels": (64,)}
    assert batch["masked_lm_weights"].dtype == tf.float32
    assert all(batch[k].dtype == tf.int32 for k in shapes if k != "masked_lm_weights")
    np.testing.assert_array_equal(batch["token_ids"].numpy(), ex["input_ids"][:64])
    np.testing.assert_array_equal(batch["next_sentence_labels"].numpy(),
                                  ex["next_sentence_labels"][:64, 0])
    total = sum(int(b["token_ids"].shape[0]) for b in ds)
    assert total == len(ex["input_ids"])


# ----------------------------------------------------------------------------- masking modes

def _words(original, len_a, n_tokens, is_subword):
    """Per row, the words: lists of positions (a piece and the '##' pieces after it,
    within one segment)."""
    out = []
    for r in range(len(original)):
        words = []
        for seg_lo, seg_hi in ((1, len_a[r] + 1), (len_a[r] + 2, n_tokens[r] - 1)):
            for q in range(seg_lo, seg_hi):
                if words and q > seg_lo and is_subword[original[r, q]]:
                    words[-1].append(q)
                else:
                    words.append([q])
        out.append(words)
    return out


def _original(ex):
    original = ex["input_ids"].copy()
    r_idx, c_idx = np.nonzero(ex["masked_lm_weights"] > 0)
    original[r_idx, ex["masked_lm_positions"][r_idx, c_idx]] = \
        ex["masked_lm_ids"][r_idx, c_idx]
    n_tokens = ex["input_mask"].sum(axis=1)
    len_a = n_tokens - ex["segment_ids"].sum(axis=1) - 2
    return original, len_a, n_tokens


def test_whole_word_masking_masks_whole_words_with_one_choice_per_word(
        small_corpus, vocab_file, vocab, bert_tokenizer, tmp_path):
    out = str(tmp_path / "wwm.tfrecord")
    run_cli("--input_file", small_corpus, "--output_file", out, "--vocab_file", vocab_file,
            "--do_whole_word_mask", "--dupe_factor", 3, "--num_workers", 1)
    ex = read_records([out])
    original, len_a, n_tokens = _original(ex)
    is_subword = np.array([t.startswith("##") for t in vocab])
    mask_id = bert_tokenizer.mask_id
    words_masked = multi_piece = mixed = 0
    decisions = collections.Counter()
    for r, words in enumerate(_words(original, len_a, n_tokens, is_subword)):
        chosen = set(ex["masked_lm_positions"][r][ex["masked_lm_weights"][r] > 0].tolist())
        assert len(chosen) <= masking.num_to_predict(n_tokens[r], 0.15, PRED)
        for word in words:
            hit = [q in chosen for q in word]
            assert all(hit) or not any(hit), "a word is masked in part"
            if not all(hit):
                continue
            words_masked += 1
            is_mask = [ex["input_ids"][r, q] == mask_id for q in word]
            if len(word) > 1:
                multi_piece += 1
                mixed += len(set(is_mask)) > 1
            same = all(ex["input_ids"][r, q] == original[r, q] for q in word)
            decisions["mask" if all(is_mask) else "same" if same else "other"] += 1
    assert multi_piece > 500
    # One draw per word: a word is all [MASK] or has none (google's per-piece draws would
    # mix them in ~1/3 of multi-piece words). A random id that happens to be [MASK] is
    # the only exception (1 in 30522).
    assert mixed <= 2
    total = sum(decisions.values())
    assert abs(decisions["mask"] / total - 0.8) < 0.02
    assert abs(decisions["same"] / total - 0.1) < 0.02
    assert abs(decisions["other"] / total - 0.1) < 0.02
    masked = ex["masked_lm_weights"].sum() / ex["input_mask"].sum()
    assert 0.13 < masked <= 0.15     # whole words skip some, never more than plain


def test_ngram_masking_masks_spans(small_corpus, vocab_file, vocab, tmp_path):
    def run(n):
        out = str(tmp_path / f"ngram{n}.tfrecord")
        run_cli("--input_file", small_corpus, "--output_file", out, "--vocab_file",
                vocab_file, "--do_whole_word_mask", "--max_ngram_size", n, "--dupe_factor", 2,
                "--num_workers", 1)
        return read_records([out])

    def runs(ex):
        """Share of masked words whose next word (same segment) is masked too."""
        original, len_a, n_tokens = _original(ex)
        is_subword = np.array([t.startswith("##") for t in vocab])
        follow = total = 0
        for r, words in enumerate(_words(original, len_a, n_tokens, is_subword)):
            chosen = set(ex["masked_lm_positions"][r][ex["masked_lm_weights"][r] > 0].tolist())
            for w1, w2 in zip(words, words[1:]):
                if w1[0] in chosen and w2[0] != len_a[r] + 2:
                    total += 1
                    follow += w2[0] in chosen
            assert len(chosen) <= masking.num_to_predict(n_tokens[r], 0.15, PRED)
        return follow / total

    plain, spans = runs(run(1)), runs(run(3))
    # P(n) ~ 1/n over 1..3: 6/11 of spans are 1 word, so many masked words are followed
    # by a masked word; unigram masking does that only by chance (~15%).
    assert plain < 0.25 and spans > plain + 0.2


def random_documents(seed=3):
    """A block's layout for the instance tests: 3000 sentences of 3-20 tokens in
    documents of 1-12 sentences -> (sentence_starts, doc_bounds)."""
    rng = random.Random(seed)
    lengths = [rng.randint(3, 20) for _ in range(3000)]
    starts = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    doc_bounds, first = [], 0
    while first < len(lengths):
        end = min(len(lengths), first + rng.randint(1, 12))
        doc_bounds.append((first, end))
        first = end
    return starts, doc_bounds


def test_sentence_order_pairs_are_the_next_text_swapped_half_the_time():
    """--next_sentence=sop (ALBERT): a chunk of several sentences gives A and the rest of
    the chunk, in order (label 0) or swapped (label 1) with probability 1/2; a
    one-sentence chunk still takes a random B (label 1), as ALBERT's script does."""
    starts, doc_bounds = random_documents()
    inst = instances.create_instances(starts, doc_bounds, 2, 64, 0.1, random.Random(5),
                                      next_sentence="sop")
    a_end = inst["a_start"] + inst["a_len"]
    b_end = inst["b_start"] + inst["b_len"]
    in_order = ~inst["random_next"]
    swapped = inst["swapped"]
    random_b = inst["random_next"] & ~swapped
    assert (inst["random_next"] == (swapped | random_b)).all()
    np.testing.assert_array_equal(inst["b_start"][in_order], a_end[in_order])
    np.testing.assert_array_equal(b_end[swapped], inst["a_start"][swapped])
    assert 0.45 < swapped.sum() / (swapped.sum() + in_order.sum()) < 0.55
    # NSP on the same documents and seed: unchanged by the new parameter (google's draws).
    nsp = instances.create_instances(starts, doc_bounds, 2, 64, 0.1, random.Random(5))
    default = instances.create_instances(starts, doc_bounds, 2, 64, 0.1, random.Random(5),
                                         next_sentence="nsp")
    for key in ("a_start", "a_len", "b_start", "b_len", "random_next"):
        np.testing.assert_array_equal(nsp[key], default[key])
    assert not nsp["swapped"].any()


def test_sop_shards_and_summary(small_corpus, vocab_file, tmp_path, capsys):
    out = str(tmp_path / "sop.tfrecord")
    summary = run_cli("--input_file", small_corpus, "--output_file", out, "--vocab_file",
                      vocab_file, "--next_sentence", "sop", "--dupe_factor", 2,
                      "--num_workers", 1)
    counts = summary["counts"]
    ex = read_records([out])
    labels = ex["next_sentence_labels"][:, 0]
    assert labels.sum() == counts["swapped"] + counts["random_next"]
    assert 0.4 < counts["swapped"] / (summary["examples"] - counts["random_next"]) < 0.6
    assert f"swapped {100 * counts['swapped'] / summary['examples']:.1f}%" in \
        capsys.readouterr().out
    assert summary["config"]["settings"]["next_sentence"] == "sop"


def test_full_sentences_are_contiguous_whole_sentences_across_documents():
    """--next_sentence=none (RoBERTa's FULL-SENTENCES): each instance is whole
    consecutive sentences, read on across documents' ends with a [SEP] at each; a
    sentence that does not fit starts the next instance, one longer than the target is
    split; the chunks of a pass tile the block's tokens in order, so every token is in
    one instance per pass and nothing is cut; no label is set."""
    starts, doc_bounds = random_documents()
    # Two sentences longer than the 62-token target, to be split.
    lengths = np.diff(starts)
    lengths[[100, 2000]] = [150, 70]
    starts = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    inst = instances.create_instances(starts, doc_bounds, 2, 64, 0.0, random.Random(5),
                                      next_sentence="none")
    assert not inst["random_next"].any() and (inst["b_len"] == 0).all()
    start, end = inst["a_start"], inst["a_start"] + inst["a_len"]
    # Two passes, each tiling all tokens in order.
    per_pass = len(start) // 2
    assert end[per_pass - 1] == starts[-1] == end[-1] and start[per_pass] == 0
    np.testing.assert_array_equal(start[1:per_pass], end[:per_pass - 1])
    doc_starts = instances.document_starts(starts, doc_bounds)
    seps = instances.separators(start, inst["a_len"], doc_starts)
    assert seps.max() >= 3                                     # several documents
    assert seps[0] == sum(1 for d in doc_starts if start[0] < d < end[0])
    length = inst["a_len"] + seps
    assert (length <= 62).all()
    # Whole sentences, except the long ones' pieces (62 tokens, then the rest).
    sentence_starts = set(starts)
    inside = [i for i, e in enumerate(end) if e not in sentence_starts]
    assert len(inside) == 2 * 3 and (length[inside] == 62).all()   # 150 = 62+62+26; 70
    assert all(s in sentence_starts for i, s in enumerate(start) if i - 1 not in inside)
    # Greedy: the next sentence (after a [SEP] where a document ends) did not fit.
    boundaries = np.array(starts)
    doc_ends = set(doc_starts.tolist())
    for i in range(per_pass - 1):
        if i in inside:
            continue
        following = boundaries[np.searchsorted(boundaries, end[i], "right")] - end[i]
        assert length[i] + following + (end[i] in doc_ends) > 62, i
    # Nothing to truncate.
    assert instances.truncate_full_sentences(inst, 64, np.random.default_rng(0),
                                             doc_starts) == 0
    # Packed: [CLS], the tokens with a [SEP] before every document start inside, [SEP].
    tokens = np.arange(starts[-1], dtype=np.int32) + 1000
    ids, segments, mask, text, n = masking.pack_full_sentences(
        tokens, inst["a_start"][:50], inst["a_len"][:50], doc_starts, 64, 101, 102)
    for row, (s, ln) in enumerate(zip(inst["a_start"][:50], inst["a_len"][:50])):
        want = [101]
        for t in range(s, s + ln):
            if t != s and t in set(doc_starts.tolist()):
                want.append(102)
            want.append(tokens[t])
        want.append(102)
        assert ids[row, :n[row]].tolist() == want and not ids[row, n[row]:].any()
        assert (text[row] == ((ids[row] >= 1000))).all()
    assert not segments.any() and (mask.sum(axis=1) == n).all()
    # NSP on the same documents and seed: unchanged (google's draws).
    nsp = instances.create_instances(starts, doc_bounds, 2, 64, 0.0, random.Random(5))
    assert nsp["random_next"].any() and (nsp["b_len"] > 0).all()


def test_full_sentences_shards(small_corpus, vocab_file, tmp_path):
    """Shards of --next_sentence=none: [CLS] ... [SEP] with a [SEP] at each document
    start inside, segment ids 0, labels 0, every token kept."""
    out = str(tmp_path / "none.tfrecord")
    summary = run_cli("--input_file", small_corpus, "--output_file", out, "--vocab_file",
                      vocab_file, "--next_sentence", "none", "--dupe_factor", 1,
                      "--num_workers", 1)
    ex = read_records([out])
    vocab = {t: i for i, t in enumerate(open(vocab_file, encoding="utf-8").read().split())}
    ids, mask = ex["input_ids"], ex["input_mask"]
    n = mask.sum(axis=1)
    assert (ex["segment_ids"] == 0).all() and (ex["next_sentence_labels"] == 0).all()
    assert (ids[:, 0] == vocab["[CLS]"]).all()
    assert (ids[np.arange(len(ids)), n - 1] == vocab["[SEP]"]).all()
    seps = (ids == vocab["[SEP]"]).sum(axis=1)
    assert seps.min() == 1 and seps.max() >= 3
    # Whole sentences packed up to the length: full but for the sentence that did not
    # fit (or a short target); every token of the text in an example, none cut.
    assert n.mean() > 0.8 * SEQ
    assert summary["kept_token_share"] == 1.0 and summary["truncated_share"] == 0.0
    positions = ex["masked_lm_positions"][ex["masked_lm_weights"] > 0]
    assert (positions > 0).all()
    assert summary["config"]["settings"]["next_sentence"] == "none"
    assert summary["counts"]["random_next"] == 0


# ----------------------------------------------------------------------------- the command

def test_same_output_whatever_the_number_of_workers(small_corpus, vocab_file, tmp_path):
    outputs = {}
    for workers in (1, 2, 3):
        out = str(tmp_path / f"w{workers}")
        run_cli("--input_file", small_corpus, "--output_file", out, "--num_shards", 2,
                "--vocab_file", vocab_file, "--dupe_factor", 2, "--num_workers", workers,
                "--block_size_kb", 16)
        outputs[workers] = [open(p, "rb").read() for p in sorted(glob.glob(out + "-*"))
                            if not p.endswith(".json")]
    assert len(outputs[1]) == 2 and all(len(b) > 100_000 for b in outputs[1])
    assert outputs[1] == outputs[2] == outputs[3]
    other = str(tmp_path / "seed")
    run_cli("--input_file", small_corpus, "--output_file", other, "--vocab_file",
            vocab_file, "--dupe_factor", 2, "--num_workers", 1, "--block_size_kb", 16,
            "--random_seed", 1)
    assert open(other, "rb").read() != b"".join(outputs[1])


def test_pool_returns_results_that_arrive_together(tmp_path, vocab_file):
    """Two results waiting in one worker's pipe are both returned (a buffered reader once
    swallowed the second where select() could not see it, and the run hung)."""
    from bert_tf.data.inputs import Settings
    from bert_tf.data.pool import WorkerPool
    text = tmp_path / "t.txt"
    text.write_text("One sentence here.\nAnother one.\n\nA second document.\n",
                    encoding="utf-8")
    segments = ((str(text), 0, text.stat().st_size),)
    pool = WorkerPool(1, Settings(vocab_file=vocab_file, dupe_factor=1), depth=2)
    try:
        pool.submit((0, segments, str(tmp_path / "p0")))
        pool.submit((1, segments, str(tmp_path / "p1")))
        time.sleep(3)              # both done: their results are in the pipe together
        got = {}
        for _ in range(3):
            got.update(pool.results(timeout=10))
            if len(got) == 2:
                break
        assert sorted(got) == [0, 1]
        assert [got[i]["documents"] for i in (0, 1)] == [2, 2] and got[0]["examples"] >= 2
        assert not pool.busy()
    finally:
        pool.close()


def test_gzip_shards(small_corpus, vocab_file, tmp_path):
    plain, packed = str(tmp_path / "plain"), str(tmp_path / "packed.gz")
    common = ["--input_file", small_corpus, "--vocab_file", vocab_file, "--dupe_factor", 1,
              "--num_workers", 2, "--block_size_kb", 32]
    run_cli(*common, "--output_file", plain)
    run_cli(*common, "--output_file", packed, "--gzip")
    with open(plain, "rb") as f:
        raw = f.read()
    assert gzip.decompress(open(packed, "rb").read()) == raw     # several gzip members
    assert len(open(packed, "rb").read()) < len(raw) / 3
    a, b = read_records([plain]), read_records([packed], "GZIP")
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])


def test_input_formats(tmp_path, vocab_file):
    paragraphs = tmp_path / "para.txt"
    paragraphs.write_text(
        "The first document has one paragraph. It has three sentences! Does it? Yes.\n"
        "A wrapped line of the same paragraph.\n\n"
        "Second document. Two sentences here.\n", encoding="utf-8")
    out = str(tmp_path / "para.tfrecord")
    run_cli("--input_file", paragraphs, "--output_file", out, "--vocab_file", vocab_file,
            "--input_format", "paragraphs", "--dupe_factor", 2, "--num_workers", 1)
    s = read_summary(out)
    assert (s["documents"], s["sentences"]) == (2, 7)   # 5 + 2, split at . ! ?
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("\n".join([
        json.dumps({"text": "Alpha beta gamma. Delta epsilon zeta.\nNew paragraph here."}),
        "{not json",
        json.dumps({"title": "no text field"}),
        json.dumps({"text": "Only one sentence in this one."}),
    ]) + "\n", encoding="utf-8")
    out = str(tmp_path / "jsonl.tfrecord")
    run_cli("--input_file", jsonl, "--output_file", out, "--vocab_file", vocab_file,
            "--input_format", "jsonl", "--dupe_factor", 3, "--num_workers", 1)
    s = read_summary(out)
    assert (s["documents"], s["sentences"]) == (2, 4)
    assert s["counts"]["malformed_json_lines"] == 1
    assert s["counts"]["json_lines_without_field"] == 1
    assert s["examples"] == len(read_records([out])["input_ids"]) > 0


def test_hard_input_is_handled_and_counted(tmp_path, vocab_file):
    """Invalid UTF-8, empty and one-sentence documents, control characters, blank lines of
    spaces and a 300 kB line without a newline: handled, and counted in the summary."""
    bad = b"Caf\xc3 au lait is \xff\xfe fine.\nSecond \x80 line.\n\n"
    empty = b"\n\n   \n\t\n\n\x01\x02\n\n"
    one = b"A lonely sentence.\n\n"
    ctrl = b"Tab\there and bell\x07 inside.\nAnd \x1c file separator.\n\n"
    huge = (b"word " * 60_000) + b"\n\n"
    normal = b"".join(b"Sentence %d of a normal document.\n" % i for i in range(40)) + b"\n"
    path = tmp_path / "hard.txt"
    path.write_bytes(bad + empty + one + ctrl + huge + normal * 20)
    out = str(tmp_path / "hard.tfrecord")
    run_cli("--input_file", path, "--output_file", out, "--vocab_file", vocab_file,
            "--dupe_factor", 2, "--num_workers", 1, "--block_size_kb", 16)
    s = read_summary(out)
    c = s["counts"]
    assert c["invalid_utf8_bytes"] == 4
    assert c["lines_cut"] >= 4                # 300 kB in pieces of at most 64 kB
    assert c["one_sentence_documents"] >= 2
    assert c["documents_without_tokens"] == 1  # the control characters-only document
    ex = read_records([out])
    assert s["examples"] == len(ex["input_ids"]) > 100
    assert ex["input_mask"].sum(axis=1).max() == SEQ


def test_small_input_never_gives_an_empty_shard(stdlib_corpus, vocab_file, tmp_path):
    """70 kB in two shards (one default 1 MB block): both shards hold examples, the same
    number to one (dealt round-robin). Fewer examples than shards (one short document,
    one pass, four shards): an error naming --num_shards, and no file left."""
    text = tmp_path / "small.txt"
    _slice(stdlib_corpus, str(text), 70_000)
    out = str(tmp_path / "two" / "train")
    summary = run_cli("--input_file", text, "--output_file", out, "--vocab_file", vocab_file,
                      "--num_shards", 2, "--num_workers", 1, "--dupe_factor", 1)
    counts = [shard["examples"] for shard in summary["shards"]]
    assert len(counts) == 2 and min(counts) > 0 and max(counts) - min(counts) <= 1, counts
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("One short sentence here.\nAnd a second one.\n", encoding="utf-8")
    out = str(tmp_path / "four" / "train")
    run_cli("--input_file", tiny, "--output_file", out, "--vocab_file", vocab_file,
            "--num_shards", 4, "--num_workers", 1, "--dupe_factor", 1, expect=1)
    assert not os.path.exists(tmp_path / "four")      # the folder it made is removed too


def test_a_line_longer_than_the_cap_is_cut_between_characters(tmp_path):
    """A line without a newline that fills the read buffer exactly to its cap (as a 5 MB
    line does with the default 1 MB blocks and 256 kB reads) is cut into whole UTF-8
    characters; every byte comes back once, in order."""
    for tail in (b"", "é".encode(), "中".encode(), "😀".encode()):
        for shift in range(4):   # put the cap before, inside and after a character
            data = b"a" * (4096 - shift) + ("中文é😀" * 200).encode() + tail
            path = tmp_path / f"line_{len(tail)}_{shift}.txt"
            path.write_bytes(data)
            blocks = list(iter_blocks([str(path)], block_bytes=1024, read_size=1024))
            joined = b"".join(read_block(b.segments) for b in blocks)
            assert joined == data + b"\n\n"   # the file's own document break appended
            for block in blocks:
                read_block(block.segments).decode("utf-8")   # no character split
            assert sum(b.lines_cut for b in blocks) >= 1


@pytest.mark.parametrize("case", ["empty_input", "blank_input", "no_match", "no_vocab",
                                  "duplicate_token", "no_mask_token", "bad_seq_length",
                                  "bad_prob", "shards_mismatch"])
def test_bad_input_is_one_clear_line_and_exit_1(case, tmp_path, vocab_file, capsys):
    text = tmp_path / "in.txt"
    text.write_text("One sentence.\nTwo sentences.\n", encoding="utf-8")
    vocab = vocab_file
    flags = []
    if case == "empty_input":
        text.write_bytes(b"")
    elif case == "blank_input":
        text.write_bytes(b"\n \n\x01\n\n")
    elif case == "no_match":
        text = tmp_path / "missing-*.txt"
    elif case == "no_vocab":
        vocab = tmp_path / "nope.txt"
    elif case in ("duplicate_token", "no_mask_token"):
        tokens = open(vocab_file, encoding="utf-8").read().split("\n")
        tokens = tokens + ["the"] if case == "duplicate_token" else \
            [t for t in tokens if t != "[MASK]"]
        vocab = tmp_path / "vocab.txt"
        vocab.write_text("\n".join(t for t in tokens if t) + "\n", encoding="utf-8")
    elif case == "bad_seq_length":
        flags = ["--max_seq_length", 4]
    elif case == "bad_prob":
        flags = ["--masked_lm_prob", 0]
    elif case == "shards_mismatch":
        flags = ["--num_shards", 3]
    out = str(tmp_path / "o.tfrecord")
    if case == "shards_mismatch":
        out = out + "," + out + "2"
    run_cli("--input_file", text, "--output_file", out, "--vocab_file", vocab, *flags,
            "--num_workers", 1, expect=1)
    err = capsys.readouterr().err.strip().split("\n")
    assert len(err) == 1 and err[0].startswith("error: ")
    expected = {"empty_input": "no text", "blank_input": "no examples",
                "no_match": "no file matches", "no_vocab": "cannot read",
                "duplicate_token": "twice", "no_mask_token": "lacks [MASK]",
                "bad_seq_length": "--max_seq_length", "bad_prob": "--masked_lm_prob",
                "shards_mismatch": "--num_shards"}[case]
    assert expected in err[0]
    assert not os.path.exists(str(tmp_path / "o.tfrecord"))


@pytest.mark.slow
def test_rerun_after_sigkill_goes_on_where_it_stopped_and_gives_the_same_bytes(
        corpus, vocab_file, tmp_path, capsys):
    """kill -9 (main process and workers) once some blocks are dealt to the shards: the
    rerun cuts the shards' temporary files back to what the progress record says, goes on
    from the next block, and ends with the uninterrupted run's bytes."""
    flags = ["--input_file", corpus, "--vocab_file", vocab_file, "--dupe_factor", 3,
             "--num_shards", 6, "--block_size_kb", 24, "--num_workers", 2, "--quiet"]
    full = str(tmp_path / "full" / "train")
    run_cli(*flags[:-1], "--output_file", full)
    cmd = [sys.executable, "-m", "bert_tf.create_pretraining_data", *map(str, flags),
           "--output_file", str(tmp_path / "killed" / "train")]
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True)
    killed = str(tmp_path / "killed" / "train")
    deadline = time.time() + 120

    def recorded():
        try:
            return json.load(open(killed + ".tmp-progress.json"))["next_block"]
        except (OSError, ValueError):
            return 0

    while recorded() < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.005)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)         # the whole group: main and workers
    proc.wait()
    done = recorded()
    assert done >= 2 and not os.path.exists(killed + "-00000-of-00006")
    capsys.readouterr()
    run_cli(*flags[:-1], "--output_file", killed)
    assert f"resuming: the shards hold the first {done} block(s)" in capsys.readouterr().out
    summary = read_summary(killed)
    assert not glob.glob(killed + "*.tmp*")
    for i in range(6):
        name = f"-{i:05d}-of-00006"
        assert open(killed + name, "rb").read() == open(full + name, "rb").read()
    assert summary["examples"] == read_summary(full)["examples"]
    assert summary["counts"] == read_summary(full)["counts"]


def test_blocks_cover_the_input_exactly(small_corpus, tmp_path):
    other = tmp_path / "b.txt"
    other.write_bytes(b"no trailing newline")
    paths = [small_corpus, str(other)]
    blocks = list(iter_blocks(paths, 4096))
    data = b"".join(read_block(b.segments) for b in blocks)
    expected = b"".join(open(p, "rb").read() + b"\n\n" for p in paths)
    assert data == expected
    assert [b.offset for b in blocks] == list(np.cumsum([0] + [b.length for b in blocks])[:-1])
    # Every block but the last ends at a blank line (a document boundary).
    assert all(read_block(b.segments).endswith(b"\n\n") for b in blocks[:-1])
    assert len(blocks) > 20


@pytest.mark.parametrize("next_sentence", ["nsp", "none"])
def test_shards_are_the_same_size(corpus, vocab_file, tmp_path, next_sentence):
    """Each block's examples are dealt round-robin to the shards (google's writer deals
    every example so): on 700 kB of docstrings, whose stretches make different numbers
    of examples per byte, eight shards hold the same number of examples to within one
    per block (8 blocks here: the input is cut into a block per shard), and their bytes
    differ by under 10%. With contiguous ranges of blocks, before, the same run gave
    1,020 to 1,305 examples a shard (nsp; bytes 1.25x apart)."""
    out = str(tmp_path / "train")
    summary = run_cli("--input_file", corpus, "--output_file", out, "--vocab_file",
                      vocab_file, "--num_shards", 8, "--dupe_factor", 2, "--num_workers", 1,
                      "--next_sentence", next_sentence)
    examples = [shard["examples"] for shard in summary["shards"]]
    sizes = [shard["bytes"] for shard in summary["shards"]]
    assert sum(examples) == summary["examples"] > 1000
    assert max(examples) - min(examples) <= 8, examples
    assert max(sizes) < 1.1 * min(sizes), sizes
