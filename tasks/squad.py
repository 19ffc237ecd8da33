"""SQuAD v1.1 and v2.0: reader, windowed features, span model, training, prediction, CLI.

    python -m tasks.squad --init_checkpoint=MODEL_DIR --output_dir=out \
        --do_train --train_file=train-v1.1.json \
        --do_predict --do_eval --predict_file=dev-v1.1.json [--version_2_with_negative]

writes out/predictions.json ({id: answer}), out/nbest_predictions.json, for v2.0
out/null_odds.json ({id: null score - best non-null score}), and with --do_eval
out/eval_results.txt (the official EM/F1; v2.0 also HasAns/NoAns and the tuned
threshold, which is stored in out/squad_config.json for later predictions and export).

The model is the encoder plus one dense layer giving a start and an end logit per
position (`build_squad_model`); the loss is the mean of the start and end cross-entropies
over positions, as in google-research/bert. Windows (`doc_stride`), max-context choice and
decoding are in tasks/squad_postprocess.py, the official metric in tasks/squad_metrics.py.

Pre-processing keeps per-piece character offsets into the context instead of google's
whitespace-token maps: a context is split on whitespace as run_squad does (each word
tokenized alone, which is exact for google's tokenizer), and every word piece records the
characters it came from. Training answers are re-aligned to the pieces that overlap the
annotated characters; predicted spans map back to the exact original characters.
"""

import collections
import dataclasses
import json
import os

import keras
import numpy as np

from bert_tf.flags import run_command
from tasks import common, squad_metrics, squad_postprocess, task_dir

TASK = "squad"
# run_squad's whitespace: the four ASCII ones and U+202F (narrow no-break space).
_WHITESPACE = frozenset(" \t\r\n\u202f")
DEFAULTS = dict(max_seq_length=384, doc_stride=128, max_query_length=64, n_best_size=20,
                max_answer_length=30, null_score_diff_threshold=0.0)


# ----------------------------------------------------------------------------- reading

@dataclasses.dataclass
class SquadExample:
    """One question. answers: [{"text", "answer_start"}] as in the file; for training,
    answer_start/answer_end are the character span of the first answer (end exclusive),
    -1 for unanswerable questions."""
    qas_id: str
    question: str
    context_index: int        # index into the list of contexts returned with the examples
    answers: list
    is_impossible: bool
    answer_start: int = -1
    answer_end: int = -1


def _load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: file not found") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 ({e})") from None


def _field(obj, key, kind, path, where):
    if not isinstance(obj, dict) or key not in obj:
        raise ValueError(f"{path}: {where}: missing \"{key}\"")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ValueError(f"{path}: {where}.{key}: expected {names}, got "
                         f"{type(value).__name__}")
    return value


def read_squad_examples(path, version_2_with_negative=False, is_training=False):
    """Reads a SQuAD JSON file (v1.1 or v2.0 layout).

    Returns (examples, contexts, dataset, report): SquadExample list, the list of context
    strings they index, the file's "data" list (for the official metric) and a Counter of
    what was skipped and why. Structural problems (not JSON, missing keys, wrong types)
    raise ValueError naming the file and the JSON path; data problems are counted:
    empty contexts and questions are skipped; in training, questions without an answer
    (v1.1), and answers whose text is not at their answer_start in the context, are
    skipped too, as run_squad skips answers it cannot recover.
    """
    data = _field(_load_json(path), "data", list, path, "top level")
    examples, contexts, report = [], [], collections.Counter()
    seen = set()
    for a, article in enumerate(data):
        paragraphs = _field(article, "paragraphs", list, path, f"data[{a}]")
        for p, paragraph in enumerate(paragraphs):
            where = f"data[{a}].paragraphs[{p}]"
            context = _field(paragraph, "context", str, path, where)
            qas = _field(paragraph, "qas", list, path, where)
            if not context.strip():
                report["empty_context"] += len(qas)
                continue
            contexts.append(context)
            for q, qa in enumerate(qas):
                qwhere = f"{where}.qas[{q}]"
                qid = str(_field(qa, "id", (str, int), path, qwhere))
                if qid in seen:
                    raise ValueError(f"{path}: {qwhere}: duplicate question id {qid!r}")
                seen.add(qid)
                question = _field(qa, "question", str, path, qwhere)
                answers = qa.get("answers", [])
                if not isinstance(answers, list):
                    raise ValueError(f"{path}: {qwhere}.answers: expected a list")
                for i, answer in enumerate(answers):
                    _field(answer, "text", str, path, f"{qwhere}.answers[{i}]")
                    _field(answer, "answer_start", int, path, f"{qwhere}.answers[{i}]")
                impossible = bool(qa.get("is_impossible", False)) or not answers
                if impossible and not version_2_with_negative:
                    # v1.1 has no unanswerable questions: without an answer there is
                    # nothing to train on (eval still counts it as a question).
                    report["no_answer"] += 1
                    if is_training:
                        continue
                if not question.strip():
                    report["empty_question"] += 1
                    continue
                example = SquadExample(qid, question, len(contexts) - 1, answers,
                                       impossible and version_2_with_negative)
                if answers and not example.is_impossible:
                    text, start = answers[0]["text"], answers[0]["answer_start"]
                    found = context[start:start + len(text)] == text and text.strip()
                    if found:
                        example.answer_start, example.answer_end = start, start + len(text)
                    else:
                        report["answer_not_in_context"] += 1
                        if is_training:
                            continue
                examples.append(example)
    report["questions"] = len(examples)
    return examples, contexts, data, report


def split_words(text):
    """run_squad's whitespace split -> list of (word, char_start)."""
    words, start = [], None
    for i, ch in enumerate(text):
        if ch in _WHITESPACE:
            if start is not None:
                words.append((text[start:i], start))
                start = None
        elif start is None:
            start = i
    if start is not None:
        words.append((text[start:], start))
    return words


# ----------------------------------------------------------------------------- features

@dataclasses.dataclass
class DocPieces:
    """A context's word pieces: ids [P] int32, offsets [P, 2] int32 character offsets
    into the context (end exclusive)."""
    ids: np.ndarray
    offsets: np.ndarray


def _byte_to_char(word):
    """[bytes + 1] int: the character index of each UTF-8 byte of `word` (and its end)."""
    lengths = [len(ch.encode("utf-8")) for ch in word]
    return np.concatenate([np.repeat(np.arange(len(word)), lengths), [len(word)]])


def tokenize_words(tokenizer, words, chunk=8192):
    """Tokenizes each word alone. Returns (ids, char_starts, char_ends), lists of int32
    arrays, one per word; offsets are characters into the word."""
    import tensorflow as tf
    out_ids, out_starts, out_ends = [], [], []
    for i in range(0, len(words), chunk):
        batch = words[i:i + chunk]
        ids, starts, ends = tokenizer.tokenize_with_offsets(
            tf.constant([w.encode("utf-8") for w in batch], tf.string))
        splits = ids.row_splits.numpy()
        flat_ids = ids.flat_values.numpy()
        flat_starts, flat_ends = starts.flat_values.numpy(), ends.flat_values.numpy()
        for j, word in enumerate(batch):
            lo, hi = splits[j], splits[j + 1]
            s, e = flat_starts[lo:hi], flat_ends[lo:hi]
            if len(word.encode("utf-8")) != len(word):      # non-ASCII: bytes -> chars
                to_char = _byte_to_char(word)
                s, e = to_char[s], to_char[e]
            out_ids.append(flat_ids[lo:hi].astype(np.int32))
            out_starts.append(np.asarray(s, np.int32))
            out_ends.append(np.asarray(e, np.int32))
    return out_ids, out_starts, out_ends


def tokenize_contexts(tokenizer, contexts):
    """Each context -> DocPieces (every word tokenized alone, as run_squad does)."""
    words, owner, bases = [], [], []
    for c, context in enumerate(contexts):
        for word, start in split_words(context):
            words.append(word)
            owner.append(c)
            bases.append(start)
    ids, starts, ends = tokenize_words(tokenizer, words)
    per_context = [([], []) for _ in contexts]
    for w, c in enumerate(owner):
        per_context[c][0].append(ids[w])
        per_context[c][1].append(np.stack([starts[w], ends[w]], axis=1) + bases[w])
    out = []
    for piece_ids, offsets in per_context:
        out.append(DocPieces(
            np.concatenate(piece_ids).astype(np.int32) if piece_ids else
            np.zeros([0], np.int32),
            np.concatenate(offsets).astype(np.int32) if offsets else
            np.zeros([0, 2], np.int32)))
    return out


def answer_piece_span(offsets, start_char, end_char):
    """The pieces [first, last] covering the characters [start_char, end_char): the first
    piece ending after the answer starts, the last starting before it ends (a piece that
    holds more than the answer, "Japanese" for "Japan", is taken whole, as run_squad
    does). None when no piece overlaps (an answer of deleted characters only)."""
    first = int(np.searchsorted(offsets[:, 1], start_char, side="right"))
    last = int(np.searchsorted(offsets[:, 0], end_char, side="left")) - 1
    if first > last or first >= len(offsets) or last < 0:
        return None
    return first, last


def create_features(examples, doc_pieces, question_ids, max_seq_length, doc_stride,
                    max_query_length, cls_id, sep_id, pad_id=0, is_training=False):
    """Windows of every example -> dict of numpy arrays, one row per window:

      token_ids, segment_ids, padding_mask  int32 [N, S]   [CLS] question [SEP] window [SEP]
      start_positions, end_positions        int32 [N]      answer pieces; 0 ([CLS]) when
                                                           the window lacks the answer
      offsets                               int32 [N, S, 2] context characters; -1 elsewhere
      max_context                           bool  [N, S]   piece has its max context here
      example_index                         int32 [N]

    Returns (features, report). In training, an answer no piece overlaps drops the example
    (counted as "answer_not_aligned").
    """
    report = collections.Counter()
    rows = collections.defaultdict(list)
    for e, example in enumerate(examples):
        query = list(question_ids[e][:max_query_length])
        if len(question_ids[e]) > max_query_length:
            report["question_truncated"] += 1
        doc = doc_pieces[example.context_index]
        if len(doc.ids) == 0:
            report["context_without_pieces"] += 1
            continue
        answer = None
        if example.answer_start >= 0:
            answer = answer_piece_span(doc.offsets, example.answer_start, example.answer_end)
            if answer is None:
                report["answer_not_aligned"] += 1
                if is_training:
                    continue
        max_doc = max_seq_length - len(query) - 3
        spans = squad_postprocess.doc_spans(len(doc.ids), max_doc, doc_stride)
        best_window = squad_postprocess.max_context_window(spans, len(doc.ids))
        if len(spans) > 1:
            report["split_into_windows"] += 1
        for w, (start, length) in enumerate(spans):
            doc_offset = len(query) + 2                    # [CLS] query [SEP]
            n = doc_offset + length + 1
            token_ids = np.full(max_seq_length, pad_id, np.int32)
            token_ids[:n] = [cls_id] + query + [sep_id] + \
                doc.ids[start:start + length].tolist() + [sep_id]
            segment_ids = np.zeros(max_seq_length, np.int32)
            segment_ids[doc_offset:n] = 1
            mask = np.zeros(max_seq_length, np.int32)
            mask[:n] = 1
            offsets = np.full((max_seq_length, 2), -1, np.int32)
            offsets[doc_offset:doc_offset + length] = doc.offsets[start:start + length]
            max_context = np.zeros(max_seq_length, bool)
            max_context[doc_offset:doc_offset + length] = \
                best_window[start:start + length] == w
            s_pos = e_pos = 0
            if answer is not None and start <= answer[0] and answer[1] < start + length:
                s_pos, e_pos = answer[0] - start + doc_offset, answer[1] - start + doc_offset
            for key, value in (("token_ids", token_ids), ("segment_ids", segment_ids),
                               ("padding_mask", mask), ("start_positions", s_pos),
                               ("end_positions", e_pos), ("offsets", offsets),
                               ("max_context", max_context), ("example_index", e)):
                rows[key].append(value)
    if not rows:
        raise ValueError("no features: every example was skipped (see the report)")
    features = {k: np.asarray(v) for k, v in rows.items()}
    for k in ("start_positions", "end_positions", "example_index"):
        features[k] = features[k].astype(np.int32)
    report["features"] = len(features["token_ids"])
    return features, report


def featurize(path, tokenizer, args, is_training):
    """Reads `path` and builds its features. Returns (examples, contexts, dataset,
    features, report)."""
    examples, contexts, dataset, report = read_squad_examples(
        path, args.version_2_with_negative, is_training)
    if not examples:
        raise ValueError(f"{path}: no usable questions ({dict(report)})")
    doc_pieces = tokenize_contexts(tokenizer, contexts)
    question_ids = tokenizer.encode([ex.question for ex in examples])
    features, feature_report = create_features(
        examples, doc_pieces, question_ids, args.max_seq_length, args.doc_stride,
        args.max_query_length, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
        is_training)
    report.update(feature_report)
    print(f"{path}: {dict(sorted(report.items()))}", flush=True)
    return examples, contexts, dataset, features, report


# ----------------------------------------------------------------------------- model

@keras.saving.register_keras_serializable(package="bert_tf")
class SpanLogits(keras.layers.Layer):
    """Dense(2) on every position -> start and end logits [batch, seq], float32 (google's
    cls/squad/output_weights: one vector each for start and end)."""

    def __init__(self, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(
            2, kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            dtype=self.dtype_policy, name="logits")

    def build(self, input_shape):
        self.dense.build(input_shape)

    def call(self, sequence_output):
        logits = keras.ops.cast(self.dense(sequence_output), "float32")   # [B, S, 2]
        return logits[..., 0], logits[..., 1]

    def get_config(self):
        config = super().get_config()
        config["initializer_range"] = self.initializer_range
        return config


def build_squad_model(encoder):
    """encoder (a BertEncoder) + SpanLogits -> keras.Model:
    {token_ids, segment_ids, padding_mask} int32 [B, S] -> {start_logits, end_logits}
    float32 [B, S]."""
    # The pooler feeds nothing here; frozen, it stays out of the optimizer.
    encoder.pooler.trainable = False
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
              for name in ("token_ids", "segment_ids", "padding_mask")}
    sequence_output = encoder(inputs)["sequence_output"]           # [B, S, H]
    # The head computes in the encoder's policy, read from one of its layers: a Keras
    # functional model's own dtype_policy says float32 whatever its layers use.
    start, end = SpanLogits(encoder.bert_config.initializer_range,
                            dtype=encoder.pooler.dtype_policy,
                            name="squad_head")(sequence_output)
    outputs = {"start_logits": keras.layers.Identity(name="start_logits")(start),
               "end_logits": keras.layers.Identity(name="end_logits")(end)}
    return keras.Model(inputs, outputs, name="squad")


def load_squad_model(output_dir, dtype=None, weights=None):
    """(model, config, tokenizer) of a fine-tuned SQuAD run in output_dir."""
    return task_dir.load_task_model(
        output_dir, TASK, lambda encoder, config: build_squad_model(encoder), dtype, weights)


def compile_squad_model(model, optimizer):
    """google's loss: (start cross-entropy + end cross-entropy) / 2. Under mixed_float16
    the optimizer gets dynamic loss scaling (a functional model does not carry its
    layers' policy, so Keras would not add it by itself)."""
    if model.get_layer("squad_head").dtype_policy.name == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=optimizer,
                  loss={"start_logits": ce, "end_logits": ce},
                  loss_weights={"start_logits": 0.5, "end_logits": 0.5})


def make_dataset(features, batch_size, training=False, seed=0, with_labels=True,
                 length_batching="off"):
    """tf.data of (inputs, {start_logits, end_logits: positions}) batches;
    length_batching: a bert_tf.batching mode."""
    import tensorflow as tf

    from bert_tf import batching
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
    return batching.batch(ds, batch_size, length_batching, x["token_ids"].shape[1],
                          drop_remainder=training and n >= batch_size,
                          seed=seed).prefetch(2)


# ----------------------------------------------------------------------------- prediction

def predict_logits(model, features, batch_size, length_batching="off"):
    """-> (start_logits, end_logits), float32 [N, S] (0 past a batch's cut width: never
    inside a window)."""
    out = common.predict_per_token(
        model, make_dataset(features, batch_size, with_labels=False,
                            length_batching=length_batching),
        features["token_ids"].shape[1])
    return np.asarray(out["start_logits"]), np.asarray(out["end_logits"])


def postprocess(examples, contexts, features, start_logits, end_logits, n_best_size=20,
                max_answer_length=30, version_2_with_negative=False,
                null_score_diff_threshold=0.0):
    """Every example's answer: {qas_id: decode_example(...) result}."""
    windows = collections.defaultdict(list)
    for i, e in enumerate(features["example_index"]):
        windows[int(e)].append({"start_logits": start_logits[i], "end_logits": end_logits[i],
                                "offsets": features["offsets"][i],
                                "max_context": features["max_context"][i]})
    results = {}
    for e, example in enumerate(examples):
        if e not in windows:
            continue
        results[example.qas_id] = squad_postprocess.decode_example(
            contexts[example.context_index], windows[e], n_best_size, max_answer_length,
            version_2_with_negative, null_score_diff_threshold)
    return results


def write_predictions(results, output_dir, version_2_with_negative):
    """predictions.json, nbest_predictions.json (+ null_odds.json for v2.0)."""
    task_dir.write_json(os.path.join(output_dir, "predictions.json"),
                        {q: r["text"] for q, r in results.items()})
    task_dir.write_json(os.path.join(output_dir, "nbest_predictions.json"),
                        {q: r["nbest"] for q, r in results.items()})
    if version_2_with_negative:
        # +inf (no possible span) is written as JSON's Infinity, which Python's and the
        # official script's json.load read back.
        task_dir.write_json(os.path.join(output_dir, "null_odds.json"),
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


# ----------------------------------------------------------------------------- CLI

def add_flags(parser):
    common.add_common_flags(parser)
    f = parser.add_argument
    f("--train_file", default=None, help="SQuAD JSON for training")
    f("--predict_file", default=None,
      help="SQuAD JSON to predict (--do_predict) and score (--do_eval); also the "
           "validation set that picks best.weights.h5 during training")
    # Left unset, these take the values stored in output_dir by the training run when
    # predicting without --do_train, else DEFAULTS.
    f("--version_2_with_negative", type=common.str2bool, nargs="?", const=True, default=None,
      help="SQuAD 2.0: questions may have no answer (default False)")
    f("--doc_stride", type=int, default=None, help=f"default {DEFAULTS['doc_stride']}")
    f("--max_query_length", type=int, default=None,
      help=f"default {DEFAULTS['max_query_length']}")
    f("--n_best_size", type=int, default=None, help=f"default {DEFAULTS['n_best_size']}")
    f("--max_answer_length", type=int, default=None,
      help=f"default {DEFAULTS['max_answer_length']}")
    f("--null_score_diff_threshold", type=float, default=None,
      help="v2.0: answer '' when null score - best non-null score exceeds this; default: "
           "the value tuned on dev (stored in output_dir by --do_train --do_eval), else 0.0")
    parser.set_defaults(max_seq_length=None)
    return parser


def _fill_defaults(args, saved):
    """Unset flags take the training run's values (predicting), else DEFAULTS."""
    for key, default in dict(DEFAULTS, version_2_with_negative=False).items():
        if getattr(args, key) is None:
            setattr(args, key, saved.get(key, default))


def _check_args(args):
    if args.do_train and not args.train_file:
        raise ValueError("--do_train needs --train_file")
    if (args.do_predict or args.do_eval) and not args.predict_file:
        raise ValueError("--do_predict/--do_eval need --predict_file")
    if args.max_seq_length <= args.max_query_length + 3:
        raise ValueError(f"--max_seq_length ({args.max_seq_length}) must be greater than "
                         f"--max_query_length ({args.max_query_length}) + 3")
    for name in ("doc_stride", "n_best_size", "max_answer_length"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1")


def run(args):
    """The CLI's work, on parsed flags. Returns the eval metrics (or {})."""
    from bert_tf.tokenization import BertTokenizer
    if not (args.do_train or args.do_predict or args.do_eval):
        raise ValueError("nothing to do: pass --do_train, --do_predict and/or --do_eval")
    saved = {}
    if not args.do_train:
        saved = task_dir.read_task_config(args.output_dir, TASK)
        if args.vocab_file is None:
            args.vocab_file = os.path.join(args.output_dir, "vocab.txt")
        args.do_lower_case = saved["do_lower_case"]
    _fill_defaults(args, saved)
    _check_args(args)
    os.makedirs(args.output_dir, exist_ok=True)
    if args.do_train:
        common.resolve_paths(args)
    # The strategy first: --cpu_devices must split the CPU before any TensorFlow op runs.
    strategy = common.create_strategy(args)
    tokenizer = BertTokenizer(args.vocab_file, do_lower_case=args.do_lower_case)

    train = dev = None
    if args.do_train:
        train = featurize(args.train_file, tokenizer, args, is_training=True)
    if args.predict_file and (args.do_predict or args.do_eval):
        dev = featurize(args.predict_file, tokenizer, args, is_training=False)

    task_config = {"task": TASK, "do_lower_case": args.do_lower_case,
                   "max_seq_length": args.max_seq_length, "doc_stride": args.doc_stride,
                   "max_query_length": args.max_query_length,
                   "n_best_size": args.n_best_size,
                   "max_answer_length": args.max_answer_length,
                   "version_2_with_negative": args.version_2_with_negative,
                   "null_score_diff_threshold": args.null_score_diff_threshold}
    with strategy.scope():
        encoder = common.task_encoder(args)
        model = build_squad_model(encoder)
        if args.do_train:
            features = train[3]
            optimizer, num_steps = common.create_optimizer(
                args, len(features["token_ids"]), model.trainable_variables)
            compile_squad_model(model, optimizer)
    if args.do_train:
        task_dir.save_task_files(args.output_dir, TASK, task_config, encoder.bert_config,
                                 args.vocab_file)
        train_ds = make_dataset(features, args.train_batch_size, training=True,
                                seed=args.seed,
                                length_batching=common.length_batching(args, True))
        eval_ds = make_dataset(dev[3], args.eval_batch_size,
                               length_batching=common.length_batching(args, False)) \
            if dev else None
        common.fit(model, train_ds, eval_ds, args, num_steps,
                   monitor="val_loss" if eval_ds is not None else None, mode="min")
    model.load_weights(task_dir.weights_file(args.output_dir))

    metrics = {}
    if dev:
        examples, contexts, dataset, features, _ = dev
        start, end = predict_logits(model, features, args.predict_batch_size,
                                    common.length_batching(args, training=False))
        results = postprocess(examples, contexts, features, start, end, args.n_best_size,
                              args.max_answer_length, args.version_2_with_negative,
                              args.null_score_diff_threshold)
        write_predictions(results, args.output_dir, args.version_2_with_negative)
        if args.do_eval:
            metrics = evaluate_results(dataset, results, args.version_2_with_negative,
                                       args.null_score_diff_threshold)
            common.write_results(os.path.join(args.output_dir, "eval_results.txt"), metrics)
            print(json.dumps(metrics, indent=2, sort_keys=True), flush=True)
            if args.version_2_with_negative and args.do_train:
                # The threshold tuned on dev is the one to predict and export with.
                task_config["null_score_diff_threshold"] = metrics["best_f1_thresh"]
                task_dir.write_json(os.path.join(args.output_dir, f"{TASK}_config.json"),
                                    task_config)
    return metrics


def main(argv=None):
    parser = add_flags(common.parser("Fine-tune and evaluate BERT on SQuAD v1.1 / v2.0."))
    return run_command(run, parser.parse_args(argv))


if __name__ == "__main__":
    main()
