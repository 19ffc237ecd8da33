"""NerModule: NER's export, raw text -> named entities, computed in the graph with the
ops task.py's training features run (bert_tf/text/windows.py's `unit_windows`) and the
rules of its word_tags and entities:

1. words as google's BasicTokenizer cuts them (bert_tf.text.words: whitespace, and every
   punctuation character and CJK ideograph a word of its own), with their offsets;
2. each word tokenized alone; a word the tokenizer deletes becomes one [UNK], a word of
   more pieces than fit is cut;
3. windows of at most max_seq_length - 2 pieces, of whole words, starting `doc_stride`
   pieces apart (bert_tf/text/windows.py's `windows`, the op training's features run
   too; a run that recorded no doc_stride: consecutive parts), each packed [CLS] pieces
   [SEP]: long texts are read whole;
4. each word's tag = argmax of the logits at its first piece, in the window where it has
   the most context (google's SQuAD rule: bert_tf/text/windows.py's `max_context`);
5. entities from the word tags with conlleval's chunk rules (tasks/families/ner/conlleval.py), their
   characters from the first word's start to the last word's end.

Outputs are dense, as TF Serving returns them: label, text [batch, max entities]
(tf.string), start_char, end_char [batch, max entities] (int32 character offsets, end
exclusive; -1 in the padding), num_entities [batch].
"""

import numpy as np
import tensorflow as tf

from bert_tf.text import words
from bert_tf.text.batching import run_by_length
from bert_tf.text import graph_words, windows
from export.limits import MAX_TEXT_BYTES
from export.serving import ServingModule, float32


def chunk_tables(labels):
    """conlleval's chunk decisions between every two tags, read off tasks.families.ner.conlleval.chunks
    itself: (starts, ends, types) with starts/ends bool [K + 1, K + 1] indexed [previous
    tag, tag] (index K = the sentence boundary, an "O") and types [K + 1] the chunk type of
    each tag. starts[a, b]: a chunk starts at b after a; ends[a, b]: a chunk that is open
    at a ends before b."""
    from tasks.families.ner import conlleval
    names = list(labels) + ["O"]
    k = len(names)
    starts = np.zeros([k, k], bool)
    ends = np.zeros([k, k], bool)
    for a in range(k):
        for b in range(k):
            found = conlleval.chunks([names[a], names[b]])
            starts[a, b] = any(first == 1 for first, _, _ in found)
            ends[a, b] = any(first == 0 and end == 1 for first, end, _ in found)
    types = [conlleval.split_tag(name)[1] for name in names]
    return starts, ends, types


def chunk_spans(tags, row_splits, starts, ends, boundary):
    """Entities of tag sequences, with conlleval's rules, vectorised.

    tags: int [W] tag ids of all words, rows given by row_splits [batch + 1] (int64);
    starts, ends: the bool tables of `chunk_tables`; boundary: the boundary tag's index.
    Returns (first, end) int64 [E]: global word indexes of each entity, end exclusive,
    in order. A chunk opens where starts[previous, tag] and closes before the next word
    where ends[previous, tag] (or at the end of its row); conlleval never opens a chunk
    while one is open without closing it, so this is its left-to-right scan.
    """
    tags = tf.cast(tags, tf.int64)
    n = tf.size(tags, out_type=tf.int64)
    index = tf.range(n)
    rows = graph_words.row_ids(row_splits)
    first_in_row = tf.equal(index, tf.gather(row_splits, rows))
    boundary = tf.constant(boundary, tf.int64)
    previous = tf.where(first_in_row, boundary, tf.concat([[boundary], tags], 0)[:-1])
    pair = tf.stack([previous, tags], axis=1)                              # [W, 2]
    opens = tf.gather_nd(starts, pair)
    closes_before = tf.gather_nd(ends, pair) & ~first_in_row
    first = tf.boolean_mask(index, opens)                                  # [E]
    # Where chunks may close: before a closing word, or at the end of each row.
    closings = tf.sort(tf.concat([tf.boolean_mask(index, closes_before),
                                  row_splits[1:]], 0))
    end = tf.gather(closings, tf.searchsorted(closings, first, side="right"))
    return first, end


class NerModule(ServingModule):
    """text [batch] -> entities; see the module docstring. serve_tokenized returns the
    per-piece logits [batch, seq, K], label_id and label [batch, seq]."""

    def __init__(self, model, tokenizer, max_seq_length, labels,
                 max_text_bytes=MAX_TEXT_BYTES, name=None, doc_stride=None):
        super().__init__(model, tokenizer, max_seq_length, max_text_bytes, name=name)
        room = max_seq_length - 2
        self.doc_stride = room if doc_stride is None else min(int(doc_stride), room)
        self.label_names = tf.constant(list(labels))                      # [K]
        starts, ends, types = chunk_tables(labels)
        self.chunk_starts = tf.constant(starts)
        self.chunk_ends = tf.constant(ends)
        self.chunk_types = tf.constant(types)
        self.boundary = len(labels)
        self.separators = words.separators()
        self.single_ranges = words.single_character_ranges()

    @classmethod
    def from_run(cls, model, tokenizer, max_seq_length, settings,
                 max_text_bytes=MAX_TEXT_BYTES):
        """ner_config.json's tags and doc_stride (none recorded: consecutive parts)."""
        return cls(model, tokenizer, max_seq_length, settings["labels"], max_text_bytes,
                   doc_stride=settings.get("doc_stride"))

    def outputs_from_tokens(self, features):
        logits = float32(self.model(features, training=False)["logits"])  # [batch, seq, K]
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"logits": logits, "label_id": label_id,
                "label": tf.gather(self.label_names, label_id)}

    def text_windows(self, text):
        """Raw texts [batch] -> the windows the model reads and how words map onto them:
        {features: packed int32 [P, seq], word_splits int64 [batch + 1], begin, end int64
        [W] (byte offsets of each word), piece_splits int64 [W + 1] (each word's pieces),
        part_first, part_end int64 [P] (each window's words, global, end exclusive), part
        int64 [W] (the window each word is read from), position int64 [W] (its first
        piece's column there)}."""
        text_words, begin, end = graph_words.split_words(text, self.separators,
                                                          self.single_ranges)
        text_words = text_words.with_row_splits_dtype(tf.int64)
        # Every word tokenized alone, windows of whole words and each word's max-context
        # window (bert_tf/text/windows.py's unit_windows, the op training runs too).
        pieces = self.tokenizer(text_words.flat_values).with_row_splits_dtype(tf.int64)
        packed, layout = windows.unit_windows(
            self.packer, tf.RaggedTensor.from_row_splits(pieces, text_words.row_splits,
                                                         validate=False),
            self.doc_stride, self.tokenizer.unk_id)
        return {"features": packed, "word_splits": text_words.row_splits,
                "begin": begin.flat_values, "end": end.flat_values,
                "piece_splits": layout["piece_splits"], "part_first": layout["first"],
                "part_end": layout["end"], "part": layout["part"],
                "position": layout["position"]}

    def outputs_from_text(self, text):
        w = self.text_windows(text)
        word_splits, begin, end = w["word_splits"], w["begin"], w["end"]
        logits = run_by_length(
            lambda f: {"logits": float32(self.model(f, training=False)["logits"])},
            w["features"], per_token=("logits",))["logits"]               # [P, seq, K]

        # Each word's tag: the argmax at its first piece, in its max-context window.
        word_logits = tf.gather_nd(logits, tf.stack([w["part"], w["position"]], axis=1))
        tags = tf.argmax(word_logits, axis=-1, output_type=tf.int64)      # [W]

        first, last = chunk_spans(tags, word_splits, self.chunk_starts, self.chunk_ends,
                                  self.boundary)
        last = last - 1                                                    # inclusive
        rows = tf.gather(graph_words.row_ids(word_splits), first)         # [E]
        start_byte, end_byte = tf.gather(begin, first), tf.gather(end, last)
        nrows = tf.shape(text, out_type=tf.int64)[0]
        as_int32 = lambda x: tf.cast(x, tf.int32)
        return {
            "label": graph_words.pad_rows(
                tf.gather(self.chunk_types, tf.gather(tags, last)), rows, nrows, ""),
            "text": graph_words.pad_rows(
                graph_words.substrings(text, rows, start_byte, end_byte), rows, nrows, ""),
            "start_char": as_int32(graph_words.pad_rows(
                graph_words.byte_to_char(text, rows, start_byte), rows, nrows, -1)),
            "end_char": as_int32(graph_words.pad_rows(
                graph_words.byte_to_char(text, rows, end_byte), rows, nrows, -1)),
            "num_entities": as_int32(tf.math.bincount(
                as_int32(rows), minlength=as_int32(nrows), maxlength=as_int32(nrows))),
        }
