"""The paper's feature-based choices (section 5.3, Table 7): which outputs of a frozen
encoder a token head reads, and how several are combined. Plain Python, without Keras:
the NER command's flags (tasks/families/ner/config.py) list them before TensorFlow is
imported; the frozen layers that compute them are task_layers.py's `FrozenLastLayers`."""


FEATURE_LAYERS = ("embeddings", "second_to_last", "last", "sum_last_four",
                  "concat_last_four", "sum_all")
FEATURE_HEADS = ("linear", "bilstm")
DEFAULT_FEATURE_LAYERS = "concat_last_four"
# The paper's "two-layer 768-dimensional BiLSTM", read as 768 hidden units per direction:
# an LSTM's dimension is its hidden size (Keras' LSTM(768), torch's nn.LSTM(hidden_size=
# 768)), and a bidirectional one runs two of them, so each position leaves a layer with
# 2 x 768 values.
DEFAULT_LSTM_UNITS = 768


def feature_layer_indexes(feature_layers, num_hidden_layers):
    """(indexes, mixed) of a FEATURE_LAYERS choice for an encoder of L layers: indexes
    into [embedding output, layer 1, ..., layer L]; mixed: the layers are summed with
    learned weights (ScalarMix), else concatenated. "sum_all" is the paper's "weighted sum
    of all 12 layers" of BERT-base: the L transformer layers, not the embeddings."""
    n = num_hidden_layers
    last_four = tuple(range(n - 3, n + 1))
    table = {"embeddings": ((0,), False), "second_to_last": ((n - 1,), False),
             "last": ((n,), False), "sum_last_four": (last_four, True),
             "concat_last_four": (last_four, False), "sum_all": (tuple(range(1, n + 1)), True)}
    if feature_layers not in table:
        raise ValueError(f"feature_layers must be one of {', '.join(FEATURE_LAYERS)}; "
                         f"got {feature_layers!r}")
    indexes, mixed = table[feature_layers]
    needed = {"second_to_last": 2, "sum_last_four": 4, "concat_last_four": 4}
    if n < needed.get(feature_layers, 1):
        raise ValueError(f"feature_layers={feature_layers} needs an encoder of >= "
                         f"{needed[feature_layers]} layers; this one has {n}")
    return indexes, mixed
