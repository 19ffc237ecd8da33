"""extract_features' compact layout (`--output_format=tfrecord`), the one definition its
writer and its readers (the feature-based NER recipe's `--extracted_features`) share.
TF-free (NumPy; tf.data reads the files too).

One tf.train.Example per input line, float32 values as computed:

    linex_index  int64 [1]      the line's index in the input
    token_ids    int64 [n]      the line's word pieces, [CLS] ... [SEP]
    layers       int64 [L]      the transformer layers written, counted from the first
                                (0 .. num_layers - 1: -1 is num_layers - 1)
    shape        int64 [3]      (n, L, H)
    values       float [n*L*H]  token-major: values.reshape(shape)[t, k] is token t's
                                vector in layers[k]
"""

import numpy as np

from bert_tf.base.tfrecord import encode_records, parse_example, read_records

KINDS = {"linex_index": "int", "token_ids": "int", "layers": "int", "shape": "int",
         "values": "float"}


def encode_feature_record(linex_index, token_ids, layers, values):
    """One framed record: `layers` absolute indexes, `values` float [n, L, H]."""
    stacked = np.asarray(values, np.float32)
    return encode_records(
        {"linex_index": np.array([[linex_index]]), "token_ids": np.array([token_ids]),
         "layers": np.array([layers]), "shape": np.array([stacked.shape]),
         "values": stacked.reshape(1, -1)}, KINDS)


def read_feature_records(path):
    """Yields {linex_index, token_ids int32 [n], layers (list), values float32 [n, L, H]}
    of each record of the local file `path`; ValueError naming the file and byte offset
    for a cut or foreign record (another kind of tf.train.Example included)."""
    for offset, data in read_records(path):
        example = parse_example(data)
        shape = example.get("shape")
        if set(example) != set(KINDS) or len(shape) != 3 or \
                [len(example["token_ids"]), len(example["layers"]), int(np.prod(shape))] \
                != [shape[0], shape[1], len(example["values"])]:
            raise ValueError(f"{path}: record at byte {offset} is not an extract_features "
                             f"record ({', '.join(KINDS)}, with values of that shape)")
        yield {"linex_index": int(example["linex_index"][0]),
               "token_ids": example["token_ids"].astype(np.int32),
               "layers": example["layers"].astype(np.int32).tolist(),
               "values": example["values"].reshape(shape.tolist())}
