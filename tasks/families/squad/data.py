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
from bert_tf.text.packing import pack_rows
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


def _byte_to_char(word):
    """[bytes + 1] int: the character index of each UTF-8 byte of `word` (and its end)."""
    lengths = [len(ch.encode("utf-8")) for ch in word]
    return np.concatenate([np.repeat(np.arange(len(word)), lengths), [len(word)]])


def tokenize_words(tokenizer, words, chunk=8192):
    """Tokenizes each word alone, `chunk` words a call. Returns (ids, starts, ends,
    lengths): the pieces of every word, in order, as flat int32 arrays [P] (ids, and
    character offsets into the piece's own word), and each word's piece count [W]."""
    import tensorflow as tf
    ids_parts, starts_parts, ends_parts, lengths = [], [], [], []
    for i in range(0, len(words), chunk):
        batch = words[i:i + chunk]
        encoded = [w.encode("utf-8") for w in batch]
        ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(encoded, tf.string))
        splits = ids.row_splits.numpy()
        flat_starts, flat_ends = starts.flat_values.numpy(), ends.flat_values.numpy()
        # The offsets are bytes; a word with characters of several bytes maps them back.
        for j in (j for j, (w, b) in enumerate(zip(batch, encoded)) if len(b) != len(w)):
            lo, hi = splits[j], splits[j + 1]
            to_char = _byte_to_char(batch[j])
            flat_starts[lo:hi], flat_ends[lo:hi] = (to_char[flat_starts[lo:hi]],
                                                    to_char[flat_ends[lo:hi]])
        ids_parts.append(ids.flat_values.numpy().astype(np.int32))
        starts_parts.append(flat_starts.astype(np.int32))
        ends_parts.append(flat_ends.astype(np.int32))
        lengths.append(np.diff(splits))
    if not ids_parts:
        return (np.zeros([0], np.int32),) * 3 + (np.zeros([0], np.int64),)
    return (np.concatenate(ids_parts), np.concatenate(starts_parts),
            np.concatenate(ends_parts), np.concatenate(lengths))


def tokenize_contexts(tokenizer, contexts):
    """Each context -> DocPieces (every word tokenized alone, as run_squad does)."""
    from bert_tf.text import graph_words
    words, bases, counts = [], [], []
    # run_squad's whitespace split, by the signature's op (bert_tf/text/graph_words.py).
    for context, spans in zip(contexts, graph_words.word_spans(contexts, SQUAD_WHITESPACE)):
        counts.append(len(spans))
        for start, end in spans:
            words.append(context[start:end])
            bases.append(start)
    ids, starts, ends, lengths = tokenize_words(tokenizer, words)
    # Each piece's offsets into its context: its word's start added.
    base = np.repeat(np.asarray(bases, np.int64), lengths)
    offsets = np.stack([starts + base, ends + base], axis=1).astype(np.int32)
    word_ends = np.concatenate([[0], np.cumsum(lengths)])
    bounds = word_ends[np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)]
    return [DocPieces(ids[a:b], offsets[a:b]) for a, b in zip(bounds, bounds[1:])]


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


def check_window_room(max_tokens_for_doc, doc_stride):
    """ValueError when a question leaves no room for context pieces, or for a doc_stride
    below 1."""
    if max_tokens_for_doc < 1:
        raise ValueError(f"no room for context pieces (max_tokens_for_doc="
                         f"{max_tokens_for_doc}); raise max_seq_length or lower "
                         f"max_query_length")
    if doc_stride < 1:
        raise ValueError(f"doc_stride must be >= 1, got {doc_stride}")


def create_features(examples, doc_pieces, question_ids, max_seq_length, doc_stride,
                    max_query_length, cls_id, sep_id, pad_id=0, is_training=False):
    """Windows of every example -> dict of numpy arrays, one row per window:

      token_ids, segment_ids, padding_mask  int32 [N, S]   [CLS] question [SEP] window [SEP]
      start_positions, end_positions        int32 [N]      answer pieces; 0 ([CLS]) when
                                                           the window lacks the answer
      offsets                               int32 [N, S, 2] context characters; -1 elsewhere
      max_context                           bool  [N, S]   piece has its max context here
      example_index                         int32 [N]

    Returns (features, report). In training, an answer no piece overlaps drops the example
    (counted as "answer_not_aligned").
    """
    report = collections.Counter()
    rows = collections.defaultdict(list)
    kept = []                                    # (example index, query, pieces, answer)
    for e, example in enumerate(examples):
        query = list(question_ids[e][:max_query_length])
        if len(question_ids[e]) > max_query_length:
            report["question_truncated"] += 1
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
        check_window_room(max_seq_length - len(query) - 3, doc_stride)
        kept.append((e, query, doc, answer))
    # Every question's windows over its context's pieces and where each piece is read
    # (bert_tf/text/windows.py's ops, the signature's too).
    every_window = windows.row_windows(
        [len(doc.ids) for _, _, doc, _ in kept],
        [max_seq_length - len(query) - 3 for _, query, _, _ in kept], doc_stride)
    queries, window_ids = [], []
    for (e, query, doc, answer), (spans, _, masks) in zip(kept, every_window):
        if len(spans) > 1:
            report["split_into_windows"] += 1
        for w, (start, end) in enumerate(spans):
            length = end - start
            doc_offset = len(query) + 2                    # [CLS] query [SEP]
            queries.append(query)
            window_ids.append(doc.ids[start:start + length])
            offsets = np.full((max_seq_length, 2), -1, np.int32)
            offsets[doc_offset:doc_offset + length] = doc.offsets[start:start + length]
            max_context = np.zeros(max_seq_length, bool)
            max_context[doc_offset:doc_offset + length] = masks[w]
            s_pos = e_pos = 0
            if answer is not None and start <= answer[0] and answer[1] < start + length:
                s_pos, e_pos = answer[0] - start + doc_offset, answer[1] - start + doc_offset
            for key, value in dict(start_positions=s_pos, end_positions=e_pos,
                                   offsets=offsets, max_context=max_context,
                                   example_index=e).items():
                rows[key].append(value)
    if not rows:
        raise ValueError("no features: every example was skipped (see the report)")
    # Every window [CLS] question [SEP] window [SEP], by the project's one packer.
    features = pack_rows(queries, window_ids, max_seq_length, cls_id, sep_id, pad_id)
    features.update({k: np.asarray(v) for k, v in rows.items()})
    for k in ("start_positions", "end_positions", "example_index"):
        features[k] = features[k].astype(np.int32)
    report["features"] = len(features["token_ids"])
    return features, report


def featurize(path, tokenizer, args, is_training):
    """Reads `path` and builds its features. Returns (examples, contexts, dataset,
    features, report)."""
    examples, contexts, dataset, report = read_squad_examples(
        path, args.version_2_with_negative, is_training)
    if not examples:
        raise ValueError(f"{path}: no usable questions ({dict(report)})")
    doc_pieces = tokenize_contexts(tokenizer, contexts)
    question_ids = tokenizer.encode([ex.question for ex in examples])
    features, feature_report = create_features(
        examples, doc_pieces, question_ids, args.max_seq_length, args.doc_stride,
        args.max_query_length, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
        is_training)
    report.update(feature_report)
    print(f"{path}: {dict(sorted(report.items()))}", flush=True)
    return examples, contexts, dataset, features, report
