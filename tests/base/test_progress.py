"""Progress lines when stdout is not a terminal (bert_tf/base/progress.py, tasks/driver.fit)."""

import io
import re
import subprocess
import sys

import numpy as np

from bert_tf.base.progress import LineProgress, progress_bar


def test_a_line_every_5_percent_and_at_the_end():
    out = io.StringIO()
    bar = LineProgress(200, "pretraining", unit="step", min_seconds=0, stream=out)
    for i in range(200):
        bar.set_postfix(loss=f"{1 / (i + 1):.3f}")
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    # The first step, then every 10 steps (5% of 200), the last one once.
    assert [int(re.match(r"pretraining: (\d+)/200 step", l).group(1)) for l in lines] == \
        [1] + list(range(11, 201, 10)) + [200]
    assert lines[-1].startswith("pretraining: 200/200 step (100%), ")
    assert "ETA" in lines[1] and "ETA" not in lines[-1]
    assert lines[-1].endswith("loss=0.005")


def test_min_seconds_limits_the_lines_and_resume_counts_from_initial():
    out = io.StringIO()
    bar = LineProgress(1000, "training", unit="step", initial=500, min_seconds=3600,
                       stream=out)
    for _ in range(500):
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert [l.split(" step")[0] for l in lines] == ["training: 501/1,000",
                                                    "training: 1,000/1,000"]


def test_bytes_are_scaled():
    bar = LineProgress(5_000_000, "counting words", unit="B", unit_scale=True,
                       stream=io.StringIO())
    bar.n = 2_500_000
    assert bar.line().startswith("counting words: 2.5M/5.0M B (50%), ")


def test_not_a_terminal_gives_lines():
    # Under pytest stdout is captured, so not a terminal.
    assert isinstance(progress_bar(10, "x"), LineProgress)
    assert not isinstance(progress_bar(10, "x", disable=True), LineProgress)


def test_fit_prints_step_lines_with_loss_and_examples_per_second(capsys):
    import keras

    from bert_tf.base.progress import step_lines
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((64, 4), "float32"), np.zeros((64, 1), "float32")
    callback = step_lines(total_steps=8, batch_size=8)
    callback.progress.min_seconds = 0
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[callback])
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("training:")]
    assert [l.split(" step")[0] for l in lines] == [f"training: {n}/8" for n in range(1, 9)]
    loss, rate = re.search(r"loss=([\d.]+), examples_per_s=([\d.]+)", lines[-1]).groups()
    assert float(rate) > 0
    assert abs(float(loss) - float(model.evaluate(x, y, verbose=0))) < 1.0


def test_a_command_writing_to_a_file_prints_lines_not_a_bar(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat.\n" * 2000)
    result = subprocess.run(
        [sys.executable, "-m", "bert_tf.build_vocab", f"--input_file={corpus}",
         f"--output_file={tmp_path / 'vocab.txt'}", "--vocab_size=200"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stdout + result.stderr
    assert re.search(r"^counting words: .*\(100%\)", result.stdout, re.M), result.stdout
