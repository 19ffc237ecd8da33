"""The export a job predicts with: its SavedModel version, its serving_default signature's
inputs (read from saved_model.pb without TensorFlow, and from the loaded signature) and
the outputs a row's lists are cut by."""

import os

from bert_tf.data import storage
from bert_tf.data.errors import InputError


def export_version(model_dir):
    """The SavedModel folder of --model_dir: the folder itself, or its highest numbered
    version (as TF Serving serves a model's base path)."""
    if storage.is_url(model_dir):
        return model_dir
    if os.path.isfile(os.path.join(model_dir, "saved_model.pb")):
        return model_dir
    versions = sorted((int(d) for d in os.listdir(model_dir) if d.isdigit() and
                       os.path.isfile(os.path.join(model_dir, d, "saved_model.pb"))),
                      reverse=True) if os.path.isdir(model_dir) else []
    if not versions:
        raise InputError(f"--model_dir: {model_dir} holds no SavedModel (saved_model.pb, "
                         f"or numbered versions of one: python -m export.saved_model)")
    return os.path.join(model_dir, str(versions[0]))


class LoadedExport:
    """A loaded SavedModel and its serving_default signature (an object, as Beam's shared
    model handle keeps a weak reference to what load_model returns)."""

    def __init__(self, path):
        import tensorflow_text  # noqa: F401  (the exports' tokenizer ops)

        from bert_tf.checkpoints.bundle import load_saved_model
        self.model = load_saved_model(path)
        self.signature = self.model.signatures["serving_default"]


def signature_inputs(signature):
    """{input name: None for a text [batch], C for a list [batch, C]} of a signature."""
    spec = signature.structured_input_signature[1]
    return {name: (None if len(s.shape) == 1 else int(s.shape[1]))
            for name, s in sorted(spec.items())}


def declared_inputs(version):
    """signature_inputs of the serving_default signature as saved_model.pb declares it,
    read without TensorFlow (so a file without the export's columns is refused before
    anything loads): SavedModel.meta_graphs (2) -> MetaGraphDef.signature_def (5, a map)
    -> SignatureDef.inputs (1, a map) -> TensorInfo.tensor_shape (3) -> dim (2) -> size
    (1). None for a URL, or a file this reader cannot follow (the loaded signature is
    checked then)."""
    from bert_tf.base.tfrecord import message_fields

    def fields(data):
        return [(n, v) for n, _, v in message_fields(data)]
    if storage.is_url(version):
        return None
    try:
        with open(os.path.join(version, "saved_model.pb"), "rb") as f:
            data = f.read()
        for graph in (v for n, v in fields(data) if n == 2):
            for entry in (v for n, v in fields(graph) if n == 5):
                entry = dict(fields(entry))
                if entry.get(1) != b"serving_default":
                    continue
                inputs = {}
                for item in (v for n, v in fields(entry[2]) if n == 1):
                    item = dict(fields(item))
                    shape = dict(fields(item[2])).get(3, b"")
                    dims = [dict(fields(d)).get(1, 0) for n, d in fields(shape) if n == 2]
                    inputs[item[1].decode("utf-8")] = None if len(dims) == 1 else \
                        dims[1] - (1 << 64 if dims[1] >= 1 << 63 else 0)
                return dict(sorted(inputs.items()))
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return None


def counted_outputs(signature):
    """(count, names): the outputs that may have a per-call width (TF Serving's dense
    lists, padded to the call's longest, as NER's entities: declared [batch, None, ...],
    or of a rank the signature does not declare) and the [batch] integer `num_...` output
    that counts each row's real entries; (None, ()) without such a count. A row's lists
    are cut to its count (run_shard), so its line does not depend on the rows it shared a
    call with. Without a count, outputs of undeclared shape are taken as they come (the
    embeddings export's, padded to max_seq_length); InputError for declared per-call
    widths without one count."""
    spec = signature.structured_outputs
    counts = [n for n, s in spec.items() if n.startswith("num_") and s.shape.rank == 1
              and s.dtype.is_integer]
    open_width = tuple(sorted(n for n, s in spec.items() if n not in counts and (
        s.shape.rank is None or (s.shape.rank >= 2 and s.shape[1] is None))))
    declared = [n for n in open_width if spec[n].shape.rank is not None]
    if len(counts) == 1:
        return counts[0], open_width
    if declared:
        raise InputError(f"--model_dir: the signature's outputs {', '.join(declared)} are "
                         f"padded per call, and expected one [batch] integer num_... "
                         f"output counting their entries, got {len(counts)} (a windowed "
                         f"classifier exported before its outputs declared their class "
                         f"count: export it again)")
    return None, ()
