"""Importing bert_tf quiets TensorFlow's C++ start-up lines unless the user asked for them
(bert_tf/base/tf_logs.py)."""

import os
import subprocess
import sys

from tests import ROOT

# The int64 Transpose in a graph: under oneDNN's kernels its first run logs a
# once-per-process DT_INT64 notice at ERROR level (a training step has one).
SCRIPT = ("import bert_tf, tensorflow as tf, tensorflow_text; "
          "tf.function(lambda x: tf.transpose(x) * 2)(tf.ones([3, 4], tf.int64)); "
          "print(int(tf.constant(1) + 1), tf.config.list_physical_devices('CPU')[0].name)")


def run(env_level):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if env_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = env_level
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300)


def test_quiet_by_default_and_tensorflow_still_works():
    result = run(None)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2 /physical_device:CPU:0"
    assert result.stderr == ""


def test_the_users_level_is_kept():
    result = run("0")
    assert result.returncode == 0, result.stderr
    # TensorFlow's own start-up notice, which the quiet default hides.
    assert "absl::InitializeLog()" in result.stderr


def test_start_up_lines_are_hidden_at_every_other_level():
    """The start-up lines ignore TF_CPP_MIN_LOG_LEVEL (absl's pre-init warning, oneDNN's
    notice): a user who set 1 or 3 to see less sees none of them either."""
    for level in ("1", "3"):
        result = run(level)
        assert result.returncode == 0 and result.stderr == "", (level, result.stderr)


def test_an_import_error_still_shows():
    result = subprocess.run([sys.executable, "-c", "import bert_tf, tensorflow; "
                             "import tensorflow.no_such_module"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "ModuleNotFoundError: No module named 'tensorflow.no_such_module'" in result.stderr


def test_a_split_cpu_still_works_when_quieted(tmp_path):
    """--cpu_devices N splits the CPU into logical devices, which TensorFlow refuses once
    an op has run: the quiet import then leaves its one op until the devices are set
    (a shell without TF_CPP_MIN_LOG_LEVEL, as users run the commands)."""
    from tests.testing import write_pretraining_shards
    shards = write_pretraining_shards(str(tmp_path / "shards"), num_files=1,
                                      examples_per_file=16, seq_length=16, predictions=2)
    config = tmp_path / "config.json"
    config.write_text('{"vocab_size": 100, "hidden_size": 16, "num_hidden_layers": 1, '
                      '"num_attention_heads": 2, "intermediate_size": 32}')
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-m", "bert_tf.run_pretraining", f"--input_file={shards}",
         f"--output_dir={tmp_path / 'run'}", f"--bert_config_file={config}", "--do_train",
         "--max_seq_length=16", "--max_predictions_per_seq=2", "--train_batch_size=4",
         "--num_train_steps=1", "--num_warmup_steps=0", "--strategy=mirrored",
         "--cpu_devices=2"], capture_output=True, text=True, env=env, timeout=300,
        cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "strategy: MirroredStrategy with 2 replica(s)" in result.stdout
    assert "DT_INT64" not in result.stderr
