"""MultipleChoiceModule: SWAG's export, a context and its endings -> the probability of
each ending and the choice, tokenized in the graph like every export (export/serving.py)."""

import tensorflow as tf

from export.limits import MAX_TEXT_BYTES
from export.request_checks import check_same_batch
from export.serving import TOKENIZED_SPEC, ServingModule, float32


class MultipleChoiceModule(ServingModule):
    """context [batch], endings [batch, C] -> probabilities [batch, C] (softmax over the
    choices), choice [batch] (index of the most probable ending). The model is
    a bert_tf.BertMultipleChoice ({"logits": [batch, C]} from inputs [batch, C, seq]).

    Each choice is packed as [CLS] context [SEP] ending [SEP], as the family's training packs
    [CLS] sent1 [SEP] sent2 + " " + ending [SEP]: put SWAG's shared start (sent2) in front
    of every ending."""

    TEXT_INPUTS = ("context", "endings")

    def __init__(self, model, tokenizer, max_seq_length, num_choices=4,
                 max_text_bytes=MAX_TEXT_BYTES, name=None):
        super().__init__(model, tokenizer, max_seq_length, max_text_bytes, name=name)
        self.num_choices = num_choices

    @classmethod
    def from_run(cls, model, tokenizer, max_seq_length, settings,
                 max_text_bytes=MAX_TEXT_BYTES):
        """swag_config.json's number of choices."""
        return cls(model, tokenizer, max_seq_length, settings["num_choices"], max_text_bytes)

    def text_spec(self):
        return {"context": tf.TensorSpec([None], tf.string, name="context"),
                "endings": tf.TensorSpec([None, self.num_choices], tf.string,
                                         name="endings")}

    def tokenized_spec(self):
        return {n: tf.TensorSpec([None, self.num_choices, None], tf.int32, name=n)
                for n in TOKENIZED_SPEC}

    def example_features(self):
        return {"context": tf.io.FixedLenFeature([], tf.string),
                "endings": tf.io.FixedLenFeature([self.num_choices], tf.string)}

    def features_from_text(self, context, endings):
        check_same_batch({"context": context, "endings": endings}, ("context", "endings"))
        tf.debugging.assert_equal(tf.shape(endings)[1], self.num_choices, message=(
            f"endings must be [batch, {self.num_choices}]: one row of endings per context"))
        return self.preprocessor.choices(context, endings)             # [batch, C, seq]

    def outputs_from_tokens(self, features):
        logits = float32(self.model(features, training=False)["logits"])  # [batch, C]
        probabilities = tf.nn.softmax(logits)
        return {"probabilities": probabilities,
                "choice": tf.argmax(probabilities, axis=-1, output_type=tf.int32)}
