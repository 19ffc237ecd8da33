"""MultiLabelModule: text_a [, text_b] -> every label's probability and the predicted set,
with the run's per-label thresholds; tokenized in the graph like every export
(export/serving.py)."""

import tensorflow as tf

from export.limits import MAX_TEXT_BYTES
from export.serving import ClassifierServing
from tasks.families.multilabel.metrics import check_thresholds


class MultiLabelModule(ClassifierServing):
    """text_a [, text_b] [batch] -> probabilities [batch, K] (a sigmoid per label),
    predicted [batch, K] (int32 1 where the probability reaches the label's threshold)
    and labels [batch] (the predicted names in class-id order, joined by the run's label
    delimiter; "" for none). The model is a bert_tf.BertClassifier ({"logits"}); a long
    text is cut, or read in the run's windows (ClassifierServing)."""

    def __init__(self, model, tokenizer, max_seq_length, labels, thresholds,
                 text_inputs=("text_a",), delimiter=",", max_text_bytes=MAX_TEXT_BYTES,
                 name=None, windows=None):
        super().__init__(model, tokenizer, max_seq_length, max_text_bytes, name=name,
                         windows=windows)
        check_thresholds(thresholds, labels, "thresholds")
        self.TEXT_INPUTS = tuple(text_inputs)
        self.label_names = tf.constant(list(labels))                      # [K]
        self.thresholds = tf.constant(thresholds, tf.float32)             # [K]
        self.delimiter = delimiter

    @classmethod
    def from_run(cls, model, tokenizer, max_seq_length, settings,
                 max_text_bytes=MAX_TEXT_BYTES):
        """multilabel_config.json's labels, thresholds, text inputs, delimiter and
        windows."""
        return cls(model, tokenizer, max_seq_length, settings["labels"],
                   settings["thresholds"], settings["text_inputs"],
                   settings["label_delimiter"], max_text_bytes,
                   windows=cls.windows_of(settings))

    def answer(self, out):
        probabilities = tf.sigmoid(out["logits"])                         # [batch, K]
        chosen = probabilities >= self.thresholds[None, :]                # [batch, K]
        names = tf.broadcast_to(self.label_names, tf.shape(chosen))
        labels = tf.strings.reduce_join(tf.ragged.boolean_mask(names, chosen), axis=1,
                                        separator=self.delimiter)         # [batch]
        return {"probabilities": probabilities, "predicted": tf.cast(chosen, tf.int32),
                "labels": labels}
