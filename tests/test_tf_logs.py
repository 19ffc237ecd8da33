"""Importing bert_tf quiets TensorFlow's C++ start-up lines unless the user asked for them
(bert_tf/tf_logs.py)."""

import os
import subprocess
import sys

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


def test_an_import_error_still_shows():
    result = subprocess.run([sys.executable, "-c", "import bert_tf, tensorflow; "
                             "import tensorflow.no_such_module"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "ModuleNotFoundError: No module named 'tensorflow.no_such_module'" in result.stderr
