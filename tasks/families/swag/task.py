"""SWAG (Zellers et al., 2018): choose the ending of a sentence among four. The family:
reader, preprocessing, metrics, `SwagTask` for tasks/driver.py (serving:
serving.py's MultipleChoiceModule; command line: __main__.py, also `python -m tasks.swag`).

    python -m tasks.swag --data_dir=swagaf/data --init_checkpoint=MODEL_DIR \\
        --output_dir=runs/swag --do_train --do_eval --do_predict

Data: the official CSV files (train.csv, val.csv, test.csv; or --train_file/--dev_file/
--test_file), read by column name: sent1, sent2, ending0..ending3, label (absent from
test.csv); the other columns (the unnamed row index, video-id, fold-ind, startphrase,
gold-source) are not needed. Bad rows are skipped, counted and reported (--bad_rows=skip)
or stop the run with one line naming file and line (--bad_rows=error).

Model, as in the BERT paper: each choice is packed as [CLS] sent1 [SEP] sent2 ending_i
[SEP]; inputs are [batch, 4, seq]; the shared encoder reads the 4 * batch sequences; a
dense layer turns each [CLS] vector into one score; softmax over the four scores; accuracy.

--do_predict writes test_results.tsv: the test row number, the predicted ending (0-3) and
the four probabilities. The run's directory holds swag_config.json, bert_config.json,
vocab.txt and best/last weights (bert_tf/models/run_dir.py); `bert_tf.load_task_model` rebuilds
the model (bert_tf.BertMultipleChoice) from them and `MultipleChoicePreprocessor` the raw
text -> inputs step.
"""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from bert_tf.text import batching
from bert_tf.base.files import atomic_write
from bert_tf.text.preprocessor import BertPreprocessor
from bert_tf.models.task_models import BertMultipleChoice, loss_scaled
from tasks import driver
from tasks.families.swag.serving import MultipleChoiceModule
from tasks.task import Task, family
from tasks.families.swag.config import SwagConfig
from tasks.keras_metrics import ConfusionMatrixMetric
from tasks.rows import DataError, RowReport, file_records, finish_report, header_cells
from tasks.outputs import predict_outputs, softmax

NUM_CHOICES = 4
ENDINGS = tuple(f"ending{i}" for i in range(NUM_CHOICES))
SPLIT_FILES = {"train": "train.csv", "dev": "val.csv", "test": "test.csv"}


@dataclasses.dataclass
class SwagExample:
    """context: sent1; start: sent2 (the first words of the ending, shared by all four);
    endings: four strings; label: 0-3 or None (test). guid: "file:line" for labelled rows,
    the 0-based row number for test rows."""
    guid: str
    context: str
    start: str
    endings: list
    label: int = None


def read_swag_csv(path, with_labels=True, policy="skip"):
    """An official SWAG CSV -> (examples, RowReport)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: file not found")
    report = RowReport(path, policy)
    examples = []
    rows = file_records(path, ".csv")
    header = header_cells(rows, path)
    needed = ("sent1", "sent2") + ENDINGS + (("label",) if with_labels else ())
    missing = [name for name in needed if name not in header]
    if missing:
        raise DataError(f"{path}:1: no column {missing[0]!r} in the header "
                        f"({', '.join(repr(h) for h in header)})")
    index = {name: header.index(name) for name in needed}
    for record in rows:
        report.rows += 1
        where = f"{path}:{record.line}"
        fields = record.value
        if record.error:
            report.bad(where, "malformed", record.error)
            continue
        if len(fields) != len(header):
            report.bad(where, "malformed",
                       f"expected {len(header)} fields, found {len(fields)}")
            continue
        context = fields[index["sent1"]]
        endings = [fields[index[name]] for name in ENDINGS]
        empty = [name for name, text in zip(("sent1",) + ENDINGS, [context] + endings)
                 if not text.strip()]
        if empty:
            report.bad(where, "empty_text", f"empty {empty[0]}")
            continue
        label = None
        if with_labels:
            raw = fields[index["label"]].strip()
            if raw not in ("0", "1", "2", "3"):
                report.bad(where, "unknown_label", f"label {raw!r} is not 0, 1, 2 or 3")
                continue
            label = int(raw)
        guid = where if with_labels else str(report.rows - 1)
        examples.append(SwagExample(guid, context, fields[index["sent2"]], endings,
                                    label))
    return examples, report


# ----------------------------------------------------------------------------- inputs

class MultipleChoicePreprocessor(BertPreprocessor):
    """Raw text -> the multiple-choice model's inputs, in TensorFlow ops only:

        inputs = preprocessor(context, start, endings)
        # context, start: tf.string [batch]; endings: tf.string [batch, num_choices]
        # -> {token_ids, segment_ids, padding_mask}: int32 [batch, num_choices, seq_length]

    Choice i is packed as [CLS] context [SEP] start + " " + ending_i [SEP] with google's
    fine-tuning truncation (the longer side loses its last tokens first).
    """

    def __init__(self, tokenizer, seq_length, num_choices=NUM_CHOICES, name=None):
        super().__init__(tokenizer, seq_length, name=name)
        self.num_choices = num_choices

    def __call__(self, context, start, endings):
        c = self.num_choices
        second = tf.strings.join([tf.repeat(start, c), tf.reshape(endings, [-1])],
                                 separator=" ")                        # [batch * C]
        return self.choices(context, tf.reshape(second, [-1, c]))


def make_dataset(examples, preprocessor, batch_size, training=False, seed=0,
                 length_batching="off"):
    """tf.data of (inputs [B, C, L], {"logits": label}[, {"logits": weight}]), as
    tasks.families.classification.task.make_dataset: training batches are shuffled and repeated; evaluation ones
    padded to whole batches with weight-0 examples."""
    n = len(examples)
    contexts = [e.context for e in examples]
    starts = [e.start for e in examples]
    endings = [list(e.endings) for e in examples]
    labels = np.asarray([e.label or 0 for e in examples], np.int32)
    weights = np.ones(n, np.float32)
    if not training:
        pad = -n % batch_size
        contexts, starts = contexts + [""] * pad, starts + [""] * pad
        endings += [[""] * NUM_CHOICES] * pad
        labels = np.concatenate([labels, np.zeros(pad, np.int32)])
        # Real examples weigh slots / n: Keras' val_loss then averages over them only.
        weights = np.concatenate([weights * (n + pad) / n, np.zeros(pad, np.float32)])
    texts = (tf.constant(contexts, tf.string), tf.constant(starts, tf.string),
             tf.constant(endings, tf.string))
    ds = tf.data.Dataset.from_tensor_slices((texts, labels, weights))
    if training:
        ds = ds.shuffle(n, seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(batch_size, drop_remainder=True)

    def pack(texts, label, weight):
        inputs = preprocessor(*texts)
        return (inputs, {"logits": label}) if training else \
            (inputs, {"logits": label}, {"logits": weight})
    ds = ds.map(pack, num_parallel_calls=tf.data.AUTOTUNE)
    ds = batching.rebatch(ds, batch_size, length_batching, preprocessor.packer.seq_length,
                          drop_remainder=True, seed=seed)
    return batching.finish(ds)


# ----------------------------------------------------------------------------- model

def compile_multiple_choice(model, optimizer, jit_compile=False):
    import keras
    model.compile(
        optimizer=loss_scaled(model, optimizer),
        loss={"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
        weighted_metrics={"logits": [ConfusionMatrixMetric("accuracy", NUM_CHOICES)]},
        jit_compile=jit_compile)
    return model


def postprocess(outputs):
    """{"logits": [N, C]} -> {"label_ids": [N] (chosen ending), "probabilities": [N, C]}."""
    probabilities = softmax(outputs["logits"])
    return {"label_ids": probabilities.argmax(-1), "probabilities": probabilities}


def score_predictions(predictions, gold):
    from tasks import metrics
    gold = np.asarray(gold, np.int64)
    p = predictions["probabilities"][np.arange(len(gold)), gold]
    return {"accuracy": metrics.accuracy(gold, predictions["label_ids"]),
            "loss": float(-np.mean(np.log(np.maximum(p, 1e-12))))}


def write_predictions(path, examples, predictions):
    """TSV: index, prediction (0-3), probability_0..3. Temp name, then rename."""
    with atomic_write(path) as f:
        f.write("\t".join(["index", "prediction"] +
                          [f"probability_{i}" for i in range(NUM_CHOICES)]) + "\n")
        for i, example in enumerate(examples):
            row = [example.guid, str(int(predictions["label_ids"][i]))]
            row += [f"{p:.6f}" for p in predictions["probabilities"][i]]
            f.write("\t".join(row) + "\n")


@family
class SwagTask(Task):
    """SWAG for tasks.driver: CSV rows in, four-way choice out."""

    export_name = "swag"           # python -m export.saved_model --task swag
    model_class = BertMultipleChoice
    config_class = SwagConfig
    serving_module = MultipleChoiceModule

    def _path(self, config, split):
        """(flag, path) of a split's CSV: --SPLIT_file, else its file in --data_dir."""
        path = {"train": config.train_file, "dev": config.dev_file,
                "test": config.test_file}[split]
        if path:
            return f"--{split}_file", path
        if not config.data_dir:
            raise ValueError(f"pass --data_dir or --{split}_file")
        return "--data_dir", os.path.join(config.data_dir, SPLIT_FILES[split])

    def _read(self, config, split, with_labels=True):
        examples, report = read_swag_csv(self._path(config, split)[1], with_labels,
                                         config.bad_rows)
        return finish_report(report, examples)

    def training_files(self, config):
        return [self._path(config, split)
                for split in ("train", "dev")[:2 if config.do_eval else 1]]

    def text_segments(self, config):
        return 2    # the context, then the start of the sentence and one ending

    def read_train(self, config, tokenizer):
        return self._read(config, "train")

    def settings(self, config, train):
        return BertMultipleChoice.settings(NUM_CHOICES, config.max_seq_length,
                                                config.do_lower_case)

    def read_eval(self, config, settings, tokenizer):
        return self._read(config, "dev") if config.do_eval else None

    def build_model(self, encoder, config, settings, train=None):
        return BertMultipleChoice(encoder, NUM_CHOICES)

    def written_files(self, config):
        return ("test_results.tsv",)

    def compile(self, model, optimizer, config, jit_compile):
        compile_multiple_choice(model, optimizer, jit_compile)

    def monitor(self, settings):
        return "accuracy", "max"

    def main_metric(self, config):
        return "eval_accuracy", "max"

    def dev_file_flag(self, config):
        return "dev_file"        # given, it replaces DATA_DIR/val.csv

    def dataset(self, examples, config, settings, training):
        return make_dataset(examples, self.preprocessor(config, MultipleChoicePreprocessor),
                            driver.batch_size(config, training),
                            training=training, seed=config.seed,
                            length_batching=driver.length_batching(config, training))

    def evaluate(self, model, examples, config, settings):
        outputs = predict_outputs(model, self.dataset(examples, config, settings, False),
                                       len(examples))
        values = score_predictions(postprocess(outputs), [e.label for e in examples])
        return dict({f"eval_{k}": v for k, v in values.items()},
                    eval_num_examples=len(examples))

    def predict(self, model, config, settings, tokenizer, evaluation):
        test = self._read(config, "test", with_labels=False)
        outputs = predict_outputs(
            model, make_dataset(test, self.preprocessor(config, MultipleChoicePreprocessor),
                                config.predict_batch_size,
                                length_batching=driver.length_batching(config, False)),
            len(test))
        write_predictions(os.path.join(config.output_dir, "test_results.tsv"), test,
                          postprocess(outputs))
        print(f"test: {len(test)} predictions written to {config.output_dir}", flush=True)
        return {}
