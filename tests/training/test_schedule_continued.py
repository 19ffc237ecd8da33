"""The two-phase recipe with a continued schedule (docs/pretraining_data.md, "Recipes"):
phase 1 stops early in a schedule (--num_schedule_steps), phase 2 starts from its
checkpoint at its last step (--start_step) and goes on with the same warm-up and decay, so
the two phases' learning rates are one schedule's. Also the flags' one-line errors."""

import json
import os

import numpy as np
import pytest

from bert_tf import run_pretraining
from bert_tf.checkpoints import dispatch as checkpoints
from bert_tf.training.optimization import WarmupLinearDecay
from tests.testing import write_pretraining_shards

TINY = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)


def logged(output_dir, key):
    with open(os.path.join(output_dir, "train_log.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return [row["step"] for row in rows], [row[key] for row in rows]


def test_phase_two_continues_phase_ones_schedule(tmp_path, capsys):
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY))
    phase1_shards = write_pretraining_shards(str(tmp_path / "p1"), num_files=1,
                                             examples_per_file=64, seq_length=32,
                                             predictions=5)
    phase2_shards = write_pretraining_shards(str(tmp_path / "p2"), num_files=1,
                                             examples_per_file=64, seq_length=64,
                                             predictions=10)
    common = [f"--bert_config_file={config}", "--do_train", "--train_batch_size=4",
              "--learning_rate=1e-3", "--num_warmup_steps=2", "--num_schedule_steps=8",
              "--strategy=one_device", "--save_checkpoints_steps=100"]
    run_pretraining.main(common + [
        f"--input_file={phase1_shards}", f"--output_dir={tmp_path / 'phase1'}",
        "--max_seq_length=32", "--max_predictions_per_seq=5", "--num_train_steps=6"])
    run_pretraining.main(common + [
        f"--input_file={phase2_shards}", f"--output_dir={tmp_path / 'phase2'}",
        "--max_seq_length=64", "--max_predictions_per_seq=10", "--num_train_steps=8",
        "--start_step=6", f"--init_checkpoint={tmp_path / 'phase1' / 'google'}"])
    out = capsys.readouterr().out
    assert "starting at step 6 of a 8-step schedule" in out
    steps1, rates1 = logged(tmp_path / "phase1", "learning_rate")
    steps2, rates2 = logged(tmp_path / "phase2", "learning_rate")
    assert steps1 == [1, 2, 3, 4, 5, 6] and steps2 == [7, 8]
    schedule = WarmupLinearDecay(1e-3, 8, 2)
    expected = [float(schedule(step)) for step in range(8)]
    np.testing.assert_allclose(rates1 + rates2, expected, rtol=1e-6)
    assert rates1[2] == pytest.approx(1e-3) and 0 < rates2[-1] < rates2[0] < rates1[-1]
    # Phase 2 started from phase 1's weights and wrote its own after two steps.
    phase1 = checkpoints.load_pretrainer(str(tmp_path / "phase1" / "google"))
    phase2 = checkpoints.load_pretrainer(str(tmp_path / "phase2" / "google"))
    moved = [np.abs(a - b).max() for a, b in zip(phase1.encoder.get_weights(),
                                                 phase2.encoder.get_weights())]
    assert 0 < max(moved) < 0.1


@pytest.mark.parametrize("flags,message", [
    (["--num_train_steps=10", "--num_schedule_steps=8"],
     "--num_train_steps (10) is past the schedule's end (--num_schedule_steps=8)"),
    (["--num_train_steps=8", "--start_step=8"],
     "--start_step (8) must be below --num_train_steps (8)"),
])
def test_schedule_flags_are_checked_in_one_line(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_pretraining.parse_args(["--input_file=x", "--output_dir=y", "--preset=tiny",
                                    "--do_train"] + flags)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
