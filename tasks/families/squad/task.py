"""SQuAD v1.1 and v2.0: span model, training, prediction, `SquadTask` for
tasks/driver.py (serving: serving.py's SquadModule; command line: __main__.py, also
`python -m tasks.squad`).

    python -m tasks.squad --init_checkpoint=MODEL_DIR --output_dir=out \
        --do_train --train_file=train-v1.1.json \
        --do_predict --do_eval --predict_file=dev-v1.1.json [--version_2_with_negative]

writes out/predictions.json ({id: answer}), out/nbest_predictions.json, for v2.0
out/null_odds.json ({id: null score - best non-null score}), and with --do_eval
out/eval_results.txt (the official EM/F1; v2.0 also HasAns/NoAns and the tuned
threshold, which is stored in out/squad_config.json for later predictions and export).

The model is the encoder plus one dense layer giving a start and an end logit per
position (bert_tf.BertSpanLabeler); the loss is the mean of the start and end cross-entropies
over positions, as in google-research/bert. Windows (`doc_stride`), max-context choice and
decoding are in postprocess.py, the official metric in metrics.py.

Reading and features (character offsets, windows): data.py.
"""

import collections
import json
import os

import keras
import numpy as np

from bert_tf.models import run_dir
from bert_tf.models.task_models import BertSpanLabeler, loss_scaled
from tasks import driver
from tasks.task import Task, family
from tasks.families.squad import config as squad_config
from tasks.families.squad.config import SquadConfig
from tasks.families.squad import metrics as squad_metrics
from tasks.families.squad import postprocess as squad_postprocess
# The reader and features, as tasks.families.squad.<name> too.
from tasks.families.squad.data import (SquadExample, create_features,  # noqa: F401
                                       featurize, read_squad_examples, tokenize_contexts)
from tasks.families.squad.serving import SquadModule

# ----------------------------------------------------------------------------- model

def compile_squad_model(model, optimizer):
    """google's loss: (start cross-entropy + end cross-entropy) / 2. Under mixed_float16
    the optimizer gets dynamic loss scaling (a functional model does not carry its
    layers' policy, so Keras would not add it by itself)."""
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=loss_scaled(model, optimizer),
                  loss={"start_logits": ce, "end_logits": ce},
                  loss_weights={"start_logits": 0.5, "end_logits": 0.5})


def make_dataset(features, batch_size, training=False, seed=0, with_labels=True,
                 length_batching="off"):
    """tf.data of (inputs, {start_logits, end_logits: positions}) batches;
    length_batching: a bert_tf.text.batching mode."""
    import tensorflow as tf

    from bert_tf.text import batching
    x = {k: features[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    if with_labels:
        y = {"start_logits": features["start_positions"],
             "end_logits": features["end_positions"]}
        ds = tf.data.Dataset.from_tensor_slices((x, y))
    else:
        ds = tf.data.Dataset.from_tensor_slices(x)
    n = len(features["token_ids"])
    if training:
        ds = ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
    # Equal batches keep distributed replicas in step; a set smaller than one batch
    # still trains on what it has.
    return batching.finish(batching.batch(
        ds, batch_size, length_batching, x["token_ids"].shape[1],
        drop_remainder=training and n >= batch_size, seed=seed))


# ----------------------------------------------------------------------------- prediction

def predict_logits(model, features, batch_size, length_batching="off"):
    """-> (start_logits, end_logits), float32 [N, S] (0 past a batch's cut width: never
    inside a window)."""
    out = driver.predict_per_token(
        model, make_dataset(features, batch_size, with_labels=False,
                            length_batching=length_batching),
        features["token_ids"].shape[1])
    return np.asarray(out["start_logits"]), np.asarray(out["end_logits"])


def postprocess(examples, contexts, features, start_logits, end_logits, n_best_size=20,
                max_answer_length=30, version_2_with_negative=False,
                null_score_diff_threshold=0.0):
    """Every example's answer: {qas_id: example_result(...)}, decoded by the export's op
    over all windows at once (postprocess.decode_windows)."""
    example_index = np.asarray(features["example_index"], np.int64)
    decoded = squad_postprocess.decode_windows(
        start_logits, end_logits, features["offsets"], features["max_context"],
        example_index, len(examples), n_best_size, max_answer_length)
    rows = collections.defaultdict(list)
    for i, e in enumerate(example_index.tolist()):
        rows[e].append(i)
    results = {}
    for e, example in enumerate(examples):
        if e not in rows:
            continue
        results[example.qas_id] = squad_postprocess.example_result(
            contexts[example.context_index], decoded, e, rows[e], features["offsets"],
            start_logits, end_logits, n_best_size, version_2_with_negative,
            null_score_diff_threshold)
    return results


def write_predictions(results, output_dir, version_2_with_negative):
    """predictions.json, nbest_predictions.json (+ null_odds.json for v2.0)."""
    run_dir.write_json(os.path.join(output_dir, "predictions.json"),
                        {q: r["text"] for q, r in results.items()})
    run_dir.write_json(os.path.join(output_dir, "nbest_predictions.json"),
                        {q: r["nbest"] for q, r in results.items()})
    if version_2_with_negative:
        # +inf (no possible span) is written as JSON's Infinity, which Python's and the
        # official script's json.load read back.
        run_dir.write_json(os.path.join(output_dir, "null_odds.json"),
                            {q: r["null_score_diff"] for q, r in results.items()})


def evaluate_results(dataset, results, version_2_with_negative, threshold):
    """Official metrics of decoded results; v2.0 adds the threshold search over the best
    non-null answers and their null score differences."""
    predictions = {q: r["text"] for q, r in results.items()}
    if not version_2_with_negative:
        return squad_metrics.evaluate(dataset, predictions, "1.1")
    metrics = squad_metrics.evaluate(
        dataset, predictions, "2.0",
        na_probs={q: r["null_score_diff"] for q, r in results.items()},
        na_prob_thresh=threshold,
        best_predictions={q: r["best_non_null"] for q, r in results.items()})
    return metrics


@family
class SquadTask(Task):
    """SQuAD v1.1/v2.0 for tasks.driver: windows of the context, span logits, decoding
    and the official metrics; v2.0 tunes the no-answer threshold on dev and keeps it."""

    export_name = "squad"           # python -m export.saved_model --task squad
    model_class = BertSpanLabeler
    config_class = SquadConfig
    serving_module = SquadModule

    def check(self, config):
        squad_config.check(config)

    def training_config(self, config):
        return squad_config.filled(config, {})

    def restore(self, config, saved):
        return squad_config.filled(config.replace(
            do_lower_case=saved["do_lower_case"],
            vocab_file=config.vocab_file or os.path.join(config.output_dir, "vocab.txt")),
            saved)

    def text_segments(self, config):
        return 2    # the question, then the context window

    def read_train(self, config, tokenizer):
        return featurize(config.train_file, tokenizer, config, is_training=True)[3]

    def num_examples(self, features):
        return len(features["token_ids"])

    def training_files(self, config):
        # The predict file is the validation set too (read_eval).
        return [("--train_file", config.train_file)] + (
            [("--predict_file", config.predict_file)]
            if config.do_eval and config.predict_file else [])

    def settings(self, config, train):
        return BertSpanLabeler.settings(config.max_seq_length, config.do_lower_case,
                                        **squad_config.window_settings(config))

    def read_eval(self, config, settings, tokenizer):
        """The predict file's examples and features (what --do_eval scores, --do_predict
        predicts and training validates on), or None without it."""
        if config.predict_file and (config.do_predict or config.do_eval):
            return featurize(config.predict_file, tokenizer, config, is_training=False)
        return None

    def validation(self, dev):
        return dev[3]

    def build_model(self, encoder, config, settings, train=None):
        return BertSpanLabeler(encoder)

    def written_files(self, config):
        return ("predictions.json", "nbest_predictions.json", "null_odds.json")

    def main_metric(self, config):
        # The official F1 (v2.0: at --null_score_diff_threshold, the one a run predicts
        # and exports with).
        return "f1", "max"

    def dev_file_flag(self, config):
        return "predict_file"     # the file --do_eval scores

    def compile(self, model, optimizer, config, jit_compile):
        compile_squad_model(model, optimizer)

    def dataset(self, features, config, settings, training):
        return make_dataset(features, driver.batch_size(config, training), training,
                            config.seed, length_batching=driver.length_batching(config,
                                                                               training))

    def _decode(self, model, dev, config):
        """Decoded answers of the predict file, written (predictions.json, ...)."""
        examples, contexts, _, features, _ = dev
        start, end = predict_logits(model, features, config.predict_batch_size,
                                    driver.length_batching(config, training=False))
        results = postprocess(examples, contexts, features, start, end, config.n_best_size,
                              config.max_answer_length, config.version_2_with_negative,
                              config.null_score_diff_threshold)
        write_predictions(results, config.output_dir, config.version_2_with_negative)
        return results

    def evaluate(self, model, dev, config, settings):
        metrics = evaluate_results(dev[2], self._decode(model, dev, config),
                                   config.version_2_with_negative,
                                   config.null_score_diff_threshold)
        if config.version_2_with_negative and config.do_train:
            # The threshold tuned on dev is the one to predict and export with.
            run_dir.write_json(os.path.join(config.output_dir, f"{self.name}_config.json"),
                               dict(settings, null_score_diff_threshold=metrics[
                                   "best_f1_thresh"]))
        return metrics

    def predict(self, model, config, settings, tokenizer, dev):
        # With --do_eval the answers were decoded and written by evaluate (the same
        # file, the same weights and settings).
        if not config.do_eval:
            self._decode(model, dev, config)
        return {}

    def print_results(self, results):
        print(json.dumps(results, indent=2, sort_keys=True), flush=True)
