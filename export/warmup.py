"""TF Serving's warm-up records: `assets.extra/tf_serving_warmup_requests` in every export.

A server that finds this file replays its requests when it loads a version, before that
version takes traffic, so the first user request does not pay for graph initialisation
(TF Serving's "SavedModel Warmup"). The file is a TFRecord of `PredictionLog` protos,
each holding one `PredictRequest`. Here there are two real requests per signature:
serving_default on raw text, serve_tokenized on the same texts packed, and serve_examples
on the same texts as tf.Examples.

The protos are written field by field (tensorflow_serving/apis/prediction_log.proto,
predict.proto and model.proto name the field numbers used below), so exporting needs no
tensorflow-serving-api. The tests read the file back with that package's own classes.
"""

import numpy as np
import tensorflow as tf

from bert_tf.base.tfrecord import varint_bytes

WARMUP_FILE = "assets.extra/tf_serving_warmup_requests"

# Two rows per text input, as the signatures take them.
TEXTS = {
    "text": ["The quick brown fox jumps over the lazy dog.",
             "Paris is the [MASK] of France."],
    "text_a": ["He said hello to everyone.", "It rained all day in the city."],
    "text_b": ["He greeted the people in the room.", "The sun shone over the river."],
    "question": ["Where does John Smith live?", "Who was born in Paris?"],
    "context": ["John Smith lives in New York with his family.",
                "Marie Curie was born in Warsaw and worked in Paris."],
    "endings": [["opens the door.", "eats the river.", "flies to the moon.", "is blue."],
                ["walks home.", "sings a tree.", "drinks the sky.", "is a number."]],
}

# Field numbers: PredictionLog.predict_log = 6; PredictLog.request = 1;
# PredictRequest.model_spec = 1, .inputs = 2 (map entries: key = 1, value = 2);
# ModelSpec.name = 1, .signature_name = 3.
_PREDICTION_LOG_PREDICT, _PREDICT_LOG_REQUEST = 6, 1
_REQUEST_MODEL_SPEC, _REQUEST_INPUTS = 1, 2
_SPEC_NAME, _SPEC_SIGNATURE = 1, 3


def _field(number, payload):
    """A length-delimited field (wire type 2): strings, bytes and messages."""
    return varint_bytes(number << 3 | 2) + varint_bytes(len(payload)) + payload


def prediction_log(model_name, signature_name, inputs):
    """One serialized PredictionLog holding a PredictRequest of `inputs` ({name: array})."""
    spec = _field(_SPEC_NAME, model_name.encode()) + \
        _field(_SPEC_SIGNATURE, signature_name.encode())
    request = _field(_REQUEST_MODEL_SPEC, spec)
    for name in sorted(inputs):
        value = np.asarray(inputs[name])
        # Object arrays hold strings (an empty one says nothing of its type by itself).
        tensor = tf.make_tensor_proto(
            value, dtype=tf.string if value.dtype == object else None).SerializeToString()
        request += _field(_REQUEST_INPUTS, _field(1, name.encode()) + _field(2, tensor))
    return _field(_PREDICTION_LOG_PREDICT, _field(_PREDICT_LOG_REQUEST, request))


def requests(module):
    """(signature name, {input: np.ndarray}) pairs: two real rows for each signature of a
    ServingModule."""
    texts = {name: TEXTS[name] for name in module.text_spec()}
    features = module.features_from_text(**{k: tf.constant(v) for k, v in texts.items()})
    tokenized = {k: np.asarray(v, np.int32) for k, v in features.items()}

    def example(row):
        feature = {}
        for name, values in texts.items():
            value = values[row] if isinstance(values[row], list) else [values[row]]
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[v.encode("utf-8") for v in value]))
        return tf.train.Example(features=tf.train.Features(feature=feature))

    examples = [example(row).SerializeToString() for row in range(2)]
    return [("serving_default", {k: np.array(v, dtype=object) for k, v in texts.items()}),
            ("serve_tokenized", tokenized),
            ("serve_examples", {"examples": np.array(examples, dtype=object)})]


def write_warmup(module, saved_model_dir, model_name):
    """Writes saved_model_dir/assets.extra/tf_serving_warmup_requests for `module`."""
    path = f"{saved_model_dir}/{WARMUP_FILE}"
    tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
    with tf.io.TFRecordWriter(path) as writer:
        for signature, inputs in requests(module):
            writer.write(prediction_log(model_name, signature, inputs))
    return path
