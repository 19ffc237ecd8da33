"""Shared test helpers (in the spirit of keras-hub's run_backbone_test): one call checks a
model's config round trip, variable sequence lengths, mixed precision and save/load; the
commands run in-process and their refusals; and the helpers several test files use (no
test file imports another: tests/test_layout.py)."""

import importlib
import importlib.util
import json
import os
import signal
import socket

import numpy as np
import keras

from tests import TESTS, command_main


class LazyModule:
    """A module imported at its first use of a public attribute (`lazy_module`). A name
    with a leading underscore is not looked up: pytest probes every object of a test
    file while collecting it (`__wrapped__`, `_mock_name`: its check for wrapped fixtures),
    and those probes must not import the module."""

    def __init__(self, name):
        self._lazy_name = name

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
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
import contextlib, io, json, sys
from tests import command_main
main = command_main(sys.argv[1])
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


# ------------------------------------------------------ used by several test files

# A tiny two-class sentiment set: one sentiment word among filler words (tests/test_api.py,
# tests/tasks/test_driver.py).
WORDS = ["good", "great", "wonderful", "bad", "awful", "terrible", "the", "film", "was",
         "plot", "music", "today"]
POSITIVE, NEGATIVE = WORDS[:3], WORDS[3:6]


def texts_and_labels(n, seed):
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for i in range(n):
        label = i % 2
        word = rng.choice(POSITIVE if label else NEGATIVE)
        filler = " ".join(rng.choice(WORDS[6:], rng.integers(1, 5)))
        texts.append(f"{filler} {word} {filler}" if i % 3 else f"{word} {filler}")
        labels.append(label)
    return texts, np.array(labels, np.int32)


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f)
    return str(path)


def tiny_config(tmp_path, minilm_dir, layers=2):
    """A small random-init BERT over MiniLM's vocabulary: fast runs of the whole CLI."""
    path = tmp_path / "tiny_config.json"
    write_json(path, {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": layers,
                      "num_attention_heads": 2, "intermediate_size": 64,
                      "max_position_embeddings": 128, "type_vocab_size": 2})
    return str(path)


def fine_tune_minilm_and_random(minilm_dir, build_model, compile_model, train_ds, num_examples,
                                score, learning_rate, batch_size=8, seed=1, epochs=1):
    """Fine-tunes one task model twice with the same data, steps, optimizer and seed: from
    the real MiniLM weights and from random initialisation. Returns (minilm, random)
    scores.

    One Keras model serves both runs (weights and optimizer state are reset in between),
    so its train and predict functions are traced once: tracing the 6-layer encoder's
    train step costs more than its training here.

    build_model(encoder) -> task model; compile_model(model, optimizer); train_ds: a
    repeated tf.data set of batches; score(model) -> metrics dict.
    """
    import argparse

    import keras
    from bert_tf.checkpoints.dispatch import load_encoder
    from bert_tf.base.config import BertConfig
    from bert_tf.models.encoder import BertEncoder
    from tasks import driver
    keras.utils.set_random_seed(seed)
    config = BertConfig.from_json_file(os.path.join(minilm_dir, "config.json"))
    random_weights = build_model(BertEncoder.from_config_object(config)).get_weights()
    model = build_model(load_encoder(str(minilm_dir)))
    minilm_weights = model.get_weights()
    args = argparse.Namespace(train_batch_size=batch_size, num_train_epochs=float(epochs),
                              warmup_proportion=0.1, learning_rate=learning_rate,
                              weight_decay=0.01)
    optimizer, num_steps = driver.create_optimizer(args, num_examples,
                                                   model.trainable_variables)
    compile_model(model, optimizer)
    scores = []
    for weights in (minilm_weights, random_weights):
        model.set_weights(weights)
        # Fresh optimizer state: step 0 (warmup again) and zero moments.
        for variable in model.optimizer.variables:
            variable.assign(np.zeros(variable.shape, variable.dtype))
        keras.utils.set_random_seed(seed)
        model.fit(train_ds, epochs=1, steps_per_epoch=num_steps, verbose=0, shuffle=False)
        scores.append(score(model))
    keras.backend.clear_session()
    return scores


def reference_pack(tokenizer, a, b, seq_length):
    """google's run_classifier.convert_single_example on word-piece ids."""
    from bert_tf.text.packing import truncate_seq_pair
    ids_a = tokenizer.encode([a])[0]
    ids_b = tokenizer.encode([b])[0] if b is not None else []
    if ids_b:
        truncate_seq_pair(ids_a, ids_b, seq_length - 3)
    else:
        ids_a = ids_a[:seq_length - 2]
    tokens = [tokenizer.cls_id] + ids_a + [tokenizer.sep_id]
    segments = [0] * len(tokens)
    if ids_b:
        tokens += ids_b + [tokenizer.sep_id]
        segments += [1] * (len(ids_b) + 1)
    pad = seq_length - len(tokens)
    return tokens + [0] * pad, segments + [0] * pad, [1] * (seq_length - pad) + [0] * pad


def tiny_encoder(dtype=None):
    """A one-layer BertEncoder over 64 ids (H=16): a task model's shapes and heads, fast."""
    from bert_tf.base.config import BertConfig
    from bert_tf.models.encoder import BertEncoder
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=32)
    return BertEncoder.from_config_object(config, dtype=dtype)


def free_ports(n):
    """`n` TCP ports free on 127.0.0.1 now (for a multi-worker cluster's addresses)."""
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def interrupt_at(monkeypatch, step):
    """SIGTERM arrives in this process during training step `step`: the run saves its
    state after that step and stops with its one line (tasks/resume.py)."""
    from tasks.resume import ResumeCallback
    end_step = ResumeCallback.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        if self.step + 1 == step:
            os.kill(os.getpid(), signal.SIGTERM)
        end_step(self, batch, logs)
    monkeypatch.setattr(ResumeCallback, "on_train_batch_end", on_train_batch_end)


def torch_inputs(inputs):
    """Encoder inputs as transformers' BertModel takes them."""
    import torch
    return dict(input_ids=torch.tensor(inputs["token_ids"], dtype=torch.long),
                token_type_ids=torch.tensor(inputs["segment_ids"], dtype=torch.long),
                attention_mask=torch.tensor(inputs["padding_mask"], dtype=torch.long))


def model_garden_outputs():
    """(inputs, outputs) of Model Garden's own models on fixed ids (tests/fixtures/model_garden/)."""
    found = np.load(os.path.join(TESTS, "fixtures", "model_garden", "outputs.npz"))
    x = {"token_ids": found["input_word_ids"], "segment_ids": found["input_type_ids"],
         "padding_mask": found["input_mask"]}
    return x, found
