"""Named-entity recognition on CoNLL files: reader, first-piece labelling, model, CLI.

    python -m tasks.ner --init_checkpoint=MODEL_DIR --output_dir=out \
        --do_train --train_file=eng.train --do_eval --eval_file=eng.testa \
        --do_predict --predict_file=eng.testb [--feature_based]

Files are CoNLL-2003's four columns (word POS chunk NER), two (word tag), or any other
number with the word first and the tag last; a file of words alone can be predicted. Sentences are separated by blank lines;
"-DOCSTART-" lines are kept in the output and ignored otherwise. Each word is tokenized
alone (exact for google's tokenizer) and its label goes on its first word piece; the other
pieces, [CLS], [SEP] and padding are left out of the loss and the prediction. A sentence
longer than the sequence is cut into consecutive pieces at word boundaries.

Scores are conlleval's entity-level P/R/F1 (tasks/conlleval.py). --do_predict writes
`predictions.txt`: every input line with the predicted tag appended (so the gold and
the prediction are the last two columns, conlleval's input format).

--feature_based: the paper's feature-based setting: the encoder is frozen and run without
dropout, the head reads the concatenation of the last four layers' outputs.
"""

import collections
import dataclasses
import os
import re

import keras
import numpy as np

from bert_tf.flags import run_command
from tasks import common, conlleval, task_dir

TASK = "ner"
DOCSTART = "-DOCSTART-"
_TAG = re.compile(r"^(O|[BIES]-\S+)$")
IGNORE = -1      # label id of positions outside the loss: non-first pieces, specials, pad


# ----------------------------------------------------------------------------- reading

@dataclasses.dataclass
class Sentence:
    """words: list of str; tags: list of str or None (unlabelled file); lines: the
    original text lines (for writing predictions back); line_numbers: 1-based."""
    words: list
    tags: list
    lines: list
    line_numbers: list


@dataclasses.dataclass
class ConllFile:
    """sentences plus `layout`: the original file as a list of items, each a Sentence
    index, a blank line ("") or a -DOCSTART- line (its text)."""
    path: str
    columns: int
    sentences: list
    layout: list


def read_conll(path):
    """Reads a CoNLL file: whitespace-separated columns, the word first and the tag last
    (CoNLL-2003's 4 columns, word + tag, or any other count; one column = words only).

    One clear ValueError naming the file and line for: a line whose number of columns
    differs from the file's first, a tag that is not O or PREFIX-TYPE (PREFIX one of B,
    I, E, S), a file that is not UTF-8 or has no sentence.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: file not found") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 ({e})") from None
    if lines and lines[-1] == "":
        lines.pop()
    columns = None
    sentences, layout = [], []
    current = None

    def close():
        nonlocal current
        if current is not None:
            layout.append(len(sentences))
            sentences.append(current)
            current = None

    for number, line in enumerate(lines, 1):
        line = line.rstrip("\r")
        fields = line.split()
        if not fields:
            close()
            layout.append("")
            continue
        if fields[0] == DOCSTART:
            close()
            layout.append(line)
            continue
        if columns is None:
            columns = len(fields)
        elif len(fields) != columns:
            raise ValueError(f"{path}:{number}: {len(fields)} columns, but the file's "
                             f"first line has {columns}: {line!r}")
        tag = None
        if columns > 1:
            tag = fields[-1]
            if not _TAG.match(tag):
                raise ValueError(f"{path}:{number}: malformed tag {tag!r} (expected O or "
                                 f"B-/I-/E-/S- followed by a type)")
        if current is None:
            current = Sentence([], [] if columns > 1 else None, [], [])
        current.words.append(fields[0])
        if tag is not None:
            current.tags.append(tag)
        current.lines.append(line)
        current.line_numbers.append(number)
    close()
    if not sentences:
        raise ValueError(f"{path}: no sentences")
    return ConllFile(path, columns, sentences, layout)


def label_list(conll):
    """Labels of a training file: "O" first, then the others sorted."""
    labels = {t for s in conll.sentences for t in s.tags}
    return ["O"] + sorted(labels - {"O"})


# ----------------------------------------------------------------------------- features

def create_features(sentences, word_pieces, labels, max_seq_length, cls_id, sep_id,
                    unk_id, pad_id=0):
    """Sentences -> dict of numpy arrays, one row per (part of a) sentence:

      token_ids, segment_ids, padding_mask  int32 [N, S]   [CLS] pieces [SEP]
      label_ids                             int32 [N, S]   word label on its first piece,
                                                           IGNORE elsewhere
      word_index                            int32 [N, S]   index of the word in its
                                                           sentence on first pieces, else -1
      sentence_index                        int32 [N]

    word_pieces: one list of piece ids per word of every sentence, in order. Words the
    tokenizer deletes entirely (control characters only) become one [UNK], so that every
    word has a first piece. Labels not in `labels` get IGNORE (counted as
    "unknown_label"). Returns (features, report).
    """
    label_ids = {label: i for i, label in enumerate(labels)}
    report = collections.Counter()
    rows = collections.defaultdict(list)
    room = max_seq_length - 2
    w_iter = iter(word_pieces)
    for s, sentence in enumerate(sentences):
        pieces = []
        for word in sentence.words:
            ids = list(next(w_iter))
            if not ids:
                report["word_without_pieces"] += 1
                ids = [unk_id]
            if len(ids) > room:
                report["word_truncated"] += 1
                ids = ids[:room]
            pieces.append(ids)
        # Consecutive parts of at most `room` pieces, cut between words.
        parts, part, size = [], [], 0
        for w, ids in enumerate(pieces):
            if size + len(ids) > room and part:
                parts.append(part)
                part, size = [], 0
            part.append(w)
            size += len(ids)
        parts.append(part)
        if len(parts) > 1:
            report["sentence_split"] += 1
        for part in parts:
            token_ids = np.full(max_seq_length, pad_id, np.int32)
            labels_row = np.full(max_seq_length, IGNORE, np.int32)
            words_row = np.full(max_seq_length, -1, np.int32)
            token_ids[0] = cls_id
            position = 1
            for w in part:
                token_ids[position:position + len(pieces[w])] = pieces[w]
                words_row[position] = w
                if sentence.tags is not None:
                    tag = sentence.tags[w]
                    if tag in label_ids:
                        labels_row[position] = label_ids[tag]
                    else:
                        report["unknown_label"] += 1
                position += len(pieces[w])
            token_ids[position] = sep_id
            mask = np.zeros(max_seq_length, np.int32)
            mask[:position + 1] = 1
            for key, value in (("token_ids", token_ids),
                               ("segment_ids", np.zeros(max_seq_length, np.int32)),
                               ("padding_mask", mask), ("label_ids", labels_row),
                               ("word_index", words_row), ("sentence_index", s)):
                rows[key].append(value)
    features = {k: np.asarray(v, np.int32) for k, v in rows.items()}
    report["sentences"] = len(sentences)
    report["features"] = len(features["token_ids"])
    return features, report


def tokenize_sentences(tokenizer, sentences):
    """Every word of every sentence tokenized alone -> list of piece-id lists."""
    words = [w for s in sentences for w in s.words]
    out = []
    for i in range(0, len(words), 8192):
        out.extend(tokenizer.encode(words[i:i + 8192]))
    return out


def featurize(path, tokenizer, labels, max_seq_length, conll=None):
    """Reads `path` (unless its ConllFile is given) -> (ConllFile, features, report)."""
    conll = conll or read_conll(path)
    features, report = create_features(
        conll.sentences, tokenize_sentences(tokenizer, conll.sentences), labels,
        max_seq_length, tokenizer.cls_id, tokenizer.sep_id, tokenizer.unk_id,
        tokenizer.pad_id)
    print(f"{path}: {dict(sorted(report.items()))}", flush=True)
    return conll, features, report


# ----------------------------------------------------------------------------- model

@keras.saving.register_keras_serializable(package="bert_tf")
class FrozenLastLayers(keras.layers.Layer):
    """A frozen encoder's last `num_layers` layer outputs, concatenated: [B, S, n * H].

    The encoder always runs in inference mode. (A `training=False` written into a
    functional graph is overridden by the outer call's value; this layer's call takes no
    `training` argument, so the outer value never reaches the encoder.)
    """

    def __init__(self, encoder, num_layers=4, **kwargs):
        super().__init__(**kwargs)
        if encoder.bert_config.num_hidden_layers < num_layers:
            raise ValueError(f"--feature_based needs >= {num_layers} layers, the encoder "
                             f"has {encoder.bert_config.num_hidden_layers}")
        self.encoder = encoder
        self.num_layers = num_layers
        self.encoder.trainable = False

    def call(self, inputs):
        layers = self.encoder(inputs, training=False)["encoder_outputs"]
        return keras.ops.concatenate(layers[-self.num_layers:], axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(encoder=keras.saving.serialize_keras_object(self.encoder),
                      num_layers=self.num_layers)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


def build_ner_model(encoder, num_labels, feature_based=False, dropout=None):
    """encoder + dropout + dense(num_labels) on every position -> keras.Model:
    {token_ids, segment_ids, padding_mask} int32 [B, S] -> {"logits": float32 [B, S, K]}.

    feature_based: the encoder is frozen and run in inference mode (no dropout); the head
    reads the last four layers' outputs concatenated ([B, S, 4H]).
    """
    config = encoder.bert_config
    # The pooler feeds nothing here; frozen, it stays out of the optimizer.
    encoder.pooler.trainable = False
    rate = config.hidden_dropout_prob if dropout is None else dropout
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
              for name in ("token_ids", "segment_ids", "padding_mask")}
    if feature_based:
        features = FrozenLastLayers(encoder, 4, name="last_four_layers")(inputs)  # [B,S,4H]
    else:
        features = encoder(inputs)["sequence_output"]                      # [B, S, H]
    features = keras.layers.Dropout(rate, name="head_dropout")(features)
    # The head computes in the encoder's policy, read from one of its layers: a Keras
    # functional model's own dtype_policy says float32 whatever its layers use.
    logits = keras.layers.Dense(
        num_labels, kernel_initializer=keras.initializers.TruncatedNormal(
            stddev=config.initializer_range), dtype=encoder.pooler.dtype_policy,
        name="classifier")(features)                                       # [B, S, K]
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
    return keras.Model(inputs, {"logits": logits}, name="ner")


def load_ner_model(output_dir, dtype=None, weights=None):
    """(model, config, tokenizer) of a fine-tuned NER run in output_dir."""
    return task_dir.load_task_model(
        output_dir, TASK, lambda encoder, config: build_ner_model(
            encoder, len(config["labels"]), config.get("feature_based", False)),
        dtype, weights)


def compile_ner_model(model, optimizer):
    """Cross-entropy averaged over the labelled (first) pieces only: IGNORE positions get
    no loss and do not count in the mean. Under mixed_float16 the optimizer gets dynamic
    loss scaling (a functional model does not carry its layers' policy, so Keras would
    not add it by itself)."""
    if model.get_layer("classifier").dtype_policy.name == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORE)
    model.compile(optimizer=optimizer, loss={"logits": loss})


def make_dataset(features, batch_size, training=False, seed=0, with_labels=True,
                 length_batching="off"):
    """tf.data of (inputs, {"logits": tags}) batches; length_batching: a bert_tf.batching
    mode (the per-token tags are cut with the inputs)."""
    import tensorflow as tf

    from bert_tf import batching
    x = {k: features[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    ds = tf.data.Dataset.from_tensor_slices(
        (x, {"logits": features["label_ids"]}) if with_labels else x)
    n = len(features["token_ids"])
    if training:
        ds = ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
    return batching.batch(ds, batch_size, length_batching, x["token_ids"].shape[1],
                          drop_remainder=training and n >= batch_size,
                          seed=seed).prefetch(2)


# ----------------------------------------------------------------------------- prediction

def word_tags(logits, features, sentences, labels):
    """Per-piece logits [N, S, K] -> one tag list per sentence, read on each word's first
    piece."""
    best = np.argmax(logits, axis=-1)                                       # [N, S]
    tags = [[None] * len(s.words) for s in sentences]
    rows, cols = np.nonzero(features["word_index"] >= 0)
    for r, c in zip(rows, cols):
        tags[features["sentence_index"][r]][features["word_index"][r, c]] = labels[best[r, c]]
    return tags


def entities(tags, word_spans, text):
    """Tags of the words of `text` -> [{"label", "text", "start_char", "end_char"}].

    word_spans: (start, end) character offsets of each word in `text`, end exclusive.
    Entities follow conlleval's chunk rules; an entity's characters run from its first
    word's start to its last word's end (inner whitespace as in `text`).
    """
    out = []
    for first, end, label in conlleval.chunks(tags):
        start_char, end_char = word_spans[first][0], word_spans[end - 1][1]
        out.append({"label": label, "text": text[start_char:end_char],
                    "start_char": start_char, "end_char": end_char})
    return out


def split_words(text):
    """Whitespace words of a raw text -> list of (start, end) character offsets."""
    return [m.span() for m in re.finditer(r"\S+", text)]


def write_predictions(path, conll, predicted):
    """Every input line + " " + predicted tag, blank and -DOCSTART- lines kept (the latter
    with " O" added so that every token line has the same columns); temp name, rename."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for item in conll.layout:
            if isinstance(item, int):
                for line, tag in zip(conll.sentences[item].lines, predicted[item]):
                    f.write(f"{line} {tag}\n")
            elif item:
                f.write(f"{item} O\n")
            else:
                f.write("\n")
    os.replace(tmp, path)


def predict_tags(model, conll, features, labels, batch_size, length_batching="off"):
    """Tags of every sentence of a featurized file."""
    logits = common.predict_per_token(
        model, make_dataset(features, batch_size, with_labels=False,
                            length_batching=length_batching),
        features["token_ids"].shape[1])["logits"]
    return word_tags(np.asarray(logits), features, conll.sentences, labels)


# ----------------------------------------------------------------------------- CLI

def add_flags(parser):
    common.add_common_flags(parser)
    f = parser.add_argument
    f("--train_file", default=None, help="CoNLL file to train on")
    f("--eval_file", default=None,
      help="CoNLL file to score (--do_eval); also the validation set for best.weights.h5")
    f("--predict_file", default=None,
      help="CoNLL file to tag (--do_predict); scored too when it has gold tags")
    f("--feature_based", type=common.str2bool, nargs="?", const=True, default=False,
      help="freeze the encoder and classify the concatenated last four layers")
    parser.set_defaults(max_seq_length=None)
    return parser


def _check_args(args):
    if not (args.do_train or args.do_eval or args.do_predict):
        raise ValueError("nothing to do: pass --do_train, --do_eval and/or --do_predict")
    for flag, name in (("do_train", "train_file"), ("do_eval", "eval_file"),
                       ("do_predict", "predict_file")):
        if getattr(args, flag) and not getattr(args, name):
            raise ValueError(f"--{flag} needs --{name}")


def _score(name, conll, tags):
    scores = conlleval.evaluate([s.tags for s in conll.sentences], tags)
    metrics = {f"{name}_{k}": v for k, v in scores.items()
               if k in ("precision", "recall", "f1", "accuracy")}
    for type_, values in scores["per_type"].items():
        metrics[f"{name}_{type_}_f1"] = values["f1"]
    return metrics


def run(args):
    """The CLI's work, on parsed flags. Returns the metrics ({} without gold tags)."""
    from bert_tf.tokenization import BertTokenizer
    _check_args(args)
    os.makedirs(args.output_dir, exist_ok=True)
    if args.do_train:
        args.max_seq_length = args.max_seq_length or 128
        common.resolve_paths(args)
        train_conll = read_conll(args.train_file)
        if train_conll.columns == 1:
            raise ValueError(f"{args.train_file}: no tags to train on (one column)")
        labels = label_list(train_conll)
    else:
        saved = task_dir.read_task_config(args.output_dir, TASK)
        labels, args.do_lower_case = saved["labels"], saved["do_lower_case"]
        args.feature_based = saved["feature_based"]
        if args.max_seq_length is None:
            args.max_seq_length = saved["max_seq_length"]
        if args.vocab_file is None:
            args.vocab_file = os.path.join(args.output_dir, "vocab.txt")
    if args.max_seq_length < 3:
        raise ValueError(f"--max_seq_length must be >= 3, got {args.max_seq_length}")
    # The strategy first: --cpu_devices must split the CPU before any TensorFlow op runs.
    strategy = common.create_strategy(args)
    tokenizer = BertTokenizer(args.vocab_file, do_lower_case=args.do_lower_case)

    with strategy.scope():
        encoder = common.task_encoder(args)
        model = build_ner_model(encoder, len(labels), args.feature_based)
    evaluated = {}
    if args.do_eval:
        evaluated["eval"] = featurize(args.eval_file, tokenizer, labels, args.max_seq_length)
    if args.do_train:
        _, train_features, _ = featurize(args.train_file, tokenizer, labels,
                                         args.max_seq_length, train_conll)
        with strategy.scope():
            optimizer, num_steps = common.create_optimizer(
                args, len(train_features["token_ids"]), model.trainable_variables)
            compile_ner_model(model, optimizer)
        task_dir.save_task_files(
            args.output_dir, TASK,
            {"task": TASK, "labels": labels, "do_lower_case": args.do_lower_case,
             "max_seq_length": args.max_seq_length, "feature_based": args.feature_based},
            encoder.bert_config, args.vocab_file)
        eval_ds = None
        if "eval" in evaluated:
            eval_ds = make_dataset(evaluated["eval"][1], args.eval_batch_size,
                                   length_batching=common.length_batching(args, False))
        common.fit(model, make_dataset(train_features, args.train_batch_size, training=True,
                                       seed=args.seed,
                                       length_batching=common.length_batching(args, True)),
                   eval_ds, args, num_steps, monitor="val_loss" if eval_ds else None,
                   mode="min")
    model.load_weights(task_dir.weights_file(args.output_dir))

    metrics = {}
    if args.do_eval:
        conll, features, _ = evaluated["eval"]
        if conll.columns == 1:
            raise ValueError(f"{args.eval_file}: no gold tags to evaluate (one column)")
        tags = predict_tags(model, conll, features, labels, args.eval_batch_size,
                            common.length_batching(args, training=False))
        metrics.update(_score("eval", conll, tags))
    if args.do_predict:
        conll, features, _ = featurize(args.predict_file, tokenizer, labels,
                                       args.max_seq_length)
        tags = predict_tags(model, conll, features, labels, args.predict_batch_size,
                            common.length_batching(args, training=False))
        write_predictions(os.path.join(args.output_dir, "predictions.txt"), conll, tags)
        if conll.columns > 1:
            metrics.update(_score("predict", conll, tags))
    if metrics:
        common.write_results(os.path.join(args.output_dir, "eval_results.txt"), metrics)
        for key in sorted(metrics):
            print(f"{key} = {metrics[key]:.2f}", flush=True)
    return metrics


def main(argv=None):
    parser = add_flags(common.parser("Fine-tune and evaluate BERT for CoNLL NER."))
    return run_command(run, parser.parse_args(argv))


if __name__ == "__main__":
    main()
