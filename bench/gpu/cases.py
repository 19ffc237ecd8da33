"""What both sides of the GPU kit run: model sizes, shapes, inputs, step counts and the
FLOP count behind MFU. Plain Python and NumPy, so it imports beside Keras/JAX (ours.py)
and beside torch (hf.py) alike.

Model FLOPs of one training step (the count MFU divides; the same for both sides, so MFU
ratios are speed ratios):

    6 * N * tokens                 every dense layer, forward (2) + backward (4): N is the
                                   encoder's weight-matrix parameters (12 layers' attention
                                   and feed-forward, the pooler), plus the masked-LM
                                   transform when pretraining
  + 12 * L * H * S * tokens        attention scores and context (QK^T and PV), forward and
                                   backward, over the padded length S
  + 6 * H * V * predictions        the masked-LM output layer (tied to the word embeddings)
                                   at the masked positions only (google's model computes it
                                   there and nowhere else)

tokens = batch * S. Embedding lookups, LayerNorm, softmax and GELU are not counted. A
forward pass alone (inference) is a third of this.
"""

import argparse
import json
import os
import time

import numpy as np

VOCAB_SIZE = 30522
MASK_ID = 103  # [MASK] in bert-base-uncased's vocabulary
# (layers, hidden, heads, intermediate): google's BERT-base and large, and all-MiniLM-L6-v2's
# shape (the model bench/serving.py serves), with bert-base-uncased's vocabulary.
MODELS = {
    "minilm": (6, 384, 12, 1536),
    "base": (12, 768, 12, 3072),
    "large": (24, 1024, 16, 4096),
    "tiny": (2, 64, 2, 128),  # the CPU mode's
}
# Peak dense bf16 matrix throughput (FLOP/s) that MFU divides by, from NVIDIA's data sheets
# (SXM parts; the H200 has the H100's tensor cores).
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}

# What each mode runs. gpu: the sizes the issue asks for. cpu: the same code on a tiny model
# for a few steps (CI runs it so the kit does not rot between GPU draws).
PLANS = {
    "gpu": {
        "pretrain": [  # (model, seq, predictions per sequence, batches to try, largest first)
            ("base", 512, 76, (128, 64, 32)),
            ("base", 128, 20, (512, 256, 128)),
        ],
        "finetune": [("base", 128, 32), ("minilm", 128, 32)],  # (model, seq, batch)
        "inference": [("base", (1, 64)), ("minilm", (1, 64))],  # (model, batch sizes)
        # (model, seq, batch, variant: ours.PROBE_VARIANTS)
        "probe": [("base", 512, 32, v) for v in (
            "as bert_tf runs", "no attention dropout", "fused attention, no attention dropout",
            "fused attention")],
        # What fused attention (BertEncoder.set_attention_implementation("fused")) does
        # to the same steps, and to what a small model learns (`learning`: plain and
        # fused from the same weights on the same masked real texts, per seed).
        "fused": {"pretrain": [("base", 512, 76, (128, 64, 32)), ("base", 128, 20, (512, 256))],
                  "inference": [("base", (64,)), ("minilm", (64,))],
                  "learning": dict(model="minilm", seq=128, batch=32, predictions=20,
                                   steps=300, chunk=50, seeds=(1, 2, 3), held_out=16)},
        # The same comparison on a large set (`learning_large`): every standard-library
        # docstring (4,219 training sequences against the short texts' 96), more steps, a
        # larger held-out set. `seconds`: what one attention implementation needs, compile
        # included.
        "learning_large": dict(model="minilm", seq=128, batch=64, predictions=20, steps=600,
                               chunk=100, seeds=(1, 2, 3), held_out=256, seconds=100),
        "warmup_steps": 3, "timed_steps": 20, "inference_texts": {1: 200, 64: 1024},
        "parity_model": "base",
    },
    "cpu": {
        "pretrain": [("tiny", 64, 8, (8,))],
        "finetune": [("tiny", 32, 4)],
        "inference": [("tiny", (1, 8))],
        "probe": [("tiny", 32, 4, v) for v in (
            "as bert_tf runs", "no attention dropout", "fused attention, no attention dropout")],
        "fused": {"pretrain": [("tiny", 64, 8, (8,))], "inference": [("tiny", (8,))],
                  "learning": dict(model="tiny", seq=32, batch=4, predictions=4, steps=6,
                                   chunk=3, seeds=(1, 2), held_out=2)},
        "learning_large": dict(model="tiny", seq=32, batch=4, predictions=4, steps=4,
                               chunk=2, seeds=(1,), held_out=8, seconds=0, documents=200),
        "warmup_steps": 1, "timed_steps": 2, "inference_texts": {1: 8, 8: 32},
        "parity_model": "tiny",
    },
}
SEED = 1234


def config_dict(model):
    """The model's HF-style config values (both sides build from these)."""
    layers, hidden, heads, intermediate = MODELS[model]
    return dict(vocab_size=VOCAB_SIZE, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=intermediate,
                max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu",
                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                initializer_range=0.02, layer_norm_eps=1e-12)


def dense_params(model, pretraining):
    layers, h, _, i = MODELS[model]
    per_layer = 4 * h * h + 2 * h * i   # Q, K, V, output; two feed-forward matrices
    n = layers * per_layer + h * h      # + pooler
    if pretraining:
        n += h * h                      # masked-LM transform
    return n


def train_flops(model, batch, seq, predictions=0):
    """Model FLOPs of one training step (module docstring)."""
    layers, h, _, _ = MODELS[model]
    tokens = batch * seq
    flops = 6 * dense_params(model, predictions > 0) * tokens + 12 * layers * h * seq * tokens
    return flops + 6 * h * VOCAB_SIZE * batch * predictions


def peak_flops(device_name):
    for key, value in PEAK_BF16.items():
        if key in device_name:
            return value
    return None


def pretraining_batch(batch, seq, predictions, seed=SEED):
    """A random full-length masked-LM batch: ids in [1000, vocab), segment B on the second
    half, `predictions` distinct masked positions per sequence (all weighted 1)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, VOCAB_SIZE, (batch, seq)).astype("int32")
    segments = np.zeros((batch, seq), "int32")
    segments[:, seq // 2:] = 1
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq - 1), predictions, replace=False)
                                  for _ in range(batch)]), axis=1).astype("int32")
    labels = np.take_along_axis(ids, positions, axis=1)
    np.put_along_axis(ids, positions, MASK_ID, axis=1)
    return {"token_ids": ids, "segment_ids": segments,
            "padding_mask": np.ones((batch, seq), "int32"),
            "masked_lm_positions": positions, "masked_lm_ids": labels,
            "masked_lm_weights": np.ones((batch, predictions), "float32"),
            "next_sentence_labels": rng.integers(0, 2, batch).astype("int32")}


def classification_batch(batch, seq, seed=SEED):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, VOCAB_SIZE, (batch, seq)).astype("int32")
    return ({"token_ids": ids, "segment_ids": np.zeros_like(ids),
             "padding_mask": np.ones_like(ids)},
            rng.integers(0, 2, batch).astype("int32"))


def parity_inputs(seq=32, batch=4, predictions=5):
    """A padded batch for the logits comparison: rows of different lengths."""
    x = pretraining_batch(batch, seq, predictions, seed=7)
    for row in range(batch):
        length = seq - 6 * row
        x["padding_mask"][row, length:] = 0
        x["token_ids"][row, length:] = 0
        x["segment_ids"][row, length:] = 0
        x["masked_lm_positions"][row] = np.arange(1, predictions + 1)
    return {k: x[k] for k in ("token_ids", "segment_ids", "padding_mask",
                              "masked_lm_positions")}


def write_real_texts(count, vocab_file, path):
    """Writes the token ids ([CLS] ... [SEP]) of `count` real short texts to `path` (JSON):
    the first sentence of standard-library docstrings (bench/common.short_texts),
    tokenized by bert_tf's plain Python WordPiece tokenizer (google's rules), capped at
    128. Done once per run by kit.py; every worker reads them (`real_texts`)."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from common import short_texts
    _write_token_ids(short_texts(count), vocab_file, path, max_pieces=126)


def write_corpus_texts(vocab_file, path, max_documents=None):
    """Writes the token ids ([CLS] ... [SEP], uncapped) of every standard-library
    docstring and reference topic (bert_tf/base/corpus.py), one list per document, to `path`
    (JSON), or of the first `max_documents`: the large set of the learning check
    (`learning_large`)."""
    from bert_tf.base.corpus import iter_documents
    documents = []
    for document in iter_documents():
        documents.append(" ".join(document))
        if len(documents) == max_documents:
            break
    _write_token_ids(documents, vocab_file, path)


def _write_token_ids(texts, vocab_file, path, max_pieces=None):
    """Each text's word pieces (at most `max_pieces`) between [CLS] and [SEP], one list
    per text, to `path` (JSON)."""
    from bert_tf.data.inputs import load_vocab
    from bert_tf.text.python_tokenizer import CachedTokenizer
    vocab = load_vocab(vocab_file)
    ids, counts = CachedTokenizer(vocab, do_lower_case=True).tokenize_lines(texts)
    cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
    out, start = [], 0
    for n in counts:
        out.append([cls] + [int(i) for i in ids[start:start + min(n, max_pieces or n)]]
                   + [sep])
        start += n
    with open(path, "w") as f:
        json.dump(out, f)


def packed_rows(texts, seq):
    """How many sequences of `seq` the texts' pieces pack into (masked_text_batches)."""
    body = seq - 2
    return (sum(len(t) - 2 for t in texts) - body) // body + 1


def masked_text_batches(texts, seq, batch, predictions, steps, held_out, seed=SEED):
    """What the learning check trains and evaluates on: the real texts' pieces packed
    into [CLS] ... [SEP] sequences of `seq` (as pretraining data packs a document), the
    last `held_out` sequences kept apart; `steps` training batches of `batch` sequences
    drawn with replacement, and the held-out sequences in batches of at most `batch`
    (one batch when `held_out` <= `batch`), each with `predictions` positions
    per row masked in google's proportions (80% [MASK], 10% a random word piece, id 1000
    and up, 10% unchanged; all weighted 1). Next-sentence labels are all 0 (one segment).
    Returns (train batches, held-out batches) as (inputs, labels)."""
    rng = np.random.default_rng(seed)
    cls, sep = texts[0][0], texts[0][-1]
    pieces = [p for t in texts for p in t[1:-1]]
    body = seq - 2
    rows = np.array([[cls] + pieces[i:i + body] + [sep]
                     for i in range(0, len(pieces) - body + 1, body)], "int32")
    train, held = rows[:-held_out], rows[-held_out:]

    def masked(ids):
        ids = ids.copy()
        positions = np.sort(np.stack([rng.choice(np.arange(1, seq - 1), predictions,
                                                 replace=False) for _ in ids]), axis=1)
        labels = np.take_along_axis(ids, positions, axis=1)
        draw = rng.random(positions.shape)
        replaced = np.where(draw < 0.8, MASK_ID, np.where(draw < 0.9, rng.integers(
            1000, VOCAB_SIZE, positions.shape), labels))
        np.put_along_axis(ids, positions, replaced, axis=1)
        x = {"token_ids": ids, "segment_ids": np.zeros_like(ids),
             "padding_mask": np.ones_like(ids), "masked_lm_positions": positions.astype("int32")}
        y = {"masked_lm_ids": labels.astype("int32"),
             "masked_lm_weights": np.ones(positions.shape, "float32"),
             "next_sentence_labels": np.zeros(len(ids), "int32")}
        return x, y
    batches = [masked(train[rng.integers(0, len(train), batch)]) for _ in range(steps)]
    return batches, [masked(held[i:i + batch]) for i in range(0, len(held), batch)]


def real_texts(count, work_dir):
    with open(os.path.join(work_dir, "texts.json")) as f:
        return json.load(f)[:count]


def corpus_texts(work_dir):
    with open(os.path.join(work_dir, "corpus.json")) as f:
        return json.load(f)


def padded_batches(sequences, batch, multiple=1):
    """Consecutive batches, each padded to its longest row (rounded up to `multiple`)."""
    for i in range(0, len(sequences), batch):
        rows = sequences[i:i + batch]
        width = max(len(r) for r in rows)
        width = -(-width // multiple) * multiple
        ids = np.zeros((len(rows), width), "int32")
        mask = np.zeros((len(rows), width), "int32")
        for j, r in enumerate(rows):
            ids[j, :len(r)] = r
            mask[j, :len(r)] = 1
        yield {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": mask}


class Results:
    """Appends one JSON line per measurement to OUT/results.jsonl as soon as it is
    taken, so a run stopped at its time limit still returns what it measured."""

    def __init__(self, out_dir, side):
        self.path = os.path.join(out_dir, "results.jsonl")
        self.side = side

    def add(self, **row):
        row["side"] = self.side
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


def worker_args(doc, groups):
    """A worker's (ours.py, hf.py) command line: the groups to run, in order."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("groups", nargs="+", choices=groups)
    parser.add_argument("--mode", choices=sorted(PLANS), required=True)
    parser.add_argument("--out", required=True, help="where results.jsonl grows")
    parser.add_argument("--work", required=True, help="the checkpoint, texts, logits")
    parser.add_argument("--deadline", type=float, required=True)
    return parser.parse_args()


def out_of_time(plan, deadline, seconds, results, **row):
    """True (and the row recorded as skipped) when a GPU run has under `seconds` left
    before its deadline. The CPU mode runs everything."""
    if plan is PLANS["cpu"] or deadline - time.time() >= seconds:
        return False
    results.add(**row, skipped="time")
    return True
