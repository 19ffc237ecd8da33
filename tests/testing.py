"""Shared test helpers (in the spirit of keras-hub's run_backbone_test): one call checks a
model's config round trip, variable sequence lengths, mixed precision and save/load."""

import importlib
import importlib.util

import numpy as np
import keras


class LazyModule:
    """A module imported at its first attribute use (`lazy_module`)."""

    def __init__(self, name):
        self._lazy_name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._lazy_name), attr)


def lazy_module(name):
    """`name` (e.g. "torch"), imported when a test first uses it, not when its test file
    is collected: every run collects every file (the fast tier too), and torch with
    transformers takes ~1.5 s of each xdist worker's start. Skips the calling test file,
    as pytest.importorskip does, when `name` is not installed."""
    if importlib.util.find_spec(name.split(".")[0]) is None or \
            importlib.util.find_spec(name) is None:
        import pytest
        pytest.skip(f"could not import {name!r}: not installed", allow_module_level=True)
    return LazyModule(name)


def random_inputs(batch, seq, vocab_size, seed=0, pad_from=None):
    """Encoder inputs with the project's three names; rows after the first are padded from
    `pad_from` (default: half the sequence) so masks are exercised."""
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, vocab_size, size=(batch, seq)).astype("int32")
    segment_ids = np.zeros((batch, seq), "int32")
    segment_ids[:, seq // 2:] = 1
    padding_mask = np.ones((batch, seq), "int32")
    cut = seq // 2 if pad_from is None else pad_from
    padding_mask[1:, cut:] = 0
    token_ids = token_ids * padding_mask
    segment_ids = segment_ids * padding_mask
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def run_model_test(cls, init_kwargs, inputs, expected_output_shapes, tmp_path,
                   extra_inputs=None):
    """Checks: output shapes; get_config/from_config round trip with identical outputs;
    .keras save/load with identical outputs; mixed_bfloat16 and mixed_float16 compute
    dtypes with float32 variables.

    Returns (float32 outputs, {policy name: outputs under that policy}) for further checks.
    """
    model = cls(**init_kwargs)
    outputs = model(inputs)
    for name, shape in expected_output_shapes.items():
        assert tuple(outputs[name].shape) == tuple(shape), (name, outputs[name].shape)

    # Config round trip: same architecture; with the same weights, same outputs.
    config = model.get_config()
    clone = cls.from_config(config)
    assert clone.get_config() == config
    clone.set_weights(model.get_weights())
    for name in expected_output_shapes:
        np.testing.assert_allclose(np.asarray(clone(inputs)[name]),
                                   np.asarray(outputs[name]), atol=1e-6)

    # .keras file round trip.
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, cls)
    for name in expected_output_shapes:
        np.testing.assert_allclose(np.asarray(loaded(inputs)[name]),
                                   np.asarray(outputs[name]), atol=1e-6)

    # Mixed precision: compute in the low dtype, keep float32 variables.
    low_precision = {}
    for policy in ("mixed_bfloat16", "mixed_float16"):
        low = cls(**init_kwargs, dtype=policy)
        low.set_weights(model.get_weights())
        assert all(v.dtype == "float32" for v in low.weights), policy
        low_precision[policy] = low(inputs)
        for name in expected_output_shapes:
            value = np.asarray(keras.ops.cast(low_precision[policy][name], "float32"))
            assert np.all(np.isfinite(value)), (policy, name)
    return outputs, low_precision


def write_pretraining_shards(directory, num_files=2, examples_per_file=64, seq_length=32,
                             predictions=5, vocab_size=100, seed=0):
    """Writes google-format pretraining shards with a learnable pattern: segment B repeats
    segment A for "is next" examples, so both heads can be fit. Returns the glob."""
    import os
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))

    for f in range(num_files):
        with tf.io.TFRecordWriter(os.path.join(directory, f"shard_{f}.tfrecord")) as w:
            for _ in range(examples_per_file):
                n = int(rng.integers(seq_length // 2, seq_length + 1))
                half = (n - 3) // 2
                a = rng.integers(5, vocab_size, half)
                random_next = int(rng.integers(0, 2))
                b = rng.integers(5, vocab_size, half) if random_next else a.copy()
                tokens = np.concatenate([[2], a, [3], b, [3]]).astype(int)
                segments = [0] * (half + 2) + [1] * (half + 1)
                positions = np.sort(rng.choice(np.arange(half + 2, 2 * half + 2),
                                               predictions, replace=False))
                labels = tokens[positions]
                tokens[positions] = 4  # [MASK]
                pad = seq_length - len(tokens)
                feature = {
                    "input_ids": ints(list(tokens) + [0] * pad),
                    "input_mask": ints([1] * len(tokens) + [0] * pad),
                    "segment_ids": ints(segments + [0] * pad),
                    "masked_lm_positions": ints(positions),
                    "masked_lm_ids": ints(labels),
                    "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(
                        value=[1.0] * predictions)),
                    "next_sentence_labels": ints([random_next]),
                }
                w.write(tf.train.Example(features=tf.train.Features(
                    feature=feature)).SerializeToString())
    return os.path.join(directory, "*.tfrecord")


def tree_hash(root):
    """{relative path: (mode, sha256 of the bytes)} of every file and folder under `root`
    (folders as (mode, None)), for "a refused command leaves every file as it found it":
    two calls are equal exactly when nothing was added, removed, changed or re-permissioned."""
    import hashlib
    import os
    import stat
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            digest = None
            if stat.S_ISREG(info.st_mode):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            found[os.path.relpath(path, root)] = (stat.S_IMODE(info.st_mode), digest)
    return found


def command_main(module):
    """The `main` that `python -m module` runs: the module's, or its package's __main__'s."""
    import importlib
    found = importlib.import_module(module)
    if hasattr(found, "__path__"):
        found = importlib.import_module(module + ".__main__")
    return found.main


def run_command(module, argv, capsys):
    """(exit status, stderr lines) of `python -m module argv`, in this process."""
    main = command_main(module)
    capsys.readouterr()
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err.strip().splitlines()


def refused(main, argv, capsys, expect, *trees):
    """Runs a command's `main(argv)` in-process: exit status 1, one `error:` line holding
    each text of `expect`, and every folder of `trees` byte-identical afterwards (folders
    that do not exist stay missing). Returns the line."""
    import os

    import pytest
    before = [tree_hash(t) if os.path.exists(t) else None for t in trees]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert exit_info.value.code == 1, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for text in expect:
        assert text in lines[0], lines[0]
    assert [tree_hash(t) if os.path.exists(t) else None for t in trees] == before
    return lines[0]


# Run by `refusals_before_tensorflow` in a new process: each argv through the command's
# main, its exit status and stderr, and whether TensorFlow was imported by then.
_REFUSALS_CHILD = """
import contextlib, importlib, io, json, sys
main = importlib.import_module(sys.argv[1])
if hasattr(main, "__path__"):
    main = importlib.import_module(sys.argv[1] + ".__main__")
main = main.main
results = []
for argv in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = e.code
    results.append([code, err.getvalue(), "tensorflow" in sys.modules])
print(json.dumps(results))
"""


def refusals_before_tensorflow(module, cases, *trees):
    """Runs `python -m module` on each (argv, expected text) of `cases` in one new
    process, in turn: each exits with status 1 and one `error:` line holding its text,
    before TensorFlow is imported (`tensorflow` not in the process's sys.modules after
    it: a check that needs only the flags and files waits for no model), and every
    folder of `trees` is byte-identical afterwards (tree_hash)."""
    import json
    import os
    import subprocess
    import sys
    before = [tree_hash(t) for t in trees]
    process = subprocess.run(
        [sys.executable, "-c", _REFUSALS_CHILD, module, json.dumps([a for a, _ in cases])],
        capture_output=True, text=True, timeout=300,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert process.returncode == 0, process.stderr[-3000:]
    results = json.loads(process.stdout.strip().splitlines()[-1])
    for (argv, text), (code, err, tensorflow) in zip(cases, results):
        lines = err.strip().splitlines()
        assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), (argv, err)
        assert text in lines[0], (argv, lines[0])
        assert not tensorflow, (argv, "TensorFlow was imported before the refusal")
    assert [tree_hash(t) for t in trees] == before
