"""The GPU kit's arithmetic (bench/gpu/): the model-FLOP count behind MFU, the parity
comparison and the summary's ratios. The kit itself runs in CI in its CPU mode (.ci/run)."""

import json
import os
import sys

import numpy as np
import pytest

from tests import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
import cases  # noqa: E402
import kit  # noqa: E402


@pytest.mark.parametrize("model", ["tiny", "minilm"])
def test_dense_parameters_are_hf_bert_weight_matrices(model):
    """cases.dense_params counts what HF's BertForPreTraining holds in weight matrices,
    less the embedding tables (lookups) and the 2-way next-sentence layer."""
    torch = pytest.importorskip("torch")
    import transformers
    torch.manual_seed(0)
    hf = transformers.BertForPreTraining(transformers.BertConfig(**cases.config_dict(model)))
    matrices = sum(p.numel() for name, p in hf.named_parameters()
                   if p.dim() == 2 and "embeddings" not in name)
    hidden = cases.MODELS[model][1]
    assert cases.dense_params(model, pretraining=True) + 2 * hidden == matrices
    assert cases.dense_params(model, pretraining=False) == matrices - 2 * hidden - hidden ** 2


def test_bert_base_pretraining_step_flops():
    # 6 * 86,114,304 * 65,536 + 12 * 12 * 768 * 512 * 65,536 + 6 * 768 * 30,522 * 128 * 76
    assert cases.train_flops("base", 128, 512, 76) == 38_940_572_123_136
    assert cases.train_flops("base", 32, 128) == 6 * 85_524_480 * 4096 + 12 * 12 * 768 * 128 * 4096


def test_parity_is_the_worst_relative_difference(tmp_path):
    hf = {"mlm_float32": np.array([[4.0, -2.0]]), "nsp_float32": np.array([[1.0, 0.5]]),
          "mlm_mixed_bfloat16": np.array([[4.0, -2.0]]),
          "nsp_mixed_bfloat16": np.array([[1.0, 0.5]])}
    ours = dict(hf, mlm_float32=np.array([[4.0, -2.004]]),
                nsp_mixed_bfloat16=np.array([[1.0, 0.45]]))
    np.savez(tmp_path / "parity_hf.npz", **hf)
    np.savez(tmp_path / "parity_bert_tf.npz", **ours)
    found = kit.compare_parity(str(tmp_path))
    assert found["float32"] == pytest.approx(0.004 / 4.0)
    assert found["mixed_bfloat16"] == pytest.approx(0.05 / 1.0)


def test_summary_ratio_and_mfu():
    rows = [{"group": "env", "side": "hf", "device": "NVIDIA H100 80GB HBM3", "torch": "2"},
            {"group": "pretrain", "side": "bert_tf", "model": "base", "seq": 512,
             "batch": 64, "step_s": 0.1, "flops": 1.978e13},
            {"group": "pretrain", "side": "hf", "model": "base", "seq": 512, "batch": 128,
             "step_s": 0.5, "flops": 3.956e13},
            {"group": "pretrain", "side": "hf", "model": "base", "seq": 128, "batch": 512,
             "out_of_memory": True},
            {"group": "inference", "side": "bert_tf", "model": "base", "batch": 1,
             "texts": 100, "seconds": 0.5, "jit_seconds": 0.4, "jit_max_diff": 0.0},
            {"group": "inference", "side": "hf", "model": "base", "batch": 1, "texts": 100,
             "seconds": 1.0}]
    summary = kit.summarise(rows, {"float32": 1e-6}, "gpu", 500)
    pretrain, inference = summary["table"]
    assert pretrain["bert_tf"]["rate"] == pytest.approx(64 * 512 / 0.1)
    assert pretrain["ratio"] == pytest.approx((64 * 512 / 0.1) / (128 * 512 / 0.5))
    assert pretrain["bert_tf"]["mfu"] == pytest.approx(1.978e13 / 0.1 / 989e12)
    assert inference["ratio"] == pytest.approx(2.0)
    assert summary["notes"] == [
        "hf pretrain base seq 128: batch 512 did not fit",
        "inference, base batch 1: predict_on_batch 200 texts/s, one jitted stateless call "
        "250 texts/s (logits within 0.0e+00)"]
    text = kit.markdown(summary)
    assert "| pretrain | base | 512 | 64 / 128 |" in text and "**2.50x**" in text
    json.dumps(summary)


def test_hf_writes_the_checkpoint_before_bert_tf_reads_it():
    for mode in ("gpu", "cpu"):
        steps = kit.schedule(mode)
        first = [side for side, _, groups in steps if "parity" in groups]
        assert first == ["hf", "bert_tf"]
        assert not any(side == "hf" and "probe" in groups for side, _, groups in steps)


def write_calls(tmp_path, calls, first_parity=None):
    """Each call's rows written as kit.py writes them (results.jsonl and the results.json
    summary, the first call's with `first_parity`); returns the results.json paths."""
    paths = []
    for i, (name, rows) in enumerate(calls.items()):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows))
        summary = kit.summarise(rows, first_parity if i == 0 else None, "gpu", 500)
        (tmp_path / name / "results.json").write_text(json.dumps(summary))
        paths.append(str(tmp_path / name / "results.json"))
    return paths


def test_a_follow_up_call_fills_in_what_the_first_skipped(tmp_path):
    env = {"group": "env", "side": "hf", "device": "NVIDIA H100 80GB HBM3"}
    ours = {"group": "finetune", "side": "bert_tf", "model": "base", "seq": 128, "batch": 32,
            "step_s": 0.01, "flops": 2.16e12}
    calls = {"first": [env, ours, {"group": "finetune", "side": "hf", "model": "base",
                                   "seq": 128, "skipped": "time"}],
             "second": [{"group": "finetune", "side": "hf", "model": "base", "seq": 128,
                         "batch": 32, "step_s": 0.03, "flops": 2.16e12}]}
    paths = write_calls(tmp_path, calls, first_parity={"float32": 1e-6})
    merged = kit.merge(paths)
    (row,) = merged["table"]
    assert row["ratio"] == pytest.approx(3.0)
    assert merged["parity"] == {"float32": 1e-6} and merged["calls"] == 2
    assert merged["notes"] == []  # the first call's "skipped (time)" was filled in
    assert merged["device"] == "NVIDIA H100 80GB HBM3"
    assert kit.merge(paths[:1])["table"][0]["ratio"] is None


def test_a_row_measured_in_both_calls_keeps_the_faster_figure(tmp_path):
    def hf(step_s):
        return {"group": "finetune", "side": "hf", "model": "base", "seq": 128, "batch": 32,
                "step_s": step_s, "flops": 2.16e12}
    ours = {"group": "finetune", "side": "bert_tf", "model": "base", "seq": 128, "batch": 32,
            "step_s": 0.01, "flops": 2.16e12}
    paths = write_calls(tmp_path, {"first": [ours, hf(0.02)], "second": [hf(0.03)],
                                   "third": [hf(0.025)]})
    for order in (paths, paths[::-1]):
        (row,) = kit.merge(order)["table"]
        assert row["ratio"] == pytest.approx(2.0)


def test_only_names_side_group_pairs(tmp_path):
    import subprocess
    result = subprocess.run([sys.executable, kit.__file__, "--only", "hf:probe,bert_tf:bogus",
                             "--out", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 2
    assert "--only: bert_tf:bogus,hf:probe are not side:group pairs" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_probe_variants_are_kept_apart_and_a_failed_one_is_said(tmp_path):
    env = {"group": "env", "side": "bert_tf", "device": "NVIDIA H200"}

    def probe(variant, **measured):
        return {"group": "probe", "side": "bert_tf", "model": "base", "seq": 512,
                "batch": 32, "variant": variant, "flops": 9.335e12, **measured}
    calls = {"first": [env, probe("as bert_tf runs", step_s=0.0418, fusions=767,
                                  custom_calls=169)],
             "second": [probe("as bert_tf runs", step_s=0.0416, fusions=811, custom_calls=125),
                        probe("no attention dropout", step_s=0.0366, fusions=740,
                              custom_calls=147),
                        probe("fused attention, no attention dropout", error="XlaRuntimeError: x")]}
    notes = kit.merge(write_calls(tmp_path, calls))["notes"]
    assert notes == [
        "probe, base batch 32 seq 512, as bert_tf runs: jitted forward + backward alone "
        "41.6 ms, MFU 23% (811 fusions, 125 custom calls)",
        "probe, base batch 32 seq 512, no attention dropout: jitted forward + backward alone "
        "36.6 ms, MFU 26% (740 fusions, 147 custom calls)",
        "probe, base batch 32 seq 512, fused attention, no attention dropout: failed "
        "(XlaRuntimeError: x)"]


def test_fused_rows_compare_with_hfs_row_and_the_learning_check_is_said():
    """A fused-attention row sits under its plain row and divides by the same HF figure;
    the learning check's runs become one line per attention implementation."""
    def pretrain(side, step_s, **extra):
        return {"group": "pretrain", "side": side, "model": "base", "seq": 512, "batch": 128,
                "step_s": step_s, "flops": 3.9e13, **extra}

    def learning(attention, seed, loss, accuracy):
        return {"group": "learning", "side": "bert_tf", "model": "minilm", "seq": 128,
                "batch": 32, "steps": 300, "attention": attention, "seed": seed,
                "chunk_losses": [9.0, loss], "held_out_loss": loss + 1,
                "held_out_accuracy": accuracy, "seconds": 3.0}
    rows = [pretrain("bert_tf", 0.20), pretrain("bert_tf", 0.15, attention="fused"),
            pretrain("hf", 0.15), learning("plain", 2, 6.5, 0.25),
            learning("plain", 1, 6.25, 0.5), learning("fused", 1, 6.0, 0.75)]
    summary = kit.summarise(rows, None, "gpu", 500)
    plain, fused = summary["table"]
    assert (plain["attention"], fused["attention"]) == ("plain", "fused")
    assert plain["ratio"] == pytest.approx(0.75) and fused["ratio"] == pytest.approx(1.0)
    assert summary["notes"] == [
        "learning, plain attention: minilm pretrained 300 steps (seq 128, batch 32), seeds "
        "1, 2: last steps' loss 6.250, 6.500 (mean 6.375); held-out masked-LM loss 7.250, "
        "7.500, accuracy 50.0%, 25.0% (mean 37.5%)",
        "learning, fused attention: minilm pretrained 300 steps (seq 128, batch 32), seeds "
        "1: last steps' loss 6.000 (mean 6.000); held-out masked-LM loss 7.000, accuracy "
        "75.0% (mean 75.0%)"]
    assert "| pretrain, fused attention | base | 512 | 128 / 128 |" in kit.markdown(summary)


def test_masked_text_batches_mask_real_pieces_as_google_does():
    texts = [[101] + list(range(2000 + 10 * i, 2010 + 10 * i)) + [102] for i in range(40)]
    train, held = cases.masked_text_batches(texts, seq=32, batch=4, predictions=6, steps=50,
                                            held_out=2, seed=3)
    assert len(train) == 50 and len(held) == 1 and held[0][0]["token_ids"].shape == (2, 32)
    pieces = set(range(2000, 2400))
    for x, y in train:
        ids = x["token_ids"]
        assert ids.shape == (4, 32) and np.all(ids[:, 0] == 101) and np.all(ids[:, -1] == 102)
        assert set(y["masked_lm_ids"].ravel()) <= pieces
        at = np.take_along_axis(ids, x["masked_lm_positions"], axis=1)
        assert np.all((at == 103) | (at >= 1000))
    # 80% [MASK], 10% random, 10% kept, over the 50 batches' 1200 predictions.
    at = np.concatenate([np.take_along_axis(x["token_ids"], x["masked_lm_positions"], 1).ravel()
                         for x, _ in train])
    labels = np.concatenate([y["masked_lm_ids"].ravel() for _, y in train])
    assert 0.75 < np.mean(at == 103) < 0.85 and 0.06 < np.mean(at == labels) < 0.14
    # The held-out rows are the last pieces, never drawn for training.
    held_pieces = set(held[0][1]["masked_lm_ids"].ravel())
    assert all(not (set(y["masked_lm_ids"].ravel()) & held_pieces) for _, y in train)


def test_the_large_learning_check_is_said_apart_with_its_set():
    """learning_large rows become their own lines, saying the set's size; the short-text
    check's lines stay as they were."""
    def learning(group, attention, seed, loss):
        extra = {"train_sequences": 4219, "held_out_sequences": 256} \
            if group == "learning_large" else {}
        return {"group": group, "side": "bert_tf", "model": "minilm", "seq": 128,
                "batch": 64, "steps": 600, "attention": attention, "seed": seed,
                "chunk_losses": [9.0, loss], "held_out_loss": loss + 1,
                "held_out_accuracy": 0.5, "seconds": 3.0, **extra}
    rows = [learning("learning", "plain", 1, 6.0), learning("learning_large", "plain", 1, 5.0),
            learning("learning_large", "fused", 1, 5.5)]
    notes = kit.summarise(rows, None, "gpu", 500)["notes"]
    assert notes == [
        "learning, plain attention: minilm pretrained 600 steps (seq 128, batch 64), seeds "
        "1: last steps' loss 6.000 (mean 6.000); held-out masked-LM loss 7.000, accuracy "
        "50.0% (mean 50.0%)",
        "learning, plain attention: minilm pretrained 600 steps (seq 128, batch 64) on the "
        "large set (4,219 sequences, 256 held out), seeds 1: last steps' loss 5.000 (mean "
        "5.000); held-out masked-LM loss 6.000, accuracy 50.0% (mean 50.0%)",
        "learning, fused attention: minilm pretrained 600 steps (seq 128, batch 64) on the "
        "large set (4,219 sequences, 256 held out), seeds 1: last steps' loss 5.500 (mean "
        "5.500); held-out masked-LM loss 6.500, accuracy 50.0% (mean 50.0%)"]


def test_held_out_rows_come_in_batches_and_packed_rows_counts_them():
    texts = [[101] + list(range(2000 + 10 * i, 2010 + 10 * i)) + [102] for i in range(40)]
    assert cases.packed_rows(texts, 32) == 400 // 30
    train, held = cases.masked_text_batches(texts, seq=32, batch=4, predictions=6, steps=3,
                                            held_out=10, seed=3)
    assert [x["token_ids"].shape[0] for x, _ in held] == [4, 4, 2]
    held_pieces = set(np.concatenate([y["masked_lm_ids"].ravel() for _, y in held]))
    assert all(not (set(y["masked_lm_ids"].ravel()) & held_pieces) for _, y in train)


def test_the_corpus_is_every_docstring_tokenized(tmp_path):
    import json
    vocab = kit.default_vocab()
    path = tmp_path / "corpus.json"
    cases.write_corpus_texts(vocab, str(path), max_documents=30)
    documents = json.loads(path.read_text())
    words = [line.rstrip("\n") for line in open(vocab, encoding="utf-8")]
    assert len(documents) == 30
    assert all(d[0] == words.index("[CLS]") and d[-1] == words.index("[SEP]") for d in documents)
    assert sum(len(d) - 2 for d in documents) > 30 * 20  # whole docstrings, not first lines
    assert all(0 < i < len(words) for d in documents for i in d)
