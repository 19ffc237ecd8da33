"""ClassifierModule: the classification family's export, text (or a text pair) -> each
label's probability and the label (a regression model: its score), tokenized in the graph
like every export (export/serving.py)."""

import tensorflow as tf

from export.limits import MAX_TEXT_BYTES
from export.serving import ClassifierServing


class ClassifierModule(ClassifierServing):
    """text_a [, text_b] -> probabilities [batch, K] (softmax of the logits), label_id
    [batch], label [batch] (the label's name); a regression model -> score [batch].
    The model is a bert_tf.BertClassifier ({"logits"} or {"score"}); a long text is cut,
    or read in the run's windows (ClassifierServing)."""

    def __init__(self, model, tokenizer, max_seq_length, labels, text_inputs=("text_a",),
                 max_text_bytes=MAX_TEXT_BYTES, name=None, windows=None):
        super().__init__(model, tokenizer, max_seq_length, max_text_bytes, name=name,
                         windows=windows)
        self.TEXT_INPUTS = tuple(text_inputs)
        self.regression = not labels
        if not self.regression:
            self.label_names = tf.constant(list(labels))               # [K]

    @classmethod
    def from_run(cls, model, tokenizer, max_seq_length, settings,
                 max_text_bytes=MAX_TEXT_BYTES):
        """glue_config.json's labels (none for regression), text inputs and windows."""
        return cls(model, tokenizer, max_seq_length,
                   None if settings["regression"] else settings["labels"],
                   settings["text_inputs"], max_text_bytes,
                   windows=cls.windows_of(settings))

    def answer(self, out):
        if self.regression:
            return {"score": out["score"]}
        probabilities = tf.nn.softmax(out["logits"])                  # [batch, K]
        label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {"probabilities": probabilities, "label_id": label_id,
                "label": tf.gather(self.label_names, label_id)}
