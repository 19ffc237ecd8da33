"""BertPacker and the truncation rules vs plain-Python versions of google-research/bert's."""

import random

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.text.packing import (BertPacker, pack_row, pair_lengths, truncate_seq_pair,
                                  truncate_seq_pair_random)

CLS, SEP, PAD = 101, 102, 0


def google_pack(a, b, seq_length):
    """run_classifier.convert_single_example's packing, written out for lists of ids."""
    a, b = list(a), (list(b) if b else None)   # google: `if example.text_b` / `if tokens_b`
    if b:
        while len(a) + len(b) > seq_length - 3:
            if len(a) > len(b):
                a.pop()
            else:
                b.pop()
    else:
        a = a[:seq_length - 2]
    tokens = [CLS] + a + [SEP]
    segments = [0] * len(tokens)
    if b:
        tokens += b + [SEP]
        segments += [1] * (len(b) + 1)
    mask = [1] * len(tokens)
    pad = seq_length - len(tokens)
    return tokens + [PAD] * pad, segments + [0] * pad, mask + [0] * pad


def random_rows(rng, n, max_len):
    # ids 1000+ so they never collide with the special ids
    return [[1000 + rng.randrange(5000) for _ in range(rng.randint(0, max_len))]
            for _ in range(n)]


def check(packer, rows_a, rows_b):
    a = tf.ragged.constant(rows_a, dtype=tf.int32, ragged_rank=1)
    b = None if rows_b is None else tf.ragged.constant(rows_b, dtype=tf.int32, ragged_rank=1)
    if not rows_a:  # an empty batch needs its inner dimension spelled out
        a = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32), tf.zeros([0], tf.int64))
        b = None if rows_b is None else a
    got = packer(a, b)
    assert sorted(got) == ["padding_mask", "segment_ids", "token_ids"]
    for name in got:
        assert got[name].dtype == tf.int32
        assert got[name].shape.as_list()[1:] == [packer.seq_length]
    want = [google_pack(x, None if rows_b is None else y, packer.seq_length)
            for x, y in zip(rows_a, rows_b or [None] * len(rows_a))]
    for i, name in enumerate(("token_ids", "segment_ids", "padding_mask")):
        expected = np.array([w[i] for w in want], np.int32).reshape(-1, packer.seq_length)
        np.testing.assert_array_equal(got[name].numpy(), expected, err_msg=name)


@pytest.mark.parametrize("seq_length", [3, 4, 5, 8, 13, 32])
def test_pairs_match_google_on_random_lengths(seq_length):
    rng = random.Random(seq_length)
    packer = BertPacker(seq_length, CLS, SEP, PAD)
    rows_a, rows_b = random_rows(rng, 400, 40), random_rows(rng, 400, 40)
    check(packer, rows_a, rows_b)


@pytest.mark.parametrize("seq_length", [3, 7, 16])
def test_single_segments_match_google(seq_length):
    rng = random.Random(7)
    check(BertPacker(seq_length, CLS, SEP, PAD), random_rows(rng, 300, 30), None)


def test_ties_and_exact_fit():
    packer = BertPacker(9, CLS, SEP, PAD)   # budget 6 for the pair
    a, b = [11, 12, 13, 14], [21, 22, 23, 24]
    out = packer(tf.ragged.constant([a, a[:3], a[:2]]), tf.ragged.constant([b, b[:3], b]))
    # Equal lengths 4+4 -> B loses first -> 4+3 -> A -> 3+3. Exactly fitting 3+3 is kept.
    # 2+4 fits exactly too.
    assert out["token_ids"].numpy().tolist() == [
        [CLS, 11, 12, 13, SEP, 21, 22, 23, SEP],
        [CLS, 11, 12, 13, SEP, 21, 22, 23, SEP],
        [CLS, 11, 12, SEP, 21, 22, 23, 24, SEP]]
    assert out["segment_ids"].numpy().tolist()[0] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert out["padding_mask"].numpy().tolist()[0] == [1] * 9
    # Odd budget: A keeps the extra token (ties pop B).
    odd = BertPacker(10, CLS, SEP, PAD)(tf.ragged.constant([a + [15]]),
                                        tf.ragged.constant([b + [25]]))
    assert odd["token_ids"].numpy().tolist() == [[CLS, 11, 12, 13, 14, SEP, 21, 22, 23, SEP]]


def test_empty_inputs():
    packer = BertPacker(6, CLS, SEP, PAD)
    out = packer(tf.ragged.constant([[], [5]], dtype=tf.int32),
                 tf.ragged.constant([[7], []], dtype=tf.int32))
    # Empty A still gets [CLS] [SEP]; an empty B makes the row a single segment (google).
    assert out["token_ids"].numpy().tolist() == [[CLS, SEP, 7, SEP, PAD, PAD],
                                                 [CLS, 5, SEP, PAD, PAD, PAD]]
    assert out["segment_ids"].numpy().tolist() == [[0, 0, 1, 1, 0, 0], [0] * 6]
    assert out["padding_mask"].numpy().tolist() == [[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]]
    check(packer, [], [])        # empty batch
    check(packer, [], None)
    check(packer, [[], []], [[], []])


def test_in_tf_data_and_tf_function():
    packer = BertPacker(8, CLS, SEP, PAD)
    rng = random.Random(3)
    rows_a, rows_b = random_rows(rng, 10, 9), random_rows(rng, 10, 9)
    ds = tf.data.Dataset.from_tensor_slices(
        (tf.ragged.constant(rows_a), tf.ragged.constant(rows_b))).batch(4).map(packer)
    got = np.concatenate([batch["token_ids"].numpy() for batch in ds])
    want = [google_pack(a, b, 8)[0] for a, b in zip(rows_a, rows_b)]
    np.testing.assert_array_equal(got, want)

    fn = tf.function(packer, input_signature=[tf.RaggedTensorSpec([None, None], tf.int32)] * 2)
    out = fn(tf.ragged.constant(rows_a), tf.ragged.constant(rows_b))
    np.testing.assert_array_equal(out["token_ids"].numpy(), want)


def test_saved_model(tmp_path):
    module = tf.Module()
    module.packer = BertPacker(8, CLS, SEP, PAD)
    module.pack = tf.function(
        lambda a, b: module.packer(a, b),
        input_signature=[tf.RaggedTensorSpec([None, None], tf.int32)] * 2)
    tf.saved_model.save(module, str(tmp_path))
    loaded = tf.saved_model.load(str(tmp_path))
    a, b = tf.ragged.constant([[5, 6, 7, 8, 9], [1]]), tf.ragged.constant([[3, 4], []])
    out = loaded.pack(a, b)
    assert out["token_ids"].numpy().tolist() == [[CLS, 5, 6, 7, SEP, 3, 4, SEP],
                                                 [CLS, 1, SEP, PAD, PAD, PAD, PAD, PAD]]


def test_with_tokenizer_output_and_dense_input():
    packer = BertPacker(6, CLS, SEP, PAD)
    out = packer(tf.constant([[5, 6, 7, 8, 9]], tf.int64))   # dense = all real tokens
    assert out["token_ids"].numpy().tolist() == [[CLS, 5, 6, 7, 8, SEP]]


def test_bad_input_errors():
    with pytest.raises(ValueError, match="seq_length must be >= 3"):
        BertPacker(2, CLS, SEP)
    packer = BertPacker(8, CLS, SEP)
    with pytest.raises(ValueError, match="integer token ids"):
        packer(tf.ragged.constant([["a"]]))
    with pytest.raises(ValueError, match="integer token ids"):
        packer(tf.constant([1, 2, 3]))


def test_pair_lengths_equal_round_robin_trimmer_and_google_loop():
    import tensorflow_text as tf_text
    rng = random.Random(2)
    for budget in range(0, 30):
        la = [rng.randint(0, 35) for _ in range(60)]
        lb = [rng.randint(0, 35) for _ in range(60)]
        ka, kb = pair_lengths(tf.constant(la, tf.int64), tf.constant(lb, tf.int64), budget)
        ta, tb = tf_text.RoundRobinTrimmer(budget).trim([tf.ragged.range(la), tf.ragged.range(lb)])
        assert ka.numpy().tolist() == ta.row_lengths().numpy().tolist()
        assert kb.numpy().tolist() == tb.row_lengths().numpy().tolist()
        for x, y, fa, fb in zip(la, lb, ka.numpy(), kb.numpy()):
            a, b = list(range(x)), list(range(y))
            truncate_seq_pair(a, b, budget)
            assert (len(a), len(b)) == (fa, fb)


def test_truncate_seq_pair_lists():
    rng = random.Random(11)
    for _ in range(500):
        la, lb, m = rng.randint(0, 30), rng.randint(0, 30), rng.randint(0, 40)
        a, b = list(range(la)), list(range(100, 100 + lb))
        truncate_seq_pair(a, b, m)
        # Same result as BertPacker's graph rule (round robin from A), and prefixes kept.
        total = min(la + lb, m)
        fa = min(la, max((m + 1) // 2, m - lb)) if la + lb > m else la
        assert (len(a), len(b)) == (fa, total - fa)
        assert a == list(range(len(a))) and b == list(range(100, 100 + len(b)))


def google_random_truncate(a, b, max_num_tokens, rng):
    """create_pretraining_data.truncate_seq_pair, written out."""
    while len(a) + len(b) > max_num_tokens:
        trunc = a if len(a) > len(b) else b
        assert len(trunc) >= 1
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()


def test_truncate_seq_pair_random_matches_google_draw_for_draw():
    for seed in range(300):
        setup = random.Random(seed)
        la, lb, m = setup.randint(0, 40), setup.randint(0, 40), setup.randint(1, 50)
        a1, b1 = list(range(la)), list(range(100, 100 + lb))
        a2, b2 = list(a1), list(b1)
        rng1, rng2 = random.Random(seed), random.Random(seed)
        truncate_seq_pair_random(a1, b1, m, rng1)
        google_random_truncate(a2, b2, m, rng2)
        assert (a1, b1) == (a2, b2)
        assert rng1.random() == rng2.random()   # same number of draws
        assert len(a1) + len(b1) == min(la + lb, m)
        # Survivors are contiguous runs of the originals (cut at the ends only).
        if a1:
            assert a1 == list(range(a1[0], a1[0] + len(a1)))


def test_truncate_seq_pair_random_pinned():
    a, b = list(range(10)), list(range(100, 104))
    truncate_seq_pair_random(a, b, 8, random.Random(12345))
    assert (a, b) == ([5, 6, 7, 8], [100, 101, 102, 103])   # A cut at both ends
    a, b = list(range(6)), list(range(100, 106))
    truncate_seq_pair_random(a, b, 7, random.Random(1))     # ties cut B
    assert (a, b) == ([1, 2, 3, 4], [102, 103, 104])
    with pytest.raises(ValueError, match="cannot fit"):
        truncate_seq_pair_random([], [], -1, random.Random(0))


def test_pack_row_is_the_packers_layout():
    """pack_row (BertPacker run eagerly for the rows built in Python: NER, SQuAD,
    extract_features, the quickstart) lays out rows that fit as BertPacker does in the
    graph and as google's run_classifier does; a row that does not fit is refused."""
    rng = random.Random(7)
    packer = BertPacker(16, CLS, SEP, PAD)
    for _ in range(200):
        a, b = random_rows(rng, 1, 8)[0], rng.choice([None, [], *random_rows(rng, 1, 5)])
        got = pack_row(a, b, 16, CLS, SEP, PAD)
        graph = packer(tf.ragged.constant([a], tf.int32),
                       None if b is None else tf.ragged.constant([b], tf.int32, ragged_rank=1))
        for name, values in zip(("token_ids", "segment_ids", "padding_mask"),
                                google_pack(a, b, 16)):
            assert got[name].tolist() == values == graph[name][0].numpy().tolist()
    assert pack_row([5, 6], [7], None, CLS, SEP)["token_ids"].tolist() == [CLS, 5, 6, SEP, 7, SEP]
    with pytest.raises(ValueError, match="do not fit in 5"):
        pack_row([5, 6, 7, 8], None, 5, CLS, SEP)


def test_the_data_scripts_numpy_packer_lays_out_rows_as_bertpacker():
    """bert_tf/data/masking.pack (the data script's packer of pretraining instances, A and
    B as ranges of one token array) follows text_rules.pair_layout as BertPacker does: the
    same ids, segments and mask on 300 random instances that fit (a B of no tokens
    included), its candidates the segments' tokens and its counts the real columns."""
    from bert_tf.data import masking
    rng = np.random.default_rng(3)
    tokens = rng.integers(1000, 6000, 400).astype(np.int32)
    a_len = rng.integers(0, 9, 300)
    b_len = np.where(rng.random(300) < 0.2, 0, rng.integers(1, 6, 300))
    a_start, b_start = rng.integers(0, 380, 300), rng.integers(0, 380, 300)
    ids, segments, mask, candidate, n_tokens = masking.pack(
        tokens, a_start, a_len, b_start, b_len, 16, CLS, SEP)
    ragged = lambda starts, lengths: tf.ragged.constant(
        [tokens[s:s + n].tolist() for s, n in zip(starts, lengths)], tf.int32, ragged_rank=1)
    want = BertPacker(16, CLS, SEP, PAD)(ragged(a_start, a_len), ragged(b_start, b_len))
    assert ids.tolist() == want["token_ids"].numpy().tolist()
    assert segments.tolist() == want["segment_ids"].numpy().tolist()
    assert mask.astype(int).tolist() == want["padding_mask"].numpy().tolist()
    assert candidate.tolist() == (mask & (ids != CLS) & (ids != SEP)).tolist()
    assert n_tokens.tolist() == (a_len + 2 + np.where(b_len > 0, b_len + 1, 0)).tolist()
    assert (b_len == 0).sum() > 30 and segments.max() == 1
