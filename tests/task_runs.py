"""Tiny fine-tuning runs of every task family and the Python path each export is held to
(shared by tests/families/*/test_serving.py, tests/export/test_export_tasks.py,
test_int8.py and test_limits.py; conftest.py builds and exports the runs once per test
session).

The task directories are made here: tiny random encoders (L=2, H=32) with a small vocab,
saved the way a fine-tuning run leaves them (bert_tf/models/run_dir.py)."""

import contextlib
import functools
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.models.task_models import BertClassifier
from bert_tf.text.preprocessor import BertPreprocessor
from export.saved_model import load_task_model


SEQ = 24
VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(".,!?;:'\"()-") +
         "the quick brown fox jumps over lazy dog paris is capital of france john smith "
         "lives in new york what where who does city river long name was born".split() +
         list("abcdefghijklmnopqrstuvwxyz0123456789") +
         ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"] + ["##ing", "##ed"])
TEXTS_A = ["The quick brown fox jumps over the lazy dog.", "Héllo, Wörld! 中文 ΟΔΟΣ",
           "john smith lives in new york", "   ", "paris is the capital of france " * 4]
TEXTS_B = ["a dog", "", "who lives in new york?", "what", "x"]
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "E-LOC", "S-MISC"]


# Inputs a server must survive, in every text signature: each row gives defined outputs,
# never a crash. (Batches of 0 and mismatched batch sizes are checked per signature.)
HOSTILE = [
    "",                                            # empty
    " \t\n ",                                      # whitespace only
    "the quick brown fox jumps " * 4000,           # 100 KB of words: split / windowed
    "a" * 100_000,                                 # a 100 KB word: one [UNK]
    "\x00\x01\x1f control \u200b chars \x7f",      # control and zero-width characters
    "emoji 😀🎉 👩‍👩‍👧 " * 40,                      # emoji, ZWJ sequences
    "中文字符 ΟΔΟΣ Ünïcödé\u00a0nbsp\u3000x",        # CJK, Greek, accents, Unicode spaces
]
HOSTILE_BYTES = [b"\xff\xfe invalid utf-8 \xc3", b"\xed\xa0\x80 surrogate \xe2\x82"]


def hostile_batch():
    return tf.constant([t.encode("utf-8") for t in HOSTILE] + HOSTILE_BYTES)


def make_run_dir(root, task, task_config, build_model, seed=0):
    """A fine-tuning run's directory with a tiny random model: TASK_config.json,
    bert_config.json, vocab.txt, last.weights.h5."""
    import keras
    from bert_tf.base.config import BertConfig
    from bert_tf.models.encoder import BertEncoder
    from bert_tf.models import run_dir
    os.makedirs(root, exist_ok=True)
    vocab = os.path.join(root, "vocab.source.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")
    # A larger initializer than BERT's 0.02 makes the random predictions decisive (and
    # varied), so that parity compares real decisions.
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64,
                        max_position_embeddings=64, initializer_range=0.5)
    keras.utils.set_random_seed(seed)
    model = build_model(BertEncoder.from_config_object(config))
    model.save_weights(os.path.join(root, "last.weights.h5"))
    run_dir.save_task_files(root, task, dict(task_config, max_seq_length=SEQ,
                                              do_lower_case=True), config, vocab)
    os.remove(vocab)
    return root


@functools.lru_cache(maxsize=None)
def task_model(task, run):
    """(model, config, tokenizer) of a run directory, loaded once per test session."""
    return load_task_model(task, run)


_LOADED = {}
_LOAD = tf.saved_model.load


def _files(folder):
    """(relative path, size, modification time in ns) of every file under `folder`."""
    found = []
    for d, _, names in os.walk(folder):
        for name in names:
            stat = os.stat(os.path.join(d, name))
            found.append((os.path.relpath(os.path.join(d, name), folder), stat.st_size,
                          stat.st_mtime_ns))
    return tuple(sorted(found))


def loaded_export(path, *args, **kwargs):
    """The SavedModel at `path`, loaded once per test session while its files stay as
    they were (the same sizes and modification times under its real path): a load costs
    seconds and most exports are checked by several tests, which only call its
    signatures. A load with options is TensorFlow's own."""
    if args or kwargs or "://" in str(path) or not os.path.isdir(path):
        return _LOAD(path, *args, **kwargs)
    real = os.path.realpath(path)
    key = (real, _files(real))
    if key not in _LOADED:
        _LOADED[key] = _LOAD(path)
    return _LOADED[key]


@contextlib.contextmanager
def shared_loads():
    """Within: every tf.saved_model.load is loaded_export, so the commands a test runs in
    its own process (export.batch_predict) deserialize an unchanged export once per
    session. Their checks before the load (bert_tf/checkpoints/bundle.py) still run; an
    export changed on disk is loaded again."""
    tf.saved_model.load = loaded_export
    try:
        yield
    finally:
        tf.saved_model.load = _LOAD


def traced(module):
    """The module's text signature as a traced tf.function, without saving (for variants
    of an exported model: tracing one function costs less than a save)."""
    return tf.function(module.outputs_from_text)


def features_dict(features):
    return {k: tf.constant(features[k]) for k in ("token_ids", "segment_ids", "padding_mask")}


def example(**features):
    """A serialized tf.Example with bytes features (str or list of str)."""
    def feature(value):
        values = value if isinstance(value, list) else [value]
        return tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[v.encode("utf-8") for v in values]))
    return tf.train.Example(features=tf.train.Features(feature={
        k: feature(v) for k, v in features.items()})).SerializeToString()


def assert_invalid_argument(fn, **inputs):
    with pytest.raises(tf.errors.InvalidArgumentError):
        fn(**inputs)


def pair_classifier_run(root):
    """The run directory of a tiny random 3-label classifier of text pairs."""
    return make_run_dir(root, "glue", {
        "task": "glue", "task_name": "custom", "labels": ["neg", "neutral", "pos"],
        "regression": False, "num_classes": 3, "text_inputs": ["text_a", "text_b"],
        "dropout": None}, lambda e: BertClassifier(e, 3), seed=1)


def python_classify(run, texts_a, texts_b=None):
    """The Keras model + tasks.glue's preprocessing and post-processing."""
    from tasks.families.classification import task as glue
    model, config, tokenizer = task_model("classification", run)
    preprocessor = BertPreprocessor(tokenizer, config["max_seq_length"])
    inputs = preprocessor(tf.constant(texts_a),
                          None if texts_b is None else tf.constant(texts_b))
    outputs = {k: np.asarray(v) for k, v in model(inputs).items()}
    return glue.postprocess(outputs, None if config["regression"] else config["labels"]), \
        inputs


CONTEXTS = ["the fox jumps over the dog.", "john smith lives in new york", ""]
ENDINGS = [["it is quick", "it is lazy.", "the dog was born", "paris"],
           ["where", "in paris is the city", "", "😀"],
           ["a", "b", "c", "d"]]


def python_swag(run, contexts, endings):
    """tasks.swag's preprocessing (with the shared start folded into the endings, which
    packs the same tokens) + Keras model + post-processing."""
    from tasks.families.swag import task as swag
    model, config, tokenizer = task_model("swag", run)
    preprocessor = swag.MultipleChoicePreprocessor(tokenizer, config["max_seq_length"])
    inputs = preprocessor(tf.constant(contexts), tf.constant([""] * len(contexts)),
                          tf.constant(endings))
    return swag.postprocess({"logits": np.asarray(model(inputs)["logits"])}), inputs


NER_TEXTS = ["John Smith lives in New York.", "  the quick\tbrown fox\u00a0jumps  ",
             "Héllo Wörld 中文 paris", "", "\x00 \u200b", "river " * 40 + "end",
             "《东京新闻》报道：李明（北京人）在Google工作，U.S.也有。",
             # combining marks, digits and a percent sign in unspaced Chinese, emoji, the
             # ideographic space, a file's per-character lines joined (MSRA: no spaces)
             "Cafe\u0301 re\u0301sume\u0301：30%的人在2024年去了Zürich😀\u3000好。",
             "LucyBrown在Nokia工作。"]


def python_entities(run, texts):
    """tasks.ner's Python path on raw texts: split_words, create_features, the Keras
    model, word_tags, entities."""
    from tasks.families.ner import task as ner
    model, config, tokenizer = task_model("ner", run)
    out = []
    for text in texts:
        spans = ner.split_words(text)
        sentence = ner.Sentence([text[s:e] for s, e in spans], None, [], [])
        features, _ = ner.create_features([sentence], tokenizer, NER_LABELS,
                                          config["max_seq_length"], config.get("doc_stride"))
        logits = np.asarray(model(features_dict(features))["logits"])
        tags = ner.word_tags(logits, features, [sentence], NER_LABELS)[0]
        out.append(ner.entities(tags, spans, text))
    return out


def entity_rows(outputs):
    rows = []
    for i, n in enumerate(outputs["num_entities"].numpy()):
        rows.append([{"label": outputs["label"].numpy()[i, j].decode(),
                      "text": outputs["text"].numpy()[i, j].decode(),
                      "start_char": int(outputs["start_char"].numpy()[i, j]),
                      "end_char": int(outputs["end_char"].numpy()[i, j])}
                     for j in range(n)])
    return rows


SQUAD_CONFIG = {"task": "squad", "doc_stride": 5, "max_query_length": 8, "n_best_size": 4,
                "max_answer_length": 4}
QUESTIONS = ["where does john smith live?", "what is the capital of france?",
             "who?", "what is the capital of the long river where the fox was born?", "",
             "city", "李明住在哪里？", "他们去了哪里？"]
CONTEXTS_SQ = [
    "John Smith lives in New York.",
    "Paris is the capital of France. " * 6 + "The quick\u202fbrown fox\tjumps.",
    "Héllo  Wörld! 中文 ΟΔΟΣ  the lazy dog",
    "the river is long " * 5,
    "a b",
    "",
    "李明在北京大学工作，他住在上海（Shanghai）。我们在东京见过他！",
    # combining marks, NBSP, emoji, digits and a percent sign in unspaced Chinese
    "Cafe\u0301\u00a0re\u0301sume\u0301：30%的人在2024年去了Zürich😀\u3000好。 end",
]


def python_squad(run, questions, contexts):
    """tasks.squad's Python path: tokenize_contexts, create_features, the Keras model,
    postprocess (tasks.families.squad.postprocess.decode_example) -> one result per question
    (None where the context has no pieces: the Python path makes no window)."""
    from tasks.families.squad import task as squad
    model, config, tokenizer = task_model("squad", run)
    examples = [squad.SquadExample(str(i), q, i, [], False) for i, q in enumerate(questions)]
    features, _ = squad.create_features(
        examples, squad.tokenize_contexts(tokenizer, contexts), tokenizer,
        config["max_seq_length"], config["doc_stride"], config["max_query_length"])
    out = model(features_dict(features))
    results = squad.postprocess(
        examples, contexts, features, np.asarray(out["start_logits"]),
        np.asarray(out["end_logits"]), config["n_best_size"], config["max_answer_length"],
        config["version_2_with_negative"], config["null_score_diff_threshold"])
    return [results.get(str(i)) for i in range(len(questions))], features


def assert_same_answers(got, want, v2):
    for i, result in enumerate(want):
        if result is None:                 # no context pieces: nothing to score
            result = {"text": "", "start_char": -1, "end_char": -1, "score": -np.inf,
                      "is_impossible": True}
        assert got["answer"].numpy()[i].decode() == result["text"], i
        assert got["start_char"].numpy()[i] == result["start_char"], i
        assert got["end_char"].numpy()[i] == result["end_char"], i
        np.testing.assert_allclose(got["score"].numpy()[i], result["score"], rtol=1e-5)
        if v2:
            assert got["is_impossible"].numpy()[i] == result["is_impossible"], i


# saved_model_cli with the tf-text ops registered first (the stock entry point does not
# import tensorflow_text); docs/serving.md shows the same command.
SAVED_MODEL_CLI = ("import sys, tensorflow_text; "
                   "from tensorflow.python.tools.saved_model_cli import main; "
                   "sys.argv[0] = 'saved_model_cli'; sys.exit(main())")
