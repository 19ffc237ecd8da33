"""The pretraining shards' schema, TF-free: google-research/bert's feature names, their
lengths and dtypes, and the names our batches give them. The one definition read by the
shard writer (data/example_codec.py), the tf.data reader (training/data.py, which
builds its `tf.io.FixedLenFeature`s from it) and the NumPy reader (training/fit.py).

    input_ids, input_mask, segment_ids        int64 [max_seq_length]
    masked_lm_positions, masked_lm_ids        int64 [max_predictions_per_seq]
    masked_lm_weights                         float [max_predictions_per_seq]
    next_sentence_labels                      int64 [1]   (0 = B is next, 1 = random)

Shards written by google's `create_pretraining_data.py` and by ours read the same way.
Batches use the encoder's input names (`token_ids`, `segment_ids`, `padding_mask`) plus
the masked-LM and next-sentence fields, all int32 except the weights.
"""

import dataclasses

from bert_tf.base.input_names import INPUT_NAMES, PADDING_MASK, SEGMENT_IDS, TOKEN_IDS

SEQ_LENGTH = "max_seq_length"
PREDICTIONS = "max_predictions_per_seq"


@dataclasses.dataclass(frozen=True)
class Feature:
    name: str             # google's feature name in the shards
    input: str            # our name for it in batches
    length: str | None    # the flag that sets its length; None: a single value
    kind: str             # "int" (an Int64List, int64) or "float" (a FloatList, float32)

    @property
    def dtype(self):
        return "float32" if self.kind == "float" else "int64"


# In google's order (the order the readers check a record's features in).
FEATURES = (
    Feature("input_ids", TOKEN_IDS, SEQ_LENGTH, "int"),
    Feature("input_mask", PADDING_MASK, SEQ_LENGTH, "int"),
    Feature("segment_ids", SEGMENT_IDS, SEQ_LENGTH, "int"),
    Feature("masked_lm_positions", "masked_lm_positions", PREDICTIONS, "int"),
    Feature("masked_lm_ids", "masked_lm_ids", PREDICTIONS, "int"),
    Feature("masked_lm_weights", "masked_lm_weights", PREDICTIONS, "float"),
    Feature("next_sentence_labels", "next_sentence_labels", None, "int"),
)
# Beside those, only in the shards of create_pretraining_data --masking=none with a Chinese
# word segmenter: per position 1 where the token continues the word before it (a '##'
# piece or a later character of a segmented word), 0 elsewhere. Dynamic whole-word
# masking reads these marks instead of the vocabulary's '##' (data/segmenters.py).
WORD_CONTINUES = Feature("word_continues", "word_continues", SEQ_LENGTH, "int")
BY_INPUT = {f.input: f for f in FEATURES}
# {google's name: "int" | "float"}: what the TFRecord codec (bert_tf/base/tfrecord.py) encodes.
KINDS = {f.name: f.kind for f in FEATURES}
# A batch's names, in the order batches list them: what BertPretrainer takes, then what
# the losses compare its outputs with.
MODEL_INPUTS = INPUT_NAMES + ("masked_lm_positions",)
LABELS = ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")
BATCH_NAMES = MODEL_INPUTS + LABELS


def lengths(max_seq_length, max_predictions_per_seq):
    """{google's name: the number of values each record holds}."""
    values = {SEQ_LENGTH: max_seq_length, PREDICTIONS: max_predictions_per_seq, None: 1}
    return {f.name: values[f.length] for f in FEATURES}


def to_batch(features, to_int32):
    """{google's name: [batch, length] values} -> {our name: values} in BATCH_NAMES order:
    ints through `to_int32` (TPUs and most kernels want int32, and ids fit), a single
    value per record as [batch]. Works on tensors and NumPy arrays alike."""
    batch = {}
    for name in BATCH_NAMES:
        feature = BY_INPUT[name]
        values = features[feature.name]
        if feature.kind == "int":
            values = to_int32(values)
        batch[name] = values[:, 0] if feature.length is None else values
    return batch
