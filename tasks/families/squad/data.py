"""SQuAD v1.1 / v2.0 files -> examples -> windowed features (task.py trains and predicts on
them).

Pre-processing keeps per-piece character offsets into the context instead of google's
whitespace-token maps: a context is split on whitespace as run_squad does (each word
tokenized alone, which is exact for google's tokenizer), and every word piece records the
characters it came from. Training answers are re-aligned to the pieces that overlap the
annotated characters; predicted spans map back to the exact original characters.

Unspaced scripts need nothing more: a Chinese paragraph (CMRC 2018, DRCD) is one
whitespace word, but the tokenizer puts every CJK ideograph and punctuation mark in a word
of its own before WordPiece and before its word-length limit, so each ideograph is a piece
with its own characters, and an answer inside a run of ideographs is cut exactly (where
run_squad's word maps can only return whole paragraphs).
"""

import collections
import dataclasses
import json

import numpy as np

from bert_tf.base.files import read_text
from bert_tf.text import windows
from bert_tf.text.words import SQUAD_WHITESPACE

# ----------------------------------------------------------------------------- reading

@dataclasses.dataclass
class SquadExample:
    """One question. answers: [{"text", "answer_start"}] as in the file; for training,
    answer_start/answer_end are the character span of the first answer (end exclusive),
    -1 for unanswerable questions."""
    qas_id: str
    question: str
    context_index: int        # index into the list of contexts returned with the examples
    answers: list
    is_impossible: bool
    answer_start: int = -1
    answer_end: int = -1


def _load_json(path):
    text = read_text(path)
    if not text.strip():
        raise ValueError(f"{path}: empty file (expected SQuAD JSON)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None


def _field(obj, key, kind, path, where):
    if not isinstance(obj, dict) or key not in obj:
        raise ValueError(f"{path}: {where}: missing \"{key}\"")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ValueError(f"{path}: {where}.{key}: expected {names}, got "
                         f"{type(value).__name__}")
    return value


def read_squad_examples(path, version_2_with_negative=False, is_training=False):
    """Reads a SQuAD JSON file (v1.1 or v2.0 layout).

    Returns (examples, contexts, dataset, report): SquadExample list, the list of context
    strings they index, the file's "data" list (for the official metric) and a Counter of
    what was skipped and why. Structural problems (not JSON, missing keys, wrong types)
    raise ValueError naming the file and the JSON path; data problems are counted:
    empty contexts and questions are skipped; in training, questions without an answer
    (v1.1), and answers whose text is not at their answer_start in the context, are
    skipped too, as run_squad skips answers it cannot recover. Training on a file that
    marks questions is_impossible (SQuAD v2.0) without version_2_with_negative is refused.
    """
    data = _field(_load_json(path), "data", list, path, "top level")
    examples, contexts, report = [], [], collections.Counter()
    seen = set()
    marked_impossible = 0     # questions the file says have no answer (v2.0's mark)
    for a, article in enumerate(data):
        paragraphs = _field(article, "paragraphs", list, path, f"data[{a}]")
        for p, paragraph in enumerate(paragraphs):
            where = f"data[{a}].paragraphs[{p}]"
            context = _field(paragraph, "context", str, path, where)
            qas = _field(paragraph, "qas", list, path, where)
            if not context.strip():
                report["empty_context"] += len(qas)
                continue
            contexts.append(context)
            for q, qa in enumerate(qas):
                qwhere = f"{where}.qas[{q}]"
                qid = str(_field(qa, "id", (str, int), path, qwhere))
                if qid in seen:
                    raise ValueError(f"{path}: {qwhere}: duplicate question id {qid!r}")
                seen.add(qid)
                question = _field(qa, "question", str, path, qwhere)
                answers = qa.get("answers", [])
                if not isinstance(answers, list):
                    raise ValueError(f"{path}: {qwhere}.answers: expected a list")
                for i, answer in enumerate(answers):
                    _field(answer, "text", str, path, f"{qwhere}.answers[{i}]")
                    _field(answer, "answer_start", int, path, f"{qwhere}.answers[{i}]")
                marked_impossible += qa.get("is_impossible") is True
                impossible = bool(qa.get("is_impossible", False)) or not answers
                if impossible and not version_2_with_negative:
                    # v1.1 has no unanswerable questions: without an answer there is
                    # nothing to train on (eval still counts it as a question).
                    report["no_answer"] += 1
                    if is_training:
                        continue
                if not question.strip():
                    report["empty_question"] += 1
                    continue
                example = SquadExample(qid, question, len(contexts) - 1, answers,
                                       impossible and version_2_with_negative)
                if answers and not example.is_impossible:
                    text, start = answers[0]["text"], answers[0]["answer_start"]
                    found = context[start:start + len(text)] == text and text.strip()
                    if found:
                        example.answer_start, example.answer_end = start, start + len(text)
                    else:
                        report["answer_not_in_context"] += 1
                        if is_training:
                            continue
                examples.append(example)
    if is_training and marked_impossible and not version_2_with_negative:
        # A v2.0 file read as v1.1 would train on its answerable questions alone: the
        # model would never learn to answer "no answer", and only a count would say so.
        raise ValueError(f"{path}: {marked_impossible} of {len(seen)} questions are "
                         f"unanswerable (is_impossible); pass --version_2_with_negative "
                         f"to train on SQuAD v2.0")
    report["questions"] = len(examples)
    return examples, contexts, data, report


# ----------------------------------------------------------------------------- features

@dataclasses.dataclass
class DocPieces:
    """A context's word pieces: ids [P] int32, offsets [P, 2] int32 character offsets
    into the context (end exclusive)."""
    ids: np.ndarray
    offsets: np.ndarray


def tokenize_contexts(tokenizer, contexts, chunk=512):
    """Each context -> DocPieces: run_squad's whitespace words, each tokenized alone, and
    the pieces' character offsets (graph_words.word_pieces, the signature's op), run in
    tf.data `chunk` contexts a batch."""
    import tensorflow as tf

    from bert_tf.text import graph_words
    from bert_tf.text.batching import map_chunks

    def pieces_of(texts):
        ids, begin, end = graph_words.word_pieces(tokenizer, texts, SQUAD_WHITESPACE)
        rows = graph_words.row_ids(ids.row_splits)
        to_char = lambda offsets: tf.cast(graph_words.byte_to_char(
            texts, rows, offsets.flat_values), tf.int32)
        return (tf.cast(ids.flat_values, tf.int32), ids.row_splits, to_char(begin),
                to_char(end))

    out = []
    encoded = tf.constant([context.encode("utf-8") for context in contexts], tf.string)
    for ids, splits, starts, ends in map_chunks(pieces_of, encoded, chunk):
        ids, splits = ids.numpy(), splits.numpy()
        offsets = np.stack([starts.numpy(), ends.numpy()], axis=1)
        out += [DocPieces(ids[a:b], offsets[a:b]) for a, b in zip(splits, splits[1:])]
    return out


def answer_piece_span(offsets, start_char, end_char):
    """The pieces [first, last] covering the characters [start_char, end_char): the first
    piece ending after the answer starts, the last starting before it ends (a piece that
    holds more than the answer, "Japanese" for "Japan", is taken whole, as run_squad
    does). None when no piece overlaps (an answer of deleted characters only)."""
    first = int(np.searchsorted(offsets[:, 1], start_char, side="right"))
    last = int(np.searchsorted(offsets[:, 0], end_char, side="left")) - 1
    if first > last or first >= len(offsets) or last < 0:
        return None
    return first, last


def create_features(examples, doc_pieces, tokenizer, max_seq_length, doc_stride,
                    max_query_length, is_training=False, chunk=1024):
    """Windows of every example -> dict of numpy arrays, one row per window:

      token_ids, segment_ids, padding_mask  int32 [N, S]   [CLS] question [SEP] window [SEP]
      start_positions, end_positions        int32 [N]      answer pieces; 0 ([CLS]) when
                                                           the window lacks the answer
      offsets                               int32 [N, S, 2] context characters; -1 elsewhere
      max_context                           bool  [N, S]   piece has its max context here
      example_index                         int32 [N]

    The question's pieces (`tokenizer`, a BertTokenizer, cut at max_query_length) and
    the windows, packing and max context (bert_tf/text/windows.py's `pair_windows`) are
    the signature's ops, run in tf.data `chunk` examples a batch. Returns (features,
    report). In training, an answer no piece overlaps drops the example (counted as
    "answer_not_aligned").
    """
    import tensorflow as tf

    from bert_tf.text.batching import map_chunks_joined
    from bert_tf.text.packing import BertPacker
    from tasks.families.squad.config import check_windows
    # The room a question leaves (decoding's settings are not the features').
    check_windows(max_seq_length, max_query_length, doc_stride, n_best_size=1,
                  max_answer_length=1, flags=False)
    report = collections.Counter()
    kept, answers = [], []                       # example indexes, their answer pieces
    for e, example in enumerate(examples):
        doc = doc_pieces[example.context_index]
        if len(doc.ids) == 0:
            report["context_without_pieces"] += 1
            continue
        answer = None
        if example.answer_start >= 0:
            answer = answer_piece_span(doc.offsets, example.answer_start, example.answer_end)
            if answer is None:
                report["answer_not_aligned"] += 1
                if is_training:
                    continue
        kept.append(e)
        answers.append((-1, -1) if answer is None else answer)
    if not kept:
        raise ValueError("no features: every example was skipped (see the report)")
    ragged = lambda rows, dtype: tf.RaggedTensor.from_row_lengths(
        np.concatenate([np.asarray(r, dtype).reshape(-1) for r in rows]),
        np.asarray([len(r) for r in rows], np.int64), validate=False)
    # Every context's pieces once; each batch takes its questions' contexts.
    contexts = {"pieces": ragged([d.ids for d in doc_pieces], np.int32),
                "starts": ragged([d.offsets[:, 0] for d in doc_pieces], np.int32),
                "ends": ragged([d.offsets[:, 1] for d in doc_pieces], np.int32)}
    elements = {
        "question": tf.constant([examples[e].question.encode("utf-8") for e in kept],
                                tf.string),
        "context": np.asarray([examples[e].context_index for e in kept], np.int64),
        "answer": np.asarray(answers, np.int64).reshape(-1, 2),
        "example": np.asarray(kept, np.int64)}
    packer = BertPacker.from_tokenizer(tokenizer, max_seq_length)

    def windows_of(batch):
        doc = {k: tf.gather(v, batch["context"]) for k, v in contexts.items()}
        query = tokenizer(batch["question"])
        features, layout = windows.pair_windows(packer, query[:, :max_query_length],
                                                doc["pieces"], doc_stride)
        example, in_doc, piece = layout["example"], layout["in_doc"], layout["piece"]
        offset = lambda x: tf.where(in_doc, tf.gather(x.flat_values, piece), -1)
        # The answer's columns in a window that holds it whole; 0 ([CLS]) elsewhere.
        answer = tf.gather(batch["answer"], example)                       # [N, 2]
        at = lambda k: in_doc & tf.equal(piece, tf.gather(
            doc["pieces"].row_splits, example)[:, None] + answer[:, k:k + 1])
        holds = (answer[:, 0] >= 0) & tf.reduce_any(at(0), 1) & tf.reduce_any(at(1), 1)
        position = lambda k: tf.where(holds, tf.argmax(at(k), 1, output_type=tf.int32), 0)
        return dict(features, start_positions=position(0), end_positions=position(1),
                    offsets=tf.stack([offset(doc["starts"]), offset(doc["ends"])], -1),
                    max_context=layout["max_context"],
                    example_index=tf.cast(tf.gather(batch["example"], example), tf.int32),
                    question_pieces=query.row_lengths())     # per question, for the report

    features = map_chunks_joined(windows_of, elements, chunk)
    report["question_truncated"] = int((features.pop("question_pieces") >
                                        max_query_length).sum())
    report["split_into_windows"] = int((np.bincount(features["example_index"]) > 1).sum())
    report = collections.Counter({k: v for k, v in report.items() if v})
    report["features"] = len(features["token_ids"])
    return features, report


def featurize(path, tokenizer, args, is_training):
    """Reads `path` and builds its features. Returns (examples, contexts, dataset,
    features, report)."""
    examples, contexts, dataset, report = read_squad_examples(
        path, args.version_2_with_negative, is_training)
    if not examples:
        raise ValueError(f"{path}: no usable questions ({dict(report)})")
    features, feature_report = create_features(
        examples, tokenize_contexts(tokenizer, contexts), tokenizer, args.max_seq_length,
        args.doc_stride, args.max_query_length, is_training)
    report.update(feature_report)
    print(f"{path}: {dict(sorted(report.items()))}", flush=True)
    return examples, contexts, dataset, features, report
