"""Named-entity recognition on CoNLL files: first-piece labelling, model, `NerTask` for
tasks/driver.py (reader: data.py; serving: serving.py's NerModule; command line:
__main__.py, also `python -m tasks.ner`).

    python -m tasks.ner --init_checkpoint=MODEL_DIR --output_dir=out \
        --do_train --train_file=eng.train --do_eval --eval_file=eng.testa \
        --do_predict --predict_file=eng.testb \
        [--feature_based [--feature_layers=sum_last_four] [--feature_head=bilstm]]

Files are CoNLL-2003's four columns (word POS chunk NER), two (word tag), or any other
number with the word first and the tag last; a file of words alone can be predicted.
Sentences are separated by blank lines; "-DOCSTART-" lines are kept in the output and
ignored otherwise. Chinese sets (MSRA, People's Daily, Weibo NER) come one character per
line in this layout, Latin letters and digits a line each too: such a file's lines are
joined with nothing into its sentences' text, every other file's with a space
(--line_unit: auto finds each file's own, data.py's `detect_line_unit`).

The model labels *units*: each sentence's text cut as google's BasicTokenizer cuts text
(bert_tf.text.words: every punctuation character and CJK ideograph alone), so that training
files, raw texts (the NER signature, `split_words`) and the tokenizer agree on where words
start, whatever the script and whatever a file's lines hold: the letters "G" "o" "o" "g"
"l" "e" of a file written one character per line are the unit "Google", as the signature
cuts the raw text. A word of several units ("U.S.", a segmented Chinese word "北京市")
gives its tag to the first unit and continues it over the others (B-LOC -> B-LOC I-LOC
...; S-/E- as IOBES needs), a unit of several words takes the first one's (merged as
`word_tag` merges); predictions are read per unit and back onto every file word
(`Sentence.word_tags`, the inverse). Each unit is tokenized alone (exact for
google's tokenizer) and its label goes on its first word piece; the other pieces, [CLS],
[SEP] and padding are left out of the loss and the prediction. A sentence longer than the
sequence is read in overlapping windows of whole units, --doc_stride pieces apart (half a
window unless said; recorded for later runs and the export): training learns from every
window, and prediction reads each unit in the window where it has the most context
(google's SQuAD rule: bert_tf/text/windows.py).

Scores are conlleval's entity-level P/R/F1 (tasks/families/ner/conlleval.py) on the file's words.
--do_predict writes `predictions.txt`: every input line with the predicted tag appended
(so the gold and the prediction are the last two columns, conlleval's input format).

--feature_based: the paper's feature-based recipe (section 5.3, Table 7): the encoder is
frozen and runs without dropout; the head reads the layers --feature_layers chooses (the
embeddings, the second-to-last or last layer, a learned weighted sum of the last four or
of all layers, or the last four concatenated: the default) and is --feature_head: one
dense layer (linear, the default) or the paper's two-layer BiLSTM before it (bilstm,
--feature_lstm_units per direction). The encoder runs once over each file: its features
are kept in OUTPUT_DIR/feature_cache/ (tasks/families/ner/frozen_features.py says what the files are
keyed by), and only the head runs at each step (--cache_features=false: the whole model
runs, the same numbers). --extracted_features=PATTERN reads them instead from
bert_tf.extract_features' TFRecord output (`--output_format=tfrecord`, on the local or
the Beam engine) over the files' sentences, checked against the encoder first
(frozen_features.py's `extracted_features`).

The reader's units (data.py), create_features' first pieces and IGNORE labels, word_tags'
read-back and write_predictions' lines are one path from a file's lines to
predictions.txt, each step relying on the one before's conventions, and NerTask's hooks
are that path in order; serving.py repeats it in the graph against this one reading.
"""

import collections
import os

import keras
import numpy as np

from bert_tf.base.cli import check_seq_length
from bert_tf.base.files import atomic_write
from bert_tf.models.task_models import BertTokenClassifier, loss_scaled
from tasks.families.ner import conlleval
from bert_tf.text import windows
from bert_tf.text.windows import check_doc_stride, default_doc_stride  # noqa: F401 (ner.<name>)
from tasks import driver
from tasks.families.ner import frozen_features
from tasks.task import Task, family
from tasks.families.ner import config as ner_config
from tasks.families.ner.config import FEATURE_DEFAULTS, NerConfig
# The reader, as tasks.families.ner.<name> too.
from tasks.families.ner.data import (DOCSTART, LINE_UNITS, ConllFile,  # noqa: F401
                                     Sentence, continue_tag, detect_line_unit, label_list,
                                     read_conll, word_tag)
from tasks.families.ner.serving import NerModule

IGNORE = -1      # label id of positions outside the loss: non-first pieces, specials, pad


# ----------------------------------------------------------------------------- features

def create_features(sentences, tokenizer, labels, max_seq_length, doc_stride=None,
                    chunk=1024):
    """Sentences -> dict of numpy arrays, one row per window of a sentence:

      token_ids, segment_ids, padding_mask  int32 [N, S]   [CLS] pieces [SEP]
      label_ids                             int32 [N, S]   unit label on its first piece,
                                                           IGNORE elsewhere
      word_index                            int32 [N, S]   index of the unit in its
                                                           sentence on its first piece in
                                                           the window where the unit has
                                                           the most context, else -1
      sentence_index                        int32 [N]
      piece_start                           int32 [N]      where the window's first piece
                                                           is among its sentence's pieces

    Every unit of every sentence is tokenized alone (`tokenizer`, a BertTokenizer); units
    the tokenizer deletes entirely (control characters only) become one [UNK], so that
    every unit has a first piece. A sentence longer than max_seq_length - 2 pieces is cut
    into windows (overlapping with `doc_stride`, whole units); every window is labelled
    whole (training learns from each) and every unit is read from one (its max context).
    The tokenizer and the windows (bert_tf/text/windows.py's `unit_windows`) are the
    signature's ops, run in tf.data `chunk` sentences a batch. Labels not in `labels` get
    IGNORE (counted as "unknown_label"). Returns (features, report).
    """
    import tensorflow as tf

    from bert_tf.text.batching import map_chunks_joined
    from bert_tf.text.graph_words import row_ids
    from bert_tf.text.packing import BertPacker
    label_ids = {label: i for i, label in enumerate(labels)}
    report = collections.Counter()
    units = np.asarray([len(sentence.units) for sentence in sentences], np.int64)
    tags = [tag for sentence in sentences for tag in (sentence.unit_tags or
                                                      [None] * len(sentence.units))]
    report["unknown_label"] = sum(tag is not None and tag not in label_ids for tag in tags)
    elements = {
        "units": tf.RaggedTensor.from_row_lengths(
            tf.constant([unit.encode("utf-8") for sentence in sentences
                         for unit in sentence.units], tf.string), units, validate=False),
        "labels": tf.RaggedTensor.from_row_lengths(
            np.asarray([label_ids.get(tag, IGNORE) for tag in tags], np.int32), units,
            validate=False),
        "sentence": np.arange(len(sentences), dtype=np.int32)}
    packer = BertPacker.from_tokenizer(tokenizer, max_seq_length)

    def windows_of(batch):
        sentence_splits = batch["units"].row_splits
        pieces = tokenizer(batch["units"].flat_values)                     # [units, (p)]
        features, w = windows.unit_windows(
            packer, tf.RaggedTensor.from_row_splits(pieces, sentence_splits, validate=False),
            doc_stride, tokenizer.unk_id, empty_window=True)
        row, first, piece_splits = w["row"], w["first"], w["piece_splits"]
        shape = tf.stack([tf.size(row, out_type=tf.int64),
                          tf.constant(max_seq_length, tf.int64)])
        # Every unit's label on its first piece in every window that holds it.
        pairs = tf.ragged.range(first, w["end"])
        window, unit = row_ids(pairs.row_splits), pairs.flat_values
        column = 1 + tf.gather(piece_splits, unit) - \
            tf.gather(piece_splits, tf.gather(first, window))
        label = tf.gather(batch["labels"].flat_values, unit)
        label_ids = tf.scatter_nd(tf.stack([window, column], 1), label - IGNORE,
                                  shape) + IGNORE
        # Its index in its sentence where it is read (its max-context window).
        unit_rows = row_ids(sentence_splits)
        local = tf.range(tf.size(unit_rows, out_type=tf.int64)) - \
            tf.gather(sentence_splits, unit_rows)
        word_index = tf.scatter_nd(tf.stack([w["part"], w["position"]], 1),
                                   tf.cast(local, tf.int32) + 1, shape) - 1
        piece_start = tf.gather(piece_splits, first) - \
            tf.gather(piece_splits, tf.gather(sentence_splits, row))
        return dict(features, label_ids=label_ids, word_index=word_index,
                    sentence_index=tf.gather(batch["sentence"], row),
                    piece_start=tf.cast(piece_start, tf.int32),
                    unit_pieces=pieces.row_lengths())   # per unit, for the report

    features = map_chunks_joined(windows_of, elements, chunk)
    unit_pieces = features.pop("unit_pieces")
    report["word_without_pieces"] = int((unit_pieces == 0).sum())
    report["word_truncated"] = int((unit_pieces > max_seq_length - 2).sum())
    report["sentence_split"] = int((np.bincount(features["sentence_index"]) > 1).sum())
    report = collections.Counter({k: v for k, v in report.items() if v})
    report["sentences"] = len(sentences)
    report["features"] = len(features["token_ids"])
    return features, report


def featurize(path, tokenizer, labels, max_seq_length, conll=None, line_unit="auto",
              doc_stride=None):
    """Reads `path` (unless its ConllFile is given; `line_unit` as read_conll's) ->
    (ConllFile, features, report); `doc_stride` as create_features'."""
    conll = conll or read_conll(path, line_unit)
    features, report = create_features(conll.sentences, tokenizer, labels, max_seq_length,
                                       doc_stride)
    report["line_unit"] = conll.line_unit
    mixed = sum(sentence.mixed_units for sentence in conll.sentences)
    if mixed:
        report["units_joining_entities"] = mixed
    print(f"{path}: {dict(sorted(report.items()))}", flush=True)
    return conll, features, report


# ----------------------------------------------------------------------------- model

def compile_ner_model(model, optimizer):
    """Cross-entropy averaged over the labelled (first) pieces only: IGNORE positions get
    no loss and do not count in the mean. Under mixed_float16 the optimizer gets dynamic
    loss scaling (a functional model does not carry its layers' policy, so Keras would
    not add it by itself)."""
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORE)
    model.compile(optimizer=loss_scaled(model, optimizer), loss={"logits": loss})


def make_dataset(features, batch_size, training=False, seed=0, with_labels=True,
                 length_batching="off"):
    """tf.data of (inputs, {"logits": tags}) batches; length_batching: a bert_tf.text.batching
    mode (the per-token tags are cut with the inputs). Features with "frozen" (a frozen
    encoder's outputs, tasks/families/ner/frozen_features.py) give the inputs of the model's head
    alone, {"features", "padding_mask"}, in the batches the token ids would make."""
    import tensorflow as tf

    from bert_tf.text import batching
    n, seq = features["token_ids"].shape
    if "frozen" in features:
        ds = frozen_features.rows(features, with_labels, seed if training else None)
    else:
        x = {k: features[k] for k in ("token_ids", "segment_ids", "padding_mask")}
        ds = tf.data.Dataset.from_tensor_slices(
            (x, {"logits": features["label_ids"]}) if with_labels else x)
        if training:
            ds = ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
    # The tags, and a frozen encoder's features [B, S, ...], are per token: cut with the
    # inputs (by name: batching never guesses from a shape).
    ds = batching.batch(ds, batch_size, length_batching, seq,
                        drop_remainder=training and n >= batch_size, seed=seed,
                        per_token=("logits", "features"))
    return batching.finish(ds)


# ----------------------------------------------------------------------------- prediction

def word_tags(logits, features, sentences, labels):
    """Per-piece logits [N, S, K] -> one tag list per sentence, one tag per word: read on
    each unit's first piece, merged per word (`word_tag`)."""
    best = np.argmax(logits, axis=-1)                                       # [N, S]
    unit_tags = [[None] * len(s.units) for s in sentences]
    rows, cols = np.nonzero(features["word_index"] >= 0)
    for r, c in zip(rows, cols):
        unit_tags[features["sentence_index"][r]][features["word_index"][r, c]] = \
            labels[best[r, c]]
    return [sentence.word_tags(predicted) for sentence, predicted in zip(sentences, unit_tags)]


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
    """The words of a raw text (bert_tf.text.words: whitespace, punctuation and CJK ideographs
    alone; what the NER signature cuts) -> list of (start, end) character offsets."""
    from bert_tf.text import graph_words
    return graph_words.word_spans([text])[0]


def write_predictions(path, conll, predicted):
    """Every input line + " " + predicted tag, blank and -DOCSTART- lines kept (the latter
    with " O" added so that every token line has the same columns); temp name, rename."""
    with atomic_write(path) as f:
        for item in conll.layout:
            if isinstance(item, int):
                for line, tag in zip(conll.sentences[item].lines, predicted[item]):
                    f.write(f"{line} {tag}\n")
            elif item:
                f.write(f"{item} O\n")
            else:
                f.write("\n")


def predict_tags(model, conll, features, labels, batch_size, length_batching="off"):
    """Tags of every sentence of a featurized file."""
    logits = driver.predict_per_token(
        model, make_dataset(features, batch_size, with_labels=False,
                            length_batching=length_batching),
        features["token_ids"].shape[1])["logits"]
    return word_tags(np.asarray(logits), features, conll.sentences, labels)


def _score(name, conll, tags):
    scores = conlleval.evaluate([s.tags for s in conll.sentences], tags)
    metrics = {f"{name}_{k}": v for k, v in scores.items()
               if k in ("precision", "recall", "f1", "accuracy")}
    for type_, values in scores["per_type"].items():
        metrics[f"{name}_{type_}_f1"] = values["f1"]
    return metrics


@family
class NerTask(Task):
    """CoNLL NER for tasks.driver: first word piece of each word labelled, entity-level
    scores (conlleval)."""

    export_name = "ner"           # python -m export.saved_model --task ner
    model_class = BertTokenClassifier
    config_class = NerConfig
    serving_module = NerModule
    result_format = ".2f"

    def check(self, config):
        ner_config.check(config)

    def _length(self, config):
        check_seq_length(config.max_seq_length)
        check_doc_stride(config.doc_stride, config.max_seq_length)
        return config

    def training_config(self, config):
        config = config.replace(max_seq_length=config.max_seq_length or 128)
        return self._length(config.replace(
            doc_stride=config.doc_stride or default_doc_stride(config.max_seq_length)))

    def restore(self, config, saved):
        trained = {k: saved.get(k, v) for k, v in FEATURE_DEFAULTS.items()}
        for name, value in config.feature_settings().items():
            if value not in (FEATURE_DEFAULTS[name], trained[name]):
                raise ValueError(f"--{name}={value}, but the run in {config.output_dir} "
                                 f"was trained with {trained[name]}")
        return self._length(config.replace(
            do_lower_case=saved["do_lower_case"], feature_based=saved["feature_based"],
            **trained,
            max_seq_length=config.max_seq_length or saved["max_seq_length"],
            doc_stride=config.doc_stride or saved.get("doc_stride"),
            vocab_file=config.vocab_file or os.path.join(config.output_dir, "vocab.txt")))

    def read_train(self, config, tokenizer):
        """(the training file's ConllFile, its features)."""
        conll = read_conll(config.train_file, config.line_unit)
        if conll.columns == 1:
            raise ValueError(f"{config.train_file}: no tags to train on (one column)")
        return featurize(config.train_file, tokenizer, label_list(conll),
                         config.max_seq_length, conll, doc_stride=config.doc_stride)[:2]

    def resolved(self, config, settings, train):
        """--line_unit=auto as the training file's lines were read: a resume that names
        that unit is the same run."""
        return dict(settings, line_unit=train[0].line_unit)

    def num_examples(self, train):
        return len(train[1]["token_ids"])

    def settings(self, config, train):
        return BertTokenClassifier.settings(
            label_list(train[0]), config.max_seq_length, config.do_lower_case,
            config.feature_based, doc_stride=config.doc_stride, **config.feature_settings())

    def validation(self, evaluation):
        return evaluation[1]

    def read_eval(self, config, settings, tokenizer):
        """(the evaluation file's ConllFile, its features), or None without --do_eval."""
        if not config.do_eval:
            return None
        return featurize(config.eval_file, tokenizer, settings["labels"],
                         config.max_seq_length, line_unit=config.line_unit,
                         doc_stride=config.doc_stride)[:2]

    def build_model(self, encoder, config, settings, train=None):
        return self.model_class.from_settings(encoder, settings)  # as load_task_model does

    def prepare(self, model, config, train, evaluation):
        """--extracted_features: the frozen features of the training and evaluation files
        read (and checked against the model's frozen layers) before the run writes
        anything."""
        if not (config.extracted_features and model.feature_based):
            return
        for data, source in ((train, config.train_file), (evaluation, config.eval_file)):
            if data is not None:
                data[1]["frozen"] = frozen_features.extracted_features(
                    model.get_layer("frozen_layers"), data[1], config.extracted_features,
                    source)

    def compile(self, model, optimizer, config, jit_compile):
        compile_ner_model(model, optimizer)

    def main_metric(self, config):
        return "eval_f1", "max"          # entity F1 (conlleval), as the paper reports

    def dev_file_flag(self, config):
        return "eval_file"

    def input_files(self, config):
        return super().input_files(config) + self._extracted_files(config)

    def written_files(self, config):
        return ("predictions.txt", "feature_cache")

    def training_files(self, config):
        return super().training_files(config) + self._extracted_files(config)

    def _extracted_files(self, config):
        """[("--extracted_features", path)] of the files --extracted_features matches."""
        if not config.extracted_features:
            return []
        from bert_tf.base.file_patterns import expand_file_patterns
        return [("--extracted_features", path) for path in expand_file_patterns(
            config.extracted_features, flag="--extracted_features")]

    def _cached(self, model, config, features, source):
        """(the model to run, its features): with --feature_based and --cache_features,
        the head alone on the frozen encoder's features (computed once, kept on disk, or
        read from --extracted_features) for the data file `source`."""
        if not (model.feature_based and config.cache_features):
            return model, features
        if "frozen" in features:                      # read in prepare
            return model.feature_head_model(), features
        return frozen_features.head_and_features(
            model, features, os.path.join(config.output_dir, "feature_cache"),
            config.eval_batch_size, config.extracted_features, source)

    def trainer(self, model, train, validation, config, settings):
        """(the model or its head alone, the training features, the validation's)."""
        head, train = self._cached(model, config, train[1], config.train_file)
        if head is not model:
            compile_ner_model(head, model.optimizer)
            if validation is not None:
                validation = self._cached(model, config, validation, config.eval_file)[1]
        return head, train, validation

    def dataset(self, features, config, settings, training):
        return make_dataset(features, driver.batch_size(config, training), training,
                            config.seed, length_batching=driver.length_batching(config,
                                                                               training))

    def evaluate(self, model, evaluation, config, settings):
        conll, features = evaluation
        if conll.columns == 1:
            raise ValueError(f"{config.eval_file}: no gold tags to evaluate (one column)")
        model, features = self._cached(model, config, features, config.eval_file)
        tags = predict_tags(model, conll, features, settings["labels"],
                            config.eval_batch_size, driver.length_batching(config, False))
        return _score("eval", conll, tags)

    def predict(self, model, config, settings, tokenizer, evaluation):
        conll, features, _ = featurize(config.predict_file, tokenizer, settings["labels"],
                                       config.max_seq_length, line_unit=config.line_unit,
                                       doc_stride=config.doc_stride)
        model, features = self._cached(model, config, features, config.predict_file)
        tags = predict_tags(model, conll, features, settings["labels"],
                            config.predict_batch_size, driver.length_batching(config, False))
        write_predictions(os.path.join(config.output_dir, "predictions.txt"), conll, tags)
        return _score("predict", conll, tags) if conll.columns > 1 else {}
