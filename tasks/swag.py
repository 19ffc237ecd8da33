"""SWAG (Zellers et al., 2018): choose the ending of a sentence among four.

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
vocab.txt and best/last weights (tasks/task_dir.py); `load_multiple_choice` rebuilds the
model from them and `MultipleChoicePreprocessor` the raw text -> inputs step.
"""

import csv
import dataclasses
import os

import numpy as np
import tensorflow as tf

from bert_tf import batching
from bert_tf.flags import run_command
from tasks import common, glue, task_dir
from tasks.glue import DataError, RowReport, finish_report, numbered_rows

TASK = "swag"
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
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise DataError(f"{path}: empty file") from None
        except csv.Error as e:
            raise DataError(f"{path}:1: {e}") from None
        needed = ("sent1", "sent2") + ENDINGS + (("label",) if with_labels else ())
        missing = [name for name in needed if name not in header]
        if missing:
            raise DataError(f"{path}:1: no column {missing[0]!r} in the header "
                            f"({', '.join(repr(h) for h in header)})")
        index = {name: header.index(name) for name in needed}
        for start, fields in numbered_rows(reader, path):
            report.rows += 1
            where = f"{path}:{start}"
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

class MultipleChoicePreprocessor(tf.Module):
    """Raw text -> the multiple-choice model's inputs, in TensorFlow ops only (a
    tf.Module: a SavedModel holding it tracks the tokenizer and its vocab asset):

        inputs = preprocessor(context, start, endings)
        # context, start: tf.string [batch]; endings: tf.string [batch, num_choices]
        # -> {token_ids, segment_ids, padding_mask}: int32 [batch, num_choices, seq_length]

    Choice i is packed as [CLS] context [SEP] start + " " + ending_i [SEP] with google's
    fine-tuning truncation (the longer side loses its last tokens first).
    """

    def __init__(self, tokenizer, seq_length, num_choices=NUM_CHOICES, name=None):
        from bert_tf.packing import BertPacker
        super().__init__(name=name)
        self.tokenizer = tokenizer
        self.packer = BertPacker.from_tokenizer(tokenizer, seq_length)
        self.num_choices = num_choices

    def __call__(self, context, start, endings):
        c, length = self.num_choices, self.packer.seq_length
        first = tf.repeat(context, c)                                  # [batch * C]
        second = tf.strings.join([tf.repeat(start, c), tf.reshape(endings, [-1])],
                                 separator=" ")                        # [batch * C]
        packed = self.packer(self.tokenizer(first), self.tokenizer(second))
        return {k: tf.reshape(v, [-1, c, length]) for k, v in packed.items()}


def make_dataset(examples, preprocessor, batch_size, training=False, seed=0,
                 length_batching="off"):
    """tf.data of (inputs [B, C, L], {"logits": label}[, {"logits": weight}]), as
    tasks.glue.make_dataset: training batches are shuffled and repeated; evaluation ones
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
    return ds.prefetch(tf.data.AUTOTUNE)


# ----------------------------------------------------------------------------- model

def _flatten_choices_layer():
    import keras
    from keras import ops

    @keras.saving.register_keras_serializable(package="bert_tf")
    class FlattenChoices(keras.layers.Layer):
        """[batch, choices, seq] -> [batch * choices, seq] (seq may be unknown)."""

        def call(self, x):
            return ops.reshape(x, (-1, ops.shape(x)[-1]))

        def compute_output_shape(self, input_shape):
            return (None, input_shape[-1])

    return FlattenChoices


def build_multiple_choice_model(encoder, num_choices=NUM_CHOICES, dropout=None):
    """Shared encoder + dropout + dense(1) on each choice's pooled [CLS] -> keras.Model:
    {token_ids, segment_ids, padding_mask} int32 [B, C, S] -> {"logits": float32 [B, C]}
    (softmax over C gives the choice probabilities)."""
    import keras
    from keras import ops
    config = encoder.bert_config
    rate = config.hidden_dropout_prob if dropout is None else dropout
    flatten = _flatten_choices_layer()(name="flatten_choices")
    inputs = {name: keras.Input(shape=(num_choices, None), dtype="int32", name=name)
              for name in glue.INPUT_NAMES}
    flat = {name: flatten(x) for name, x in inputs.items()}                # [B*C, S]
    pooled = encoder(flat)["pooled_output"]                                 # [B*C, H]
    x = keras.layers.Dropout(rate, name="head_dropout")(pooled)
    x = keras.layers.Dense(
        1, kernel_initializer=keras.initializers.TruncatedNormal(
            stddev=config.initializer_range), dtype=glue.encoder_policy(encoder),
        name="classifier")(x)                                               # [B*C, 1]
    x = keras.layers.Activation("linear", dtype="float32", name="float32_output")(x)
    logits = keras.layers.Identity(name="logits")(ops.reshape(x, (-1, num_choices)))
    return keras.Model(inputs, {"logits": logits}, name="multiple_choice")   # [B, C]


def compile_multiple_choice(model, optimizer, jit_compile=False):
    import keras
    ConfusionMatrixMetric, _ = glue._keras_metric_classes()
    model.compile(
        optimizer=glue.loss_scaled(model, optimizer),
        loss={"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
        weighted_metrics={"logits": [ConfusionMatrixMetric("accuracy", NUM_CHOICES)]},
        jit_compile=jit_compile)
    return model


def postprocess(outputs):
    """{"logits": [N, C]} -> {"label_ids": [N] (chosen ending), "probabilities": [N, C]}."""
    probabilities = glue.softmax(outputs["logits"])
    return {"label_ids": probabilities.argmax(-1), "probabilities": probabilities}


def score_predictions(predictions, gold):
    from tasks import metrics
    gold = np.asarray(gold, np.int64)
    p = predictions["probabilities"][np.arange(len(gold)), gold]
    return {"accuracy": metrics.accuracy(gold, predictions["label_ids"]),
            "loss": float(-np.mean(np.log(np.maximum(p, 1e-12))))}


def write_predictions(path, examples, predictions):
    """TSV: index, prediction (0-3), probability_0..3. Temp name, then rename."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\t".join(["index", "prediction"] +
                          [f"probability_{i}" for i in range(NUM_CHOICES)]) + "\n")
        for i, example in enumerate(examples):
            row = [example.guid, str(int(predictions["label_ids"][i]))]
            row += [f"{p:.6f}" for p in predictions["probabilities"][i]]
            f.write("\t".join(row) + "\n")
    os.replace(tmp, path)


def load_multiple_choice(output_dir, dtype=None, weights=None):
    """(model, config, tokenizer) of a fine-tuned SWAG run in output_dir."""
    return task_dir.load_task_model(
        output_dir, TASK, lambda encoder, config: build_multiple_choice_model(
            encoder, config["num_choices"]), dtype, weights)


# ----------------------------------------------------------------------------- CLI

def add_flags(parser):
    common.add_common_flags(parser)
    f = parser.add_argument
    f("--data_dir", default=None, help="folder with train.csv, val.csv, test.csv")
    f("--train_file", default=None, help="default: DATA_DIR/train.csv")
    f("--dev_file", default=None, help="default: DATA_DIR/val.csv")
    f("--test_file", default=None, help="default: DATA_DIR/test.csv")
    f("--bad_rows", default="skip", choices=("skip", "error"),
      help="skip: count bad rows and report them; error: stop at the first")
    f("--jit_compile", type=common.str2bool, nargs="?", const=True, default=False,
      help="XLA-compile the train/eval steps (compiling takes a minute or more; on "
           "CPU the steps measured slower with it: docs/benchmarks.md, Fine-tuning)")
    return parser


def _path(args, split):
    given = {"train": args.train_file, "dev": args.dev_file, "test": args.test_file}[split]
    if given:
        return given
    if not args.data_dir:
        raise ValueError(f"pass --data_dir or --{split}_file")
    return os.path.join(args.data_dir, SPLIT_FILES[split])


def run(args):
    """The CLI's work on parsed flags. Returns the evaluation metrics ({} without eval)."""
    from bert_tf.tokenization import BertTokenizer
    if not (args.do_train or args.do_eval or args.do_predict):
        raise ValueError("nothing to do: pass --do_train, --do_eval and/or --do_predict")
    # Before any TensorFlow op (the tokenizer runs some): --cpu_devices splits the CPU.
    strategy = common.create_strategy(args)
    os.makedirs(args.output_dir, exist_ok=True)

    def read(split, with_labels=True):
        examples, report = read_swag_csv(_path(args, split), with_labels, args.bad_rows)
        return finish_report(report, examples)

    if args.do_train:
        common.resolve_paths(args)
        train = read("train")
    else:
        saved = task_dir.read_task_config(args.output_dir, TASK)
        args.do_lower_case, args.max_seq_length = saved["do_lower_case"], \
            saved["max_seq_length"]
        args.vocab_file = os.path.join(args.output_dir, "vocab.txt")
    dev = read("dev") if args.do_eval else None
    tokenizer = BertTokenizer(args.vocab_file, do_lower_case=args.do_lower_case)
    preprocessor = MultipleChoicePreprocessor(tokenizer, args.max_seq_length)
    eval_batching = common.length_batching(args, training=False)
    with strategy.scope():
        encoder = common.task_encoder(args)
        model = build_multiple_choice_model(encoder)
    if args.do_train:
        with strategy.scope():
            optimizer, num_steps = common.create_optimizer(args, len(train),
                                                           model.trainable_variables)
            compile_multiple_choice(model, optimizer,
                                    glue.resolve_jit_compile(args.jit_compile, strategy))
        task_dir.save_task_files(
            args.output_dir, TASK,
            {"task": TASK, "num_choices": NUM_CHOICES, "do_lower_case": args.do_lower_case,
             "max_seq_length": args.max_seq_length,
             "text_inputs": ["context", "start", "endings"]},
            encoder.bert_config, args.vocab_file)
        eval_ds = make_dataset(dev, preprocessor, args.eval_batch_size,
                               length_batching=eval_batching) if dev else None
        if eval_ds is None:
            glue.remove_stale_best(args.output_dir)
        common.fit(model, make_dataset(train, preprocessor, args.train_batch_size,
                                       training=True, seed=args.seed,
                                       length_batching=common.length_batching(args, True)),
                   eval_ds, args, num_steps,
                   monitor="val_accuracy" if eval_ds is not None else None, mode="max")
    model.load_weights(task_dir.weights_file(args.output_dir))

    results = {}
    if dev:
        outputs = glue.predict_outputs(
            model, make_dataset(dev, preprocessor, args.eval_batch_size,
                                length_batching=eval_batching), len(dev))
        values = score_predictions(postprocess(outputs), [e.label for e in dev])
        results = {f"eval_{k}": v for k, v in values.items()}
        results["eval_num_examples"] = len(dev)
        common.write_results(os.path.join(args.output_dir, "eval_results.txt"), results)
        for key in sorted(results):
            print(f"{key} = {results[key]:.4f}", flush=True)
    if args.do_predict:
        test = read("test", with_labels=False)
        outputs = glue.predict_outputs(
            model, make_dataset(test, preprocessor, args.predict_batch_size,
                                length_batching=eval_batching), len(test))
        write_predictions(os.path.join(args.output_dir, "test_results.tsv"), test,
                          postprocess(outputs))
        print(f"test: {len(test)} predictions written to {args.output_dir}", flush=True)
    return results


def main(argv=None):
    parser = add_flags(common.parser(
        "Fine-tune, evaluate and predict SWAG (four-way multiple choice) with BERT."))
    return run_command(run, parser.parse_args(argv))


if __name__ == "__main__":
    main()
