import functools
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.checkpoints.dispatch import load_encoder, save_checkpoint
from bert_tf.base.config import BertConfig
from bert_tf.text.packing import BertPacker
from bert_tf.models.pretrainer import BertPretrainer
from bert_tf.text.tokenization import BertTokenizer
from export.saved_model import build_module, export, main, next_version

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Héllo, Wörld! 中文 ΟΔΟΣ", ""]
# Inputs a server must survive: each gives defined outputs, never a crash.
HOSTILE = ["", " ", "lorem ipsum " * 9000, "a" * 100_000, "\x00\x01\x1f control \u200b", "emoji 😀🎉 " * 50,
           "[MASK]" * 300]
HOSTILE_BYTES = [b"\xff\xfe invalid utf-8 \xc3", b"\xed\xa0\x80 surrogate"]

# A process that sees only tensorflow and tensorflow_text: TF Serving's view.
FRESH = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tf-text ops)
assert not any(m.split(".")[0] in ("bert_tf", "export", "tasks") for m in sys.modules)
model = tf.saved_model.load(sys.argv[1])
signature = model.signatures[sys.argv[2]]
inputs = {k: tf.constant(v) for k, v in json.loads(sys.argv[3]).items()}
outputs = signature(**inputs)
np.savez(sys.argv[4], **{k: v.numpy() for k, v in outputs.items()})
"""


def run_fresh(tmp_path, saved_model, signature, inputs):
    """Runs a signature in a fresh interpreter, from a directory without the project."""
    script = tmp_path / "fresh.py"
    script.write_text(FRESH)
    out = tmp_path / "out.npz"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    result = subprocess.run([sys.executable, "-P", str(script), saved_model, signature,
                             json.dumps(inputs), str(out)], cwd=str(tmp_path), env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(np.load(out, allow_pickle=False))


@pytest.fixture(scope="module")
def embeddings_export(minilm_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    module = build_module("embeddings", minilm_dir, os.path.join(minilm_dir, "vocab.txt"),
                          True, max_seq_length=64)
    return export(module, str(root / "embeddings"))


@pytest.fixture(scope="module")
def fill_mask_export(minilm_dir, tmp_path_factory):
    """A small random pretrainer with the real uncased vocab, exported for fill_mask."""
    root = tmp_path_factory.mktemp("pretrainer")
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64)
    model = BertPretrainer.from_config_object(config)
    save_checkpoint(model, str(root / "hf"), "hf",
                    vocab_file=os.path.join(minilm_dir, "vocab.txt"))
    module = build_module("pretraining", str(root / "hf"), str(root / "hf" / "vocab.txt"),
                          True, max_seq_length=32, top_k=3)
    return export(module, str(root / "models" / "fill_mask")), model


def in_process_embeddings(minilm_dir, texts, seq_length=64):
    """The Keras encoder + Python-side preprocessing, without the SavedModel. Computed
    once per (weights, texts, width): two tests compare against the same outputs, and
    loading MiniLM costs seconds."""
    return _in_process_embeddings(str(minilm_dir), tuple(texts), seq_length)


@functools.lru_cache(maxsize=None)
def _in_process_embeddings(minilm_dir, texts, seq_length):
    texts = list(texts)
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"), do_lower_case=True)
    packer = BertPacker.from_tokenizer(tokenizer, seq_length)
    features = packer(tf.ragged.constant(tokenizer.encode(texts), dtype=tf.int32,
                                         ragged_rank=1, row_splits_dtype=tf.int64))
    out = load_encoder(minilm_dir)(features)
    return features, out


def test_trim_to_longest_cuts_padding_no_sequence_reaches():
    from bert_tf.text.batching import pad_to_width, trim_to_longest

    def width(lengths, seq=24, choices=None):
        mask = np.zeros((len(lengths), seq), "int32") if choices is None else \
            np.zeros((len(lengths), choices, seq), "int32")
        for i, n in enumerate(lengths):
            mask[i, ..., :n] = 1
        features = {"padding_mask": tf.constant(mask), "token_ids": tf.constant(mask * 7)}
        out = trim_to_longest(features)
        assert out["token_ids"].shape == out["padding_mask"].shape
        np.testing.assert_array_equal(out["padding_mask"], mask[..., :out["padding_mask"]
                                                                  .shape[-1]])
        return int(out["padding_mask"].shape[-1])

    assert width([3, 10]) == 16            # longest 10 -> a multiple of 8
    assert width([8]) == 8
    assert width([9, 2]) == 16
    assert width([23]) == 24               # capped at seq
    assert width([17], seq=20) == 20
    assert width([]) == 8                  # a batch of 0
    assert width([5, 12], choices=4) == 16  # [batch, choices, seq] (SWAG)
    padded = pad_to_width(tf.ones([2, 16, 3]), 24, axis=1)
    assert padded.shape == (2, 24, 3) and float(tf.reduce_sum(padded)) == 2 * 16 * 3


def test_embeddings_signature_equals_keras_model(embeddings_export, minilm_dir):
    loaded = tf.saved_model.load(embeddings_export)
    assert set(loaded.signatures) == {"serving_default", "serve_tokenized", "serve_examples"}
    got = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
    features, want = in_process_embeddings(minilm_dir, TEXTS)
    # The texts are short: the signature ran at width 16, the Keras model at 64.
    assert features["padding_mask"].numpy().sum(1).max() <= 16
    np.testing.assert_array_equal(got["padding_mask"], features["padding_mask"])
    np.testing.assert_allclose(got["pooled_output"], want["pooled_output"], atol=1e-5)
    # Hidden states reach |x| ~ 5: the graph's fused kernels reorder float sums, so
    # compare them relative to their size.
    mask = features["padding_mask"].numpy()[:, :, None]
    assert got["sequence_output"].shape == want["sequence_output"].shape   # padded to max
    np.testing.assert_allclose(got["sequence_output"], want["sequence_output"] * mask,
                               rtol=1e-4, atol=1e-5)
    assert not np.any(got["sequence_output"].numpy()[np.broadcast_to(
        mask == 0, got["sequence_output"].shape)])                         # 0 at padding
    mean = (want["sequence_output"].numpy() * mask).sum(1) / mask.sum(1)
    np.testing.assert_allclose(got["mean_pooled"], mean, atol=1e-5)
    tokenized = loaded.signatures["serve_tokenized"](**features)
    np.testing.assert_allclose(tokenized["pooled_output"], want["pooled_output"], atol=1e-5)
    example = tf.train.Example(features=tf.train.Features(feature={"text": tf.train.Feature(
        bytes_list=tf.train.BytesList(value=[TEXTS[0].encode()]))})).SerializeToString()
    from_example = loaded.signatures["serve_examples"](examples=tf.constant([example]))
    np.testing.assert_allclose(from_example["pooled_output"][0], want["pooled_output"][0],
                               atol=1e-5)


@pytest.mark.slow
def test_moved_export_runs_in_a_fresh_process(embeddings_export, minilm_dir, tmp_path):
    moved = tmp_path / "elsewhere" / "1"
    shutil.copytree(embeddings_export, moved)
    got = run_fresh(tmp_path, str(moved), "serving_default", {"text": TEXTS})
    _, want = in_process_embeddings(minilm_dir, TEXTS)
    np.testing.assert_allclose(got["pooled_output"], want["pooled_output"], atol=1e-5)


# saved_model_cli with the tf-text ops registered first (the stock entry point does not
# import tensorflow_text; tests/task_runs.py's SAVED_MODEL_CLI runs one command), for
# several saved_model_cli commands separated by "--then" in one process
# (each further one after a line "=== saved_model_cli COMMAND"): one TensorFlow start-up
# instead of one per command. A failing command ends the process with its status.
SAVED_MODEL_CLI_COMMANDS = r"""
import sys, tensorflow_text
from tensorflow.python.tools.saved_model_cli import main
commands = [[]]
for arg in sys.argv[1:]:
    commands.append([]) if arg == "--then" else commands[-1].append(arg)
for i, args in enumerate(commands):
    if i:
        print("=== saved_model_cli " + args[0], flush=True)
    sys.argv = ["saved_model_cli"] + args
    try:
        main()
    except SystemExit as exit:
        if exit.code:
            raise
"""


@pytest.mark.slow
def test_saved_model_cli_runs_with_string_inputs(embeddings_export, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    # `run`, then `show --all`, in one process (see SAVED_MODEL_CLI_COMMANDS).
    result = subprocess.run(
        [sys.executable, "-c", SAVED_MODEL_CLI_COMMANDS, "run", "--dir", embeddings_export,
         "--tag_set", "serve", "--signature_def", "serving_default", "--input_exprs",
         'text=["hello world", "second text"]', "--outdir", str(tmp_path / "cli"),
         "--then", "show", "--dir", embeddings_export, "--all"],
        capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    pooled = np.load(tmp_path / "cli" / "pooled_output.npy")
    assert pooled.shape == (2, 384) and np.isfinite(pooled).all()
    show = result.stdout.split("=== saved_model_cli show\n", 1)[1]
    assert "serve_tokenized" in show and "serve_examples" in show


def test_hostile_inputs_give_defined_outputs(embeddings_export):
    f = tf.saved_model.load(embeddings_export).signatures["serving_default"]
    texts = tf.constant([t.encode("utf-8") for t in HOSTILE] + HOSTILE_BYTES)
    out = f(text=texts)
    assert out["pooled_output"].shape == (len(HOSTILE) + len(HOSTILE_BYTES), 384)
    assert np.isfinite(out["sequence_output"].numpy()).all()
    mask = out["padding_mask"].numpy()
    assert mask[0].sum() == 2 and mask[2].sum() == 64  # empty -> [CLS][SEP]; long -> cut
    assert mask[3].sum() == 3  # a 100,000-character word is one [UNK], as in FullTokenizer
    empty = f(text=tf.constant([], tf.string))
    assert empty["pooled_output"].shape == (0, 384)


def test_fill_mask_matches_python_prediction(fill_mask_export, minilm_dir):
    from bert_tf.quickstart import fill_mask
    path, model = fill_mask_export
    f = tf.saved_model.load(path).signatures["serving_default"]
    sentences = ["the capital of [MASK] is paris.", "no mask here", "[MASK] and [MASK]"]
    out = f(text=tf.constant(sentences))
    assert out["num_masks"].numpy().tolist() == [1, 0, 2]
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"))
    expected = fill_mask(model, tokenizer, [sentences[0], sentences[2]], top_k=3)
    for row, (_, guesses) in zip((0, 2), expected):
        for m, guess in enumerate(guesses):
            assert [t.decode() for t in out["tokens"].numpy()[row, m]] == [g[0] for g in guess]
            np.testing.assert_allclose(out["scores"].numpy()[row, m], [g[1] for g in guess],
                                       atol=1e-5)
    assert out["positions"].numpy()[1].tolist() == [-1] * 20
    assert out["positions"].numpy()[0, 0] == 1 + len(tokenizer.encode(["the capital of"])[0])
    # Hostile inputs: 300 masks are cut to what fits; nothing crashes.
    hostile = f(text=tf.constant([t.encode() for t in HOSTILE] + HOSTILE_BYTES))
    assert hostile["num_masks"].numpy()[-3] == 20


def test_versions_increment_and_bad_input_is_one_line(tmp_path, capsys):
    assert next_version(str(tmp_path / "none")) == 1
    (tmp_path / "m" / "3").mkdir(parents=True)
    (tmp_path / "m" / "notes").mkdir()
    assert next_version(str(tmp_path / "m")) == 4
    with pytest.raises(SystemExit) as exit_info:
        main(["--task", "embeddings", "--checkpoint_dir", str(tmp_path / "missing"),
              "--output_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --checkpoint_dir")
