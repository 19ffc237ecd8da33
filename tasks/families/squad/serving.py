"""SquadModule: SQuAD's export, question + context -> answer, computed in the graph with
the ops data.py's training features run (graph_words.word_pieces, windows.pair_windows)
and postprocess.py's decoding (bert_tf/text/answers.py):

1. the question's pieces, cut at max_query_length; the context split on run_squad's
   whitespace, each word tokenized alone with its offsets;
2. doc-stride windows over the context pieces ([CLS] question [SEP] window [SEP]), as
   many as the context needs (a long context is windowed, never cut);
3. max context: a piece in several windows counts only in the window where
   min(left, right) + 0.01 * window length is largest (the first on ties);
4. per window, the n_best_size best starts (context pieces with their max context) and
   ends (context pieces); pairs with start <= end < start + max_answer_length; the best
   start + end logit over all windows (first in window, start rank, end rank order on
   ties, as the stable sort of the Python decoder);
5. v2.0: null score = min over windows of start[CLS] + end[CLS]; no answer when
   null - best > null_score_diff_threshold.

Outputs, per question: answer (tf.string, the exact characters of the context), score
(start + end logit; the null score when there is no answer; -inf when nothing could be
scored), start_char, end_char (int32 character offsets into the context, end exclusive;
-1 for no answer), and for v2.0 models is_impossible and null_score_diff.
serve_tokenized returns the start and end logits of the windows it is given.
"""

import tensorflow as tf

from bert_tf.text.batching import run_by_length
from bert_tf.text.words import SQUAD_WHITESPACE
from bert_tf.text import answers, graph_words, windows
from export.limits import MAX_TEXT_BYTES
from export.request_checks import check_same_batch
from export.serving import ServingModule, float32
from tasks.families.squad.config import WINDOW_DEFAULTS, check_windows


class SquadModule(ServingModule):
    """question, context [batch] -> answer; see the module docstring."""

    TEXT_INPUTS = ("question", "context")

    def __init__(self, model, tokenizer, max_seq_length,
                 doc_stride=WINDOW_DEFAULTS["doc_stride"],
                 max_query_length=WINDOW_DEFAULTS["max_query_length"],
                 n_best_size=WINDOW_DEFAULTS["n_best_size"],
                 max_answer_length=WINDOW_DEFAULTS["max_answer_length"],
                 version_2_with_negative=WINDOW_DEFAULTS["version_2_with_negative"],
                 null_score_diff_threshold=WINDOW_DEFAULTS["null_score_diff_threshold"],
                 max_text_bytes=MAX_TEXT_BYTES, name=None):
        super().__init__(model, tokenizer, max_seq_length, max_text_bytes, name=name)
        check_windows(max_seq_length, max_query_length, doc_stride, n_best_size,
                      max_answer_length, flags=False)
        self.doc_stride = int(doc_stride)
        self.max_query_length = int(max_query_length)
        self.n_best_size = int(n_best_size)
        self.max_answer_length = int(max_answer_length)
        self.version_2_with_negative = bool(version_2_with_negative)
        self.null_score_diff_threshold = float(null_score_diff_threshold)
        self.whitespace = SQUAD_WHITESPACE

    @classmethod
    def from_run(cls, model, tokenizer, max_seq_length, settings,
                 max_text_bytes=MAX_TEXT_BYTES):
        """squad_config.json's window and decoding settings (config.py's WINDOW_DEFAULTS'
        keys; one the file lacks: its default)."""
        return cls(model, tokenizer, max_seq_length, max_text_bytes=max_text_bytes,
                   **{key: settings.get(key, default)
                      for key, default in WINDOW_DEFAULTS.items()})

    def outputs_from_tokens(self, features):
        out = self.model(features, training=False)
        return {"start_logits": float32(out["start_logits"]),
                "end_logits": float32(out["end_logits"])}

    # -- text -> windows ----------------------------------------------------------------

    def _windows(self, question, context):
        """Windows of every question: model inputs [N, seq] and what decoding needs
        (bert_tf/text/windows.py's pair_windows over graph_words.word_pieces: the ops
        training's features run too)."""
        query = self.tokenizer(question).with_row_splits_dtype(tf.int64)
        pieces, begin, end = graph_words.word_pieces(self.tokenizer, context, self.whitespace)
        features, layout = windows.pair_windows(self.packer, query[:, :self.max_query_length],
                                                pieces, self.doc_stride)
        return features, dict(layout, piece_bytes=(begin.flat_values, end.flat_values))

    # -- decoding ------------------------------------------------------------------------

    def outputs_from_text(self, question, context):
        check_same_batch({"question": question, "context": context}, self.TEXT_INPUTS)
        features, w = self._windows(question, context)
        # The model runs on length-sorted windows cut to their longest; the logits come
        # back padded to [N, seq] with 0 where in_doc is False (past every window's end).
        logits = run_by_length(self.outputs_from_tokens, features,
                               per_token=("start_logits", "end_logits"))
        start_logits, end_logits = logits["start_logits"], logits["end_logits"]  # [N, seq]
        batch = tf.shape(question, out_type=tf.int64)[0]
        example, in_doc = w["example"], w["in_doc"]
        k = min(self.n_best_size, self.packer.seq_length)

        # The answer: bert_tf/text/answers.py's decoding, the one evaluation runs.
        found = answers.candidates(start_logits, end_logits, in_doc & w["max_context"],
                                   in_doc, k, self.max_answer_length)
        chosen = answers.best(found, example, batch)
        has_answer, best, window = chosen["has_answer"], chosen["score"], chosen["window"]
        start, end = chosen["start"], chosen["end"]
        piece_of = lambda position: answers.gather_or(
            tf.reshape(w["piece"], [-1]), window * self.packer.seq_length +
            tf.cast(position, tf.int64), has_answer, 0)
        start_byte = answers.gather_or(w["piece_bytes"][0], piece_of(start), has_answer, 0)
        end_byte = answers.gather_or(w["piece_bytes"][1], piece_of(end), has_answer, 0)
        rows = tf.range(batch)
        answer = graph_words.substrings(context, rows, start_byte, end_byte)
        start_char = graph_words.byte_to_char(context, rows, start_byte)
        end_char = graph_words.byte_to_char(context, rows, end_byte)
        score = best                                                       # -inf: none

        outputs = {}
        impossible = ~has_answer
        if self.version_2_with_negative:
            null = answers.null_scores(start_logits, end_logits, example, batch)
            diff = tf.where(has_answer, null - best, float("inf"))
            impossible = diff > self.null_score_diff_threshold
            score = tf.where(impossible, null, score)
            outputs["is_impossible"] = impossible
            outputs["null_score_diff"] = float32(diff)
        outputs.update(
            answer=tf.where(impossible, "", answer),
            score=float32(score),
            start_char=tf.cast(tf.where(impossible, tf.constant(-1, tf.int64), start_char),
                               tf.int32),
            end_char=tf.cast(tf.where(impossible, tf.constant(-1, tf.int64), end_char),
                             tf.int32))
        return outputs
