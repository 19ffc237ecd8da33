"""A prepared tensorflow-datasets text dataset as create_pretraining_data's input
(`--input_tfds=wikipedia/20230601.en`, `c4/en`, ...; `--tfds_data_dir`, `--tfds_split`,
`--tfds_text_field`).

Each example's text field is a document. The split is written once, in the dataset's
order, as a JSON-lines file (one `{"text": ...}` per document) beside the prepared dataset,
in `DATA_DIR/bert_tf_text/`, and the run reads that file as `--input_format=jsonl`: so a
TFDS-sourced run is the same run as on that text given as a file (the same blocks, the same
bytes, for either engine), a rerun reuses the file (and resumes from the shards a previous
run completed), and the workers never import TensorFlow. The file is written under a
temporary name and renamed when whole. Nothing is downloaded: the dataset must be
prepared (`tfds build`, or `download_and_prepare` where it is) in --tfds_data_dir.
"""

import json
import os
import re

from bert_tf.data.errors import InputError

EXPORT_DIR = "bert_tf_text"


def export_path(name, split, text_field, data_dir):
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{name}-{split}-{text_field}")
    return os.path.join(data_dir, EXPORT_DIR, f"{safe}.jsonl")


def _builder(name, data_dir):
    try:
        import tensorflow_datasets as tfds
    except ImportError:     # a runtime dependency; said plainly if it is missing
        raise InputError("--input_tfds needs tensorflow-datasets: pip install "
                         "tensorflow-datasets") from None
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as e:      # unknown name, or no prepared copy of it
        raise InputError(f"--input_tfds={name}: not a dataset prepared in "
                         f"--tfds_data_dir={data_dir} ({type(e).__name__}: "
                         f"{str(e).strip().splitlines()[0][:200]}); prepare it there first "
                         f"(nothing is downloaded here)") from None
    if not builder.is_prepared():
        raise InputError(f"--input_tfds={name}: not prepared in --tfds_data_dir={data_dir} "
                         f"(prepare it there first: nothing is downloaded here)")
    return builder


def plan_export(name, data_dir, split="train", text_field="text"):
    """(path of the split's documents as JSON lines, a function that writes them, or None
    when a previous run wrote them). Nothing is written here: InputError (one line) for a
    dataset not prepared, a split or a field it lacks, an empty split."""
    data_dir = os.path.abspath(os.path.expanduser(data_dir or os.path.join(
        "~", "tensorflow_datasets")))
    path = export_path(name, split, text_field, data_dir)
    if os.path.exists(path):
        return path, None
    builder = _builder(name, data_dir)
    if split not in builder.info.splits:
        raise InputError(f"--tfds_split={split}: {name} has the splits "
                         f"{', '.join(sorted(builder.info.splits))}")
    features = builder.info.features
    if text_field not in features.keys():
        raise InputError(f"--tfds_text_field={text_field}: {name} has no such feature "
                         f"(it has: {', '.join(sorted(features.keys()))})")
    if not builder.info.splits[split].num_examples:
        raise InputError(f"--input_tfds={name}: its {split} split has no examples")
    return path, lambda: _write(builder, split, text_field, path)


def _write(builder, split, text_field, path):
    """The split's documents in the dataset's order, one {"text": ...} per line, under a
    temporary name until whole."""
    import tensorflow_datasets as tfds
    dataset = builder.as_dataset(split=split, shuffle_files=False,
                                 read_config=tfds.ReadConfig(interleave_cycle_length=1))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for example in tfds.as_numpy(dataset):
                text = example[text_field]
                if isinstance(text, bytes):
                    text = text.decode("utf-8", "replace")
                f.write(json.dumps({"text": str(text)}, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
