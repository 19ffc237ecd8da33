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

from bert_tf import BertConfig, BertPretrainer, checkpoints, create_pretraining_data, \
    run_pretraining
from bert_tf.pretraining_losses import local_sums, metrics_from_sums


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
    metrics = run_pretraining.main(base + [
        "--next_sentence=none", "--do_train", "--num_train_steps=3", "--num_warmup_steps=1",
        "--train_batch_size=8", "--do_eval", "--max_eval_steps=2", "--eval_batch_size=8"])
    assert metrics["global_step"] == 3 and metrics["masked_lm_loss"] > 5
    assert not any(k.startswith("next_sentence") for k in metrics)
    with open(out / "train_log.jsonl", encoding="utf-8") as f:
        steps = [json.loads(line) for line in f]
    assert len(steps) == 3 and all(s["loss"] == s["masked_lm_loss"] for s in steps)
    with open(out / "hf" / "config.json", encoding="utf-8") as f:
        assert json.load(f)["architectures"] == ["BertForMaskedLM"]
    assert checkpoints.load_pretrainer(str(out / "google"), next_sentence=False).nsp_head \
        is None
    # The same folder with the next-sentence head: refused in one line, nothing touched.
    before = _digests(out)
    with pytest.raises(SystemExit) as e:
        run_pretraining.main(base + ["--next_sentence=nsp", "--do_train",
                                     "--num_train_steps=3", "--num_warmup_steps=1",
                                     "--train_batch_size=8"])
    assert e.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "--next_sentence: 'none' there, 'nsp' now" in err
    assert _digests(out) == before
