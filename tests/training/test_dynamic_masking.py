"""Dynamic masking (bert_tf/training/dynamic_masking.py, run_pretraining --masking=dynamic)
and the unmasked shards of create_pretraining_data --masking=none: google's rules over many
batches (15% of the tokens, 80/10/10, never [CLS]/[SEP]/padding, whole words whole, spans
inside a segment), masks that change from epoch to epoch and repeat after a resume, and the
commands end to end."""

import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import create_pretraining_data, run_pretraining
from bert_tf.training.data import pretraining_dataset
from bert_tf.training.dynamic_masking import MaskingSpec, remask, unmasked_ids

# A vocabulary: the specials at google's ids, then words, every third a '##' piece.
TOKENS = (["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]",
          "[MASK]"] + [f"##p{i}" if i % 3 == 0 else f"w{i}" for i in range(896)])
CLS, SEP, MASK = 101, 102, 103
B, L, P = 32, 48, 8


def synthetic_batch(seed, predictions=P):
    """A batch as the pipeline gives it, unmasked: [CLS] A [SEP] B [SEP] then padding."""
    rng = np.random.default_rng(seed)
    n = rng.integers(8, L + 1, B)
    a = rng.integers(2, n - 3)
    ids = rng.integers(104, len(TOKENS), (B, L)).astype(np.int32)
    positions = np.arange(L)[None, :]
    mask = positions < n[:, None]
    ids[:, 0] = CLS
    ids[np.arange(B), a] = SEP
    ids[np.arange(B), n - 1] = SEP
    ids[~mask] = 0
    segments = (positions > a[:, None]) & mask
    return {"token_ids": tf.constant(ids), "segment_ids": tf.constant(segments, tf.int32),
            "padding_mask": tf.constant(mask, tf.int32),
            "masked_lm_positions": tf.zeros([B, predictions], tf.int32),
            "masked_lm_ids": tf.zeros([B, predictions], tf.int32),
            "masked_lm_weights": tf.zeros([B, predictions], tf.float32),
            "next_sentence_labels": tf.zeros([B], tf.int32)}


def rows_of(out):
    """[(row, position, label, new id)] of every prediction with weight 1."""
    w = out["masked_lm_weights"].numpy() > 0
    rows = np.broadcast_to(np.arange(w.shape[0])[:, None], w.shape)[w]
    positions = out["masked_lm_positions"].numpy()[w]
    return rows, positions, out["masked_lm_ids"].numpy()[w], \
        out["token_ids"].numpy()[rows, positions]


def words(ids, mask):
    """Per row, the words as lists of positions: a piece and the '##' pieces after it,
    never across [CLS]/[SEP]."""
    out = []
    for row, m in zip(ids, mask):
        found, current = [], None
        for p, (token, real) in enumerate(zip(row, m)):
            if not real or token in (CLS, SEP):
                current = None
                continue
            if current is not None and TOKENS[token].startswith("##"):
                current.append(p)
            else:
                current = [p]
                found.append(current)
        out.append(found)
    return out


@pytest.mark.parametrize("whole_word,ngram", [(False, 1), (True, 1), (True, 3)],
                         ids=["plain", "whole_word", "whole_word_3gram"])
def test_googles_rules_over_many_batches(whole_word, ngram):
    spec = MaskingSpec.from_vocab(TOKENS, P, whole_word=whole_word, max_ngram_size=ngram)
    step = tf.function(lambda batch, i: remask(batch, i, spec, seed=5))
    decisions, predicted, tokens = np.zeros(3), 0, 0
    for i in range(40):
        batch = synthetic_batch(i)
        out = step(batch, tf.constant(i, tf.int64))
        ids, mask = batch["token_ids"].numpy(), batch["padding_mask"].numpy().astype(bool)
        rows, positions, labels, new = rows_of(out)
        # Labels are the original tokens; never a special token or padding.
        np.testing.assert_array_equal(labels, ids[rows, positions])
        assert mask[rows, positions].all() and not np.isin(labels, [0, CLS, SEP]).any()
        # Unchosen positions keep their tokens; the counts follow google's formula.
        chosen = np.zeros_like(mask)
        chosen[rows, positions] = True
        np.testing.assert_array_equal(out["token_ids"].numpy()[~chosen], ids[~chosen])
        n = mask.sum(axis=1)
        k = np.minimum(P, np.maximum(1, np.rint(n * 0.15)))
        per_row = chosen.sum(axis=1)
        assert (per_row <= k).all()
        if not whole_word:
            np.testing.assert_array_equal(per_row, k)
        else:
            assert per_row.sum() >= 0.9 * k.sum()   # a word that would overshoot is skipped
            for r, row_words in enumerate(words(ids, mask)):
                for word in row_words:      # all of a word's pieces, or none
                    assert chosen[r, word].all() or not chosen[r, word].any(), (r, word)
        # Positions sorted, padded with position 0 and weight 0.
        w = out["masked_lm_weights"].numpy()
        pos = out["masked_lm_positions"].numpy()
        for r in range(B):
            real = pos[r][w[r] > 0]
            assert (np.diff(real) > 0).all() and (pos[r][w[r] == 0] == 0).all()
        decisions += [(new == MASK).sum(), (new == labels).sum(),
                      ((new != MASK) & (new != labels)).sum()]
        predicted += len(labels)
        tokens += n.sum()
    share = decisions / decisions.sum()
    assert abs(share[0] - 0.8) < 0.03 and abs(share[1] - 0.1) < 0.025 \
        and abs(share[2] - 0.1) < 0.025, share
    assert 0.13 < predicted / tokens < 0.16, predicted / tokens


def test_ngram_spans_stay_inside_a_segment():
    spec = MaskingSpec.from_vocab(TOKENS, P, max_ngram_size=3)
    for i in range(10):
        batch = synthetic_batch(100 + i)
        out = remask(batch, i, spec, seed=1)
        ids = batch["token_ids"].numpy()
        rows, positions, labels, _ = rows_of(out)
        assert not np.isin(labels, [0, CLS, SEP]).any()
        seg = batch["segment_ids"].numpy()
        # Consecutive chosen positions in a row never straddle the [SEP] between A and B.
        for r in np.unique(rows):
            p = positions[rows == r]
            for x, y in zip(p[:-1], p[1:]):
                if y == x + 1:
                    assert seg[r, x] == seg[r, y] and ids[r, x] != SEP


def test_masks_of_a_google_shard_are_undone_first():
    """A statically masked batch: unmasked_ids puts each label back, and remask draws from
    the original tokens, not from [MASK]s."""
    batch = synthetic_batch(7)
    spec = MaskingSpec.from_vocab(TOKENS, P)
    static = remask(batch, 0, spec, seed=99)          # stands for the shard's own masks
    np.testing.assert_array_equal(unmasked_ids(static).numpy(), batch["token_ids"].numpy())
    again = remask(static, 0, spec, seed=3)
    np.testing.assert_array_equal(unmasked_ids(again).numpy(), batch["token_ids"].numpy())


@pytest.fixture(scope="module")
def unmasked_shards(tmp_path_factory, minilm_dir, docstring_documents):
    """Shards of real English text (standard-library docstrings) without masks, and
    MiniLM's vocab."""
    root = tmp_path_factory.mktemp("unmasked")
    corpus = docstring_documents
    vocab = os.path.join(minilm_dir, "vocab.txt")
    out = str(root / "train.tfrecord")
    create_pretraining_data.main([
        f"--input_file={corpus}", f"--output_file={out}", f"--vocab_file={vocab}",
        "--max_seq_length=64", "--max_predictions_per_seq=10", "--masking=none",
        "--quiet", "--num_workers=1"])
    return out, vocab


def test_unmasked_shards_hold_no_predictions(unmasked_shards):
    path, _ = unmasked_shards
    ds = pretraining_dataset(path, 64, 64, 10, is_training=False)
    batches = list(ds)
    assert sum(int(b["padding_mask"].numpy().sum()) for b in batches) > 5000
    assert all(float(tf.reduce_sum(b["masked_lm_weights"])) == 0 for b in batches)
    assert not any(int(tf.reduce_sum(tf.cast(b["token_ids"] == MASK, tf.int32)))
                   for b in batches)


def test_masks_change_across_epochs_and_repeat_after_a_resume(unmasked_shards, tmp_path):
    path, vocab = unmasked_shards
    from bert_tf.text.text_rules import load_vocab
    spec = MaskingSpec.from_vocab(load_vocab(vocab), 10, whole_word=True)
    ds = pretraining_dataset(path, 16, 64, 10, is_training=True, seed=3, masking=spec,
                             shuffle_buffer=1)
    it = iter(ds)
    first = [next(it) for _ in range(4)]
    ckpt = tf.train.Checkpoint(iterator=it)
    saved = ckpt.write(str(tmp_path / "ckpt"))
    expected = [next(it) for _ in range(3)]
    # A fresh pipeline restored from the checkpoint: the same next batches, masks included.
    it2 = iter(pretraining_dataset(path, 16, 64, 10, is_training=True, seed=3,
                                   masking=spec, shuffle_buffer=1))
    tf.train.Checkpoint(iterator=it2).read(saved).assert_consumed()
    for want in expected:
        got = next(it2)
        for key in want:
            np.testing.assert_array_equal(got[key].numpy(), want[key].numpy(), err_msg=key)
    # The same examples seen in another epoch get other masks: find batch 0's first
    # example again later in the stream.
    target = unmasked_ids(first[0]).numpy()[0]
    for _ in range(200):
        batch = next(it)
        originals = unmasked_ids(batch).numpy()
        hit = np.nonzero((originals == target).all(axis=1))[0]
        if len(hit):
            row = hit[0]
            assert not np.array_equal(batch["masked_lm_positions"].numpy()[row],
                                      first[0]["masked_lm_positions"].numpy()[0])
            break
    else:
        pytest.fail("the first example did not come back within 200 batches")


def test_run_pretraining_dynamic_on_unmasked_shards(unmasked_shards, tmp_path, capsys):
    path, vocab = unmasked_shards
    base = [f"--input_file={path}", "--preset=tiny", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--do_train"]
    # Static masking reads the shards' masks: there are none, so it stops before any work,
    # named by the shards' summary, or without one by their first record.
    out = tmp_path / "static"
    with pytest.raises(SystemExit) as e:
        run_pretraining.main(base + [f"--output_dir={out}", "--num_train_steps=2",
                                     "--masking=static"])
    assert e.value.code == 1 and not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"error: --masking=static: the shards were made for "
                       f"--masking=dynamic ({path}'s summary); drop --masking to train for "
                       f"what they hold, or write the shards again with "
                       f"create_pretraining_data --masking=static")
    # Without --masking the summary's choice is taken, and it needs the vocabulary.
    with pytest.raises(SystemExit) as e:
        run_pretraining.main(base + [f"--output_dir={out}", "--num_train_steps=2"])
    assert e.value.code == 1 and not out.exists()
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: --masking=dynamic (the shards' --masking=none, {path}'s summary) needs "
        f"--vocab_file (the ids of [CLS], [SEP], [MASK] and, for whole words, which "
        f"tokens are '##' pieces)")
    bare = tmp_path / "bare"
    bare.mkdir()
    import shutil
    shutil.copy(path, bare / "shard.tfrecord")        # the shards alone: no summary
    with pytest.raises(SystemExit) as e:
        run_pretraining.main([f"--input_file={bare / 'shard.tfrecord'}"] + base[1:] +
                             [f"--output_dir={out}", "--num_train_steps=2"])
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {bare / 'shard.tfrecord'}: the record at byte 0 has no masked-LM "
        f"predictions (all masked_lm_weights are 0, as create_pretraining_data "
        f"--masking=none writes); pretrain from these shards with --masking=dynamic")
    with pytest.raises(SystemExit) as e:
        run_pretraining.main(base + [f"--output_dir={out}", "--masking=dynamic"])
    assert e.value.code == 2 and "--masking=dynamic needs --vocab_file" in \
        capsys.readouterr().err
    metrics = run_pretraining.main(base + [
        f"--output_dir={tmp_path / 'dynamic'}", "--masking=dynamic", f"--vocab_file={vocab}",
        "--do_whole_word_mask", "--num_train_steps=3", "--num_warmup_steps=1",
        "--train_batch_size=8", "--do_eval", "--max_eval_steps=2", "--eval_batch_size=8"])
    assert metrics["global_step"] == 3 and np.isfinite(metrics["masked_lm_loss"])
    assert metrics["masked_lm_loss"] > 5     # real predictions (10.3 = ln 30522 untrained)


def test_fit_loop_draws_masks_by_the_same_rules_with_numpy(unmasked_shards):
    """bert_tf.training.fit (the JAX/PyTorch loop, no TensorFlow): every batch masked
    anew by google's rules, the same batches again under the same seed."""
    from itertools import islice

    from bert_tf.training import fit
    from bert_tf.text.text_rules import load_vocab
    path, vocab = unmasked_shards
    spec = MaskingSpec.from_vocab(load_vocab(vocab), 10)
    batches = list(islice(fit.shard_batches(path, 16, 64, 10, seed=3, masking=spec), 30))
    masked = kept = total = 0
    for inputs, labels in batches:
        w = labels["masked_lm_weights"] > 0
        rows = np.broadcast_to(np.arange(16)[:, None], w.shape)[w]
        positions = inputs["masked_lm_positions"][w]
        assert not np.isin(labels["masked_lm_ids"][w], [0, spec.cls_id, spec.sep_id]).any()
        n = inputs["padding_mask"].sum(axis=1)
        np.testing.assert_array_equal(w.sum(axis=1),
                                      np.minimum(10, np.maximum(1, np.rint(n * 0.15))))
        new = inputs["token_ids"][rows, positions]
        masked += (new == spec.mask_id).sum()
        kept += (new == labels["masked_lm_ids"][w]).sum()
        total += w.sum()
    assert abs(masked / total - 0.8) < 0.04 and abs(kept / total - 0.1) < 0.03
    again = list(islice(fit.shard_batches(path, 16, 64, 10, seed=3, masking=spec), 30))
    for (a, la), (b, lb) in zip(batches, again):
        np.testing.assert_array_equal(a["token_ids"], b["token_ids"])
        np.testing.assert_array_equal(la["masked_lm_ids"], lb["masked_lm_ids"])


def full_sentences_batch(seed, rows=64, length=L):
    """(ids, candidate, n_tokens) of full-sentences rows (create_pretraining_data
    --next_sentence=none): [CLS], short documents with a [SEP] after each, padding."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((rows, length), np.int32)
    n_tokens = np.zeros(rows, np.int64)
    for r in range(rows):
        row = [CLS]
        while len(row) < length - 8:
            row += rng.integers(104, len(TOKENS), rng.integers(2, 7)).tolist() + [SEP]
        ids[r, :len(row)] = row
        n_tokens[r] = len(row)
    candidate = (np.arange(length)[None, :] < n_tokens[:, None]) & (ids != CLS) & (ids != SEP)
    return ids, candidate, n_tokens


def assert_groups_inside_documents(ids, chosen, group):
    spans = 0
    for r in range(len(ids)):
        for g in np.unique(group[r][chosen[r]]):
            p = np.flatnonzero(chosen[r] & (group[r] == g))
            assert not (ids[r, p.min():p.max() + 1] == SEP).any(), (r, p)
            spans += len(p) > 1
    assert spans > 100


@pytest.mark.parametrize("whole_word", [False, True], ids=["pieces", "whole_words"])
def test_ngram_spans_never_cross_a_document_end_of_full_sentences(whole_word):
    """Both maskers (offline NumPy and in-graph TF) end a span at every [SEP], not only
    at the first: a full-sentences example holds one [SEP] per document end."""
    from bert_tf.training import dynamic_masking
    from bert_tf.data import masking
    ids, candidate, n_tokens = full_sentences_batch(5)
    k = np.full(len(ids), 16)
    is_subword = np.array([t.startswith("##") for t in TOKENS])
    continues = is_subword[ids] if whole_word else None
    chosen, group = masking._choose_units(ids, candidate, k, np.random.default_rng(0),
                                          continues, 3)
    assert_groups_inside_documents(ids, chosen, group)
    spec = MaskingSpec.from_vocab(TOKENS, 16, whole_word=whole_word, max_ngram_size=3)
    chosen, group = dynamic_masking._choose_units(
        tf.constant(ids), tf.constant(candidate), tf.constant(k, tf.int32), spec,
        tf.constant([1, 2]), tf.constant([3, 4]),
        None if continues is None else tf.constant(continues))
    assert_groups_inside_documents(ids, chosen.numpy(), group.numpy())
