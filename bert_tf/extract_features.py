"""Contextual token vectors from a pretrained encoder, as google-research/bert's
extract_features.py writes them.

    python -m bert_tf.extract_features --input_file=input.txt --output_file=out.jsonl \
        --init_checkpoint=MODEL_DIR [--layers=-1,-2,-3,-4] [--max_seq_length=128]

Input: one example per line; "text A ||| text B" for a pair. Output: one JSON object per
input line, in order:

    {"linex_index": 0, "features": [{"token": "[CLS]",
                                      "layers": [{"index": -1, "values": [...]}, ...]},
                                     ...]}

one entry per word piece of the packed input ([CLS] A [SEP] (B [SEP]), padding left
out), values rounded to 6 decimals as google's are. Layer indexes count the transformer
layers' outputs (-1 = last, 0 = first; the embeddings are not a layer here). Pairs are
truncated with the fine-tuning rule (pop from the longer); an empty line gives
[CLS] [SEP] and is counted in the summary on stderr.

A single text longer than max_seq_length - 2 pieces is cut there, as google's is, unless
--doc_stride is given: then it is read in windows of max_seq_length - 2 pieces starting
doc_stride pieces apart (bert_tf/text/windows.py, SQuAD's windows), and its features are
every piece of the text, each from the window where it has the most context, between
the first window's [CLS] and the last one's [SEP]. Pairs are cut either way.

`--output_format=tfrecord` writes the same examples compactly: a tf.train.Example each
(bert_tf/base/feature_records.py: linex_index, token_ids, layers counted from the first
(0; -1 is the last), shape = (tokens, layers, H), the float32 values as computed,
token-major), read back by `read_tfrecord_features`, tf.data, or the feature-based NER
recipe (`python -m tasks.ner --feature_based --extracted_features=...`).

Two engines, one output: the local engine (default) and `--runner=...` (Apache Beam:
`pip install 'bert-tf[beam]'`; Beam's flags go after ours), whose RunInference step
loads the encoder once per worker process and runs each window of batch_size x 16
examples (the local engine's unit of batching and of resuming) through the same
`extract`; each window's lines are written whole as a part file under
`OUTPUT.tmp.parts/` (`part-<first example>.jsonl` or `.tfrecord`, by the format), and
the parts, joined in order, are the local engine's bytes. A stopped Beam run keeps its
parts for the same command; with other inputs or flags it starts over.

The same bytes, wherever a run starts: the batches of a window are cut from the
window's examples alone (windows start at fixed multiples of batch_size x 16 from the
first line), and every batch, of any shape, runs through one graph traced for open
shapes (`layer_function`), so an example's floats do not depend on which batches ran
before it in the process. A run from the first line, a run resumed after a stop, and
Beam's windows on any workers write the same bytes, in both formats (on one kind of
CPU: another instruction set may round differently).

Beam's engine also reads and writes URLs (`gs://...`) through Beam's file systems
(bert_tf/data/storage.py), as create_pretraining_data and export.batch_predict do; the
local engine takes local paths.

Why one file: the two engines and the two formats must give the same bytes for the same
examples; `extract`, the line formats and both writers are read side by side.
"""

import argparse
import contextlib
import functools
import json
import os
import re
import sys

import numpy as np

from bert_tf.base.feature_records import encode_feature_record, read_feature_records
from bert_tf.base.cli import (ArgumentParser, boolean, check_not_inputs, check_output_place,
                              check_seq_length, run_main)
from bert_tf.base.files import TMP_SUFFIX, decode_text, read_text
from bert_tf.data import storage
from bert_tf.base.input_names import INPUT_NAMES
from bert_tf.text.windows import check_doc_stride

_PAIR = re.compile(r"^(.*) \|\|\| (.*)$")


def read_examples(path):
    """Lines of `path` -> list of (text_a, text_b or None), google's rule: stripped line,
    split at " ||| " (the last one).

    Lines end at "\n" only, as google's readline() loop reads them: a line may hold other
    Unicode line separators (U+2028, U+0085, form feed, a lone "\r"), which str.splitlines()
    would split on, shifting every later linex_index."""
    if storage.is_url(path):       # the Beam engine's input (bert_tf/data/storage.py)
        text = decode_text(storage.read_bytes(path), path)
    else:
        text = read_text(path)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()                 # the file's final newline ends a line, it opens none
    examples = []
    for line in lines:
        line = line.strip()
        match = _PAIR.match(line)
        examples.append((match.group(1), match.group(2)) if match else (line, None))
    return examples


def parse_layers(text, num_layers=None):
    """"-1,-2" -> [-1, -2]; error for a malformed list or (given num_layers) an index
    outside the encoder."""
    try:
        layers = [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--layers must be comma-separated integers, got {text!r}") from None
    for index in layers if num_layers is not None else ():
        if not -num_layers <= index < num_layers:
            raise ValueError(f"--layers: index {index} is outside the encoder's "
                             f"{num_layers} layers ({-num_layers}..{num_layers - 1})")
    return layers


def cut(ids_a, ids_b, max_seq_length):
    """Piece ids of one example -> (A, B) truncated to max_seq_length with [CLS] and
    [SEP] (google's extract_features rule); B [] for a single text."""
    from bert_tf.text.packing import truncate_seq_pair
    ids_a = list(ids_a)
    if ids_b is None:
        return ids_a[:max_seq_length - 2], []
    ids_b = list(ids_b)
    truncate_seq_pair(ids_a, ids_b, max_seq_length - 3)
    return ids_a, ids_b


def pack_many(rows, cls_id, sep_id):
    """`cut` rows -> per row packed ids [CLS] A [SEP] (B [SEP]) and segment ids (lists,
    unpadded), laid out by the project's one packer (bert_tf.text.packing.pack_rows)."""
    from bert_tf.text.packing import pack_rows
    if not rows:
        return []
    packed = pack_rows([a for a, _ in rows], [b for _, b in rows], None, cls_id, sep_id)
    lengths = packed["padding_mask"].sum(1)
    return [(ids[:n].tolist(), segments[:n].tolist()) for ids, segments, n in
            zip(packed["token_ids"], packed["segment_ids"], lengths)]


def pack(ids_a, ids_b, max_seq_length, cls_id, sep_id):
    """Piece ids of one example -> packed ids [CLS] A [SEP] (B [SEP]) and segment ids
    (lists, unpadded): `cut`, then `pack_many`."""
    return pack_many([cut(ids_a, ids_b, max_seq_length)], cls_id, sep_id)[0]


def text_windows(ids, max_seq_length, doc_stride):
    """A single text's piece ids -> (windows, best): windows, a list of (first, end)
    piece ranges of at most max_seq_length - 2 pieces (bert_tf/text/windows.py; one that
    ends at max_seq_length - 2 without doc_stride, google's cut); best, each piece's
    window (max context), or None for one window."""
    from bert_tf.text import windows
    room = max_seq_length - 2
    if doc_stride is None or len(ids) <= room:
        return [(0, min(len(ids), room))], None
    row, first, end = windows.windows([0], [len(ids)], room, doc_stride)
    best, _ = windows.max_context(row, first, end, [0], [len(ids)])
    return list(zip(first.numpy().tolist(), end.numpy().tolist())), best.numpy()


def layer_model(encoder, layers):
    """A Keras model: encoder inputs -> list of the chosen layers' outputs [B, S, H]."""
    import keras
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
              for name in INPUT_NAMES}
    outputs = encoder(inputs)["encoder_outputs"]
    return keras.Model(inputs, [outputs[i] for i in layers])


def layer_function(encoder, layers):
    """{input name: int32 [B, S]} -> the chosen layers' outputs, a float32 [B, S, H]
    array each, through ONE graph traced for any batch shape.

    Why one graph: Keras' predict_on_batch traces its first call for that call's exact
    shape, and a later call of a shape no trace fits for the dimensions that differ left
    open; graphs traced for known and for open shapes compute slightly different floats
    (up to 2e-6 apart on MiniLM's weights: the graph is rewritten by the shapes it
    knows). A batch's vectors then depended on the shapes called before it in the same
    process, that is on where the run started: a resumed run, and Beam, whose workers
    start one `extract` per window, wrote other bytes than a run from the first line.
    With one graph whose shapes are all open (input_signature), every call takes the
    same path: a batch's values depend on the batch alone, and `extract` cuts the same
    batches from any window it starts at (tests/commands/test_extract_features.py starts runs
    mid-file)."""
    import tensorflow as tf
    model = layer_model(encoder, layers)
    spec = {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES}

    @tf.function(input_signature=[spec], jit_compile=False, autograph=False)
    def call(inputs):                   # (no Python control flow for AutoGraph to convert)
        outputs = model(inputs, training=False)
        return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]

    return lambda inputs: [np.asarray(out, np.float32) for out in call(inputs)]


# Batches per window of examples sorted by length (see `extract`).
WINDOW_BATCHES = 16


def extract(encoder, tokenizer, examples, layers, max_seq_length=128, batch_size=32,
            window_batches=WINDOW_BATCHES, start=0, doc_stride=None, layer_call=None):
    """Yields (linex_index, token ids, [float32 [n, H] per layer]) per example: its n
    features' tokens and vectors (json_line: google's JSON layout), in input order, from
    example `start` on (a multiple of the window, batch_size * window_batches: a resumed
    run forms the batches an uninterrupted one forms, and runs them through the same
    graph (`layer_function`), so it writes the same bytes).

    Examples are batched by length: within each window of `window_batches` batches they
    are sorted by packed length and every batch is padded to its longest (the outputs of
    real positions do not depend on padding: masked keys), so mixed lengths cost what
    their tokens cost; a window's outputs are then yielded in input order. With
    `doc_stride`, a long single text is several model inputs (`text_windows`), batched
    like examples, its pieces read from their max-context windows. `layer_call`: the
    `layer_function(encoder, layers)` to run, made once by a caller that extracts many
    times (a Beam worker); by default made here."""
    window = batch_size * max(1, window_batches)
    if start % window:
        raise ValueError(f"start={start} is not a multiple of the window ({window})")
    first, examples = start, examples[start:]
    ids_a = tokenizer.encode([a for a, _ in examples]) if examples else []
    pairs = [i for i, (_, b) in enumerate(examples) if b is not None]
    ids_b = dict(zip(pairs, tokenizer.encode([examples[i][1] for i in pairs]))) \
        if pairs else {}
    model = layer_call or layer_function(encoder, layers)
    for begin in range(0, len(examples), window):
        indexes = range(begin, min(begin + window, len(examples)))
        rows, reading = [], {}              # model inputs (A, B cut); each example's
        for i in indexes:
            if i in ids_b:
                reading[i] = ([len(rows)], None, None)
                rows.append(cut(ids_a[i], ids_b[i], max_seq_length))
                continue
            spans, best = text_windows(ids_a[i], max_seq_length, doc_stride)
            reading[i] = (list(range(len(rows), len(rows) + len(spans))), spans, best)
            rows += [cut(ids_a[i][first_piece:end_piece], None, max_seq_length)
                     for first_piece, end_piece in spans]
        inputs = pack_many(rows, tokenizer.cls_id, tokenizer.sep_id)   # (ids, segments)
        order = sorted(range(len(inputs)), key=lambda j: len(inputs[j][0]))
        vectors = {}                        # input -> [its length, H] per layer
        for b in range(0, len(order), batch_size):
            batch = order[b:b + batch_size]
            width = max(len(inputs[j][0]) for j in batch)
            token_ids = np.zeros((len(batch), width), np.int32)
            segment_ids = np.zeros_like(token_ids)
            mask = np.zeros_like(token_ids)
            for row, j in enumerate(batch):
                ids, segments = inputs[j]
                token_ids[row, :len(ids)] = ids
                segment_ids[row, :len(ids)] = segments
                mask[row, :len(ids)] = 1
            outputs = model(dict(zip(INPUT_NAMES, (token_ids, segment_ids, mask))))
            # outputs: one float32 [B, width, H] per layer
            for row, j in enumerate(batch):
                vectors[j] = [out[row, :len(inputs[j][0])] for out in outputs]
        for i in indexes:
            runs, spans, best = reading[i]
            if best is None:                # one model input: its every position
                tokens = inputs[runs[0]][0]
                read = [(runs[0], position) for position in range(len(tokens))]
            else:                           # [CLS], each piece where it has most context
                tokens = pack(ids_a[i], None, len(ids_a[i]) + 2, tokenizer.cls_id,
                              tokenizer.sep_id)[0]
                read = [(runs[0], 0)] + [
                    (runs[w], 1 + p - spans[w][0]) for p, w in enumerate(best.tolist())] + \
                    [(runs[-1], len(inputs[runs[-1]][0]) - 1)]
            yield first + i, list(tokens), [np.stack([vectors[j][k][position]
                                                      for j, position in read])
                                            for k in range(len(layers))]


def json_line(tokenizer, layers, num_layers, record):
    """One example's line in google's JSON layout (values rounded to 6 decimals)."""
    index, tokens, values = record
    features = [{"token": tokenizer.vocab[token_id],
                 "layers": [{"index": layer, "values": [
                     round(float(x), 6) for x in values[k][position]]}
                     for k, layer in enumerate(layers)]}
                for position, token_id in enumerate(tokens)]
    return (json.dumps({"linex_index": index, "features": features}) + "\n").encode()


def tfrecord_line(tokenizer, layers, num_layers, record):
    """One example as a framed tf.train.Example in the compact layout
    (bert_tf/base/feature_records.py: layers counted from the first, 0 .. num_layers - 1,
    float32 values as computed)."""
    index, tokens, values = record
    return encode_feature_record(index, tokens, [layer % num_layers for layer in layers],
                                 np.stack(values, axis=1))                # [n, L, H]


FORMATS = {"json": json_line, "tfrecord": tfrecord_line}
# Each format's file name extension (Beam's part files are named by it).
EXTENSIONS = {"json": "jsonl", "tfrecord": "tfrecord"}

# Yields {linex_index, token_ids, layers, values [n, L, H] float32} of each example of an
# `--output_format=tfrecord` file, with NumPy alone.
read_tfrecord_features = read_feature_records


def run(args, pipeline_args=()):
    """The command: every check that needs only the flags and the files (the output's
    place, an output that is an input, --layers' form, the vocabulary, the input lines)
    before TensorFlow is imported and the model loaded; then what needs the model
    (--layers and --max_seq_length against its config, the vocabulary's size)."""
    from bert_tf.checkpoints.dispatch import vocab_beside
    from bert_tf.text.text_rules import check_case_matches_vocab, load_vocab
    if not args.init_checkpoint:
        raise ValueError("--init_checkpoint is required")
    check_seq_length(args.max_seq_length)
    parse_layers(args.layers)             # the form; the range once the model is read
    check_doc_stride(args.doc_stride, args.max_seq_length)
    if args.runner is None:
        storage.check_local([("--input_file", args.input_file),
                             ("--output_file", args.output_file)])
    else:
        from bert_tf.data.beam import run_inference
        run_inference(["--runner", args.runner, *pipeline_args], "extract_features")
        for flag, path in (("--input_file", args.input_file),
                           ("--output_file", args.output_file)):
            if storage.is_url(path):
                storage.check_url(flag, path)
    vocab_file = vocab_beside(args.init_checkpoint, args.vocab_file)
    check_not_inputs([("output_file", args.output_file),
                      ("output_file", args.output_file + TMP_SUFFIX),
                      ("output_file", args.output_file + PARTS_SUFFIX)],
                     [("--input_file", args.input_file), ("--vocab_file", vocab_file),
                      ("--bert_config_file", args.bert_config_file)],
                     checkpoints=[("--init_checkpoint", args.init_checkpoint)])
    check_output_place("output_file", args.output_file)
    load_vocab(vocab_file)                # the tokenizer's checks of the file
    check_case_matches_vocab(vocab_file, args.do_lower_case)
    examples = read_examples(args.input_file)
    if not examples:
        raise ValueError(f"{args.input_file}: empty file (expected one example per line)")
    empty = sum(1 for a, b in examples if not a.strip() and not (b or "").strip())

    from bert_tf.checkpoints.dispatch import load_encoder
    from bert_tf.text.tokenization import BertTokenizer, check_vocab_fits
    encoder = load_encoder(args.init_checkpoint, bert_config_file=args.bert_config_file)
    if args.max_seq_length > encoder.bert_config.max_position_embeddings:
        raise ValueError(f"--max_seq_length {args.max_seq_length} exceeds the model's "
                         f"{encoder.bert_config.max_position_embeddings} positions")
    layers = parse_layers(args.layers, encoder.bert_config.num_hidden_layers)
    check_vocab_fits(vocab_file, encoder.bert_config.vocab_size)
    tokenizer = BertTokenizer(vocab_file, do_lower_case=args.do_lower_case)
    made_from = run_inputs(args, vocab_file)
    storage.makedirs_for(args.output_file)
    if args.runner is not None:
        run_beam(args, ["--runner", args.runner, *pipeline_args], made_from, len(examples))
        print(f"{args.output_file}: {len(examples)} examples, {empty} empty lines",
              file=sys.stderr, flush=True)
        return len(examples)
    line = FORMATS[args.output_format]
    num_layers = encoder.bert_config.num_hidden_layers
    write_features(
        args.output_file, made_from,
        lambda start: (line(tokenizer, layers, num_layers, record) for record in extract(
            encoder, tokenizer, examples, layers, args.max_seq_length, args.batch_size,
            start=start, doc_stride=args.doc_stride)),
        len(examples), args.batch_size * WINDOW_BATCHES)
    print(f"{args.output_file}: {len(examples)} examples, {empty} empty lines",
          file=sys.stderr, flush=True)
    return len(examples)


def run_inputs(args, vocab_file):
    """What the output's bytes depend on: the input lines, the checkpoint, the
    vocabulary (by content) and the flags that shape the vectors or their batches."""
    from bert_tf.base.checks import checkpoint_place
    from bert_tf.base.files import fingerprint
    place = checkpoint_place(args.init_checkpoint)
    return {
        "input_file": storage.fingerprint(args.input_file),
        "init_checkpoint": fingerprint(place) if place else args.init_checkpoint,
        "vocab_file": fingerprint(vocab_file),
        "bert_config_file": args.bert_config_file and fingerprint(args.bert_config_file),
        "flags": {"layers": args.layers, "max_seq_length": args.max_seq_length,
                  "batch_size": args.batch_size, "do_lower_case": args.do_lower_case,
                  "doc_stride": args.doc_stride, "output_format": args.output_format},
    }


def write_features(path, made_from, records, total, window):
    """Writes the lines (bytes) `records(start)` yields (examples `start`.. of `total`) to
    `path` by way of `path.tmp`, renamed when complete.

    Resumable: after every `window` examples the temporary file is flushed to disk and
    `path.tmp.json` records how many examples and bytes it holds and what they were
    made from (`made_from`). SIGTERM or Ctrl-C stops at the end of a window with one
    line; a kill -9 stops anywhere. Run again with the same inputs and flags, the
    command cuts the temporary file back to its last recorded window and goes on from
    there; the finished file is byte for byte the uninterrupted run's. With other inputs
    or flags it starts over."""
    from bert_tf.base.files import write_json
    from bert_tf.base.training_plumbing import Interrupted, stop_requests
    tmp, progress = path + TMP_SUFFIX, path + TMP_SUFFIX + ".json"
    done, size = resumable(tmp, progress, made_from)
    if done:
        print(f"resuming {tmp}: {done} of {total} examples already written",
              file=sys.stderr, flush=True)
    try:
        with open(tmp, "r+b" if done else "wb") as f, stop_requests() as stop:
            f.truncate(size)
            f.seek(size)
            for n, record in enumerate(records(done), done + 1):
                f.write(record)
                if n % window and n < total:
                    continue
                f.flush()
                os.fsync(f.fileno())
                write_json(progress, {"examples": n, "bytes": f.tell(),
                                      "made_from": made_from})
                print(f"{n}/{total} examples", file=sys.stderr, flush=True)
                if stop and n < total:
                    raise Interrupted(f"{stop[0]}: stopped after {n} of {total} examples, "
                                      f"kept in {tmp}; run the same command again to "
                                      f"resume")
        os.replace(tmp, path)
    except Interrupted:
        raise
    except BaseException as e:
        # Anything but a stop (a full disk, a failed model call): nothing is kept.
        for stale in (tmp, progress):
            with contextlib.suppress(OSError):
                os.remove(stale)
        if isinstance(e, OSError) and e.errno and not e.filename:
            raise OSError(e.errno, os.strerror(e.errno), path) from None
        if isinstance(e, OSError) and e.filename == tmp:   # read-only, missing folder:
            raise OSError(e.errno, e.strerror, path) from None  # said of the user's name
        raise
    os.remove(progress)


# ----------------------------------------------------------------------------- Beam

PARTS_SUFFIX = TMP_SUFFIX + ".parts"


def part_name(parts, start, output_format):
    """The part file of the window of examples from `start`, named by the format it
    holds: every reader and writer of the parts finds them by this name."""
    return f"{parts}/part-{start:012d}.{EXTENSIONS[output_format]}"


def remove_parts(parts):
    """Removes the parts folder (for a URL: the files under its name)."""
    import shutil
    if not storage.is_url(parts):
        shutil.rmtree(parts, ignore_errors=True)
        return
    for path in storage.glob(parts + "/*"):
        storage.remove(path)


class Extractor:
    """What a worker loads once: the encoder's layer model and the examples."""

    def __init__(self, settings):
        from bert_tf.checkpoints.dispatch import load_encoder
        from bert_tf.text.tokenization import BertTokenizer
        self.settings = settings
        self.encoder = load_encoder(settings["init_checkpoint"],
                                    bert_config_file=settings["bert_config_file"])
        self.tokenizer = BertTokenizer(settings["vocab_file"],
                                       do_lower_case=settings["do_lower_case"])
        self.examples = read_examples(settings["input_file"])
        # Read again in each worker: it must be the file the run fingerprinted.
        if storage.fingerprint(settings["input_file"]) != settings["input_fingerprint"]:
            from bert_tf.data.errors import InputError
            raise InputError(f"--input_file: {settings['input_file']} changed while the "
                             f"run read it; run the same command again")
        self.layers = parse_layers(settings["layers"],
                                   self.encoder.bert_config.num_hidden_layers)
        self.layer_call = layer_function(self.encoder, self.layers)

    def write_window(self, start):
        """The lines of the window of examples from `start`, as the local engine writes
        them, to its part file (whole, or not at all); returns its example count."""
        s = self.settings
        end = min(start + s["window"], len(self.examples))
        records = extract(self.encoder, self.tokenizer, self.examples[:end], self.layers,
                          s["max_seq_length"], s["batch_size"], start=start,
                          doc_stride=s["doc_stride"], layer_call=self.layer_call)
        path = part_name(s["parts"], start, s["output_format"])
        line = FORMATS[s["output_format"]]
        with storage.open_write(path + TMP_SUFFIX) as f:
            for record in records:
                f.write(line(self.tokenizer, self.layers,
                             self.encoder.bert_config.num_hidden_layers, record))
            if not storage.is_url(path):
                f.flush()
                os.fsync(f.fileno())
        storage.replace(path + TMP_SUFFIX, path)
        return end - start


def run_beam(args, pipeline_args, made_from, total):
    """The windows not yet written as parts, through Beam's RunInference; then the parts
    joined in order into OUTPUT (by way of OUTPUT.tmp) and the parts removed. Parts of
    a run with other inputs or flags (OUTPUT.tmp.parts/plan.json) are removed first."""
    import shutil
    from bert_tf.checkpoints.dispatch import vocab_beside
    from bert_tf.data.beam import (element_handler, pipeline_options, run_inference,
                                   worker_errors_in_one_line)
    beam, inference = run_inference()
    parts = args.output_file + PARTS_SUFFIX
    window = args.batch_size * WINDOW_BATCHES
    plan = {"made_from": made_from, "window": window, "examples": total}
    plan_path = parts + "/plan.json"
    try:
        same = json.loads(storage.read_bytes(plan_path)) == json.loads(json.dumps(plan))
    except (OSError, ValueError):
        same = False
    if not same:
        remove_parts(parts)
        storage.makedirs_for(plan_path)
        storage.write_text(plan_path, json.dumps(plan, indent=1, sort_keys=True) + "\n")
    starts = list(range(0, total, window))
    todo = [s for s in starts
            if not storage.exists(part_name(parts, s, args.output_format))]
    if len(todo) < len(starts):
        print(f"resuming {parts}: {len(starts) - len(todo)} of {len(starts)} windows "
              f"already written", file=sys.stderr, flush=True)
    settings = {"init_checkpoint": args.init_checkpoint,
                "bert_config_file": args.bert_config_file,
                "vocab_file": vocab_beside(args.init_checkpoint, args.vocab_file),
                "do_lower_case": args.do_lower_case, "input_file": args.input_file,
                "input_fingerprint": made_from["input_file"],
                "layers": args.layers, "max_seq_length": args.max_seq_length,
                "batch_size": args.batch_size, "doc_stride": args.doc_stride,
                "output_format": args.output_format, "window": window,
                "parts": storage.absolute(parts)}
    if todo:
        with worker_errors_in_one_line(), \
                beam.Pipeline(options=pipeline_options(pipeline_args, [])) as pipeline:
            _ = (pipeline | beam.Create(todo) | beam.Reshuffle()
                 | inference.RunInference(element_handler(
                     functools.partial(Extractor, settings),
                     lambda extractor, start: extractor.write_window(start))))
    tmp = args.output_file + TMP_SUFFIX
    with storage.open_write(tmp) as out:
        for start in starts:
            with storage.open_read(part_name(parts, start, args.output_format)) as f:
                shutil.copyfileobj(f, out)
        if not storage.is_url(tmp):
            out.flush()
            os.fsync(out.fileno())
    storage.replace(tmp, args.output_file)
    remove_parts(parts)


def resumable(tmp, progress, made_from):
    """(examples, bytes) that an interrupted run left in `tmp` and this one may keep:
    its record `progress` says they were made from `made_from`; else (0, 0), and what
    was left is removed."""
    try:
        with open(progress, encoding="utf-8") as f:
            record = json.load(f)
        if record["made_from"] == made_from and os.path.getsize(tmp) >= record["bytes"]:
            return int(record["examples"]), int(record["bytes"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    for stale in (tmp, progress):
        if os.path.exists(stale):
            os.remove(stale)
    return 0, 0


def main(argv=None):
    from bert_tf.base.training_plumbing import Interrupted
    parser = ArgumentParser(
        description="Write per-token vectors of chosen encoder layers as JSON lines.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    f = parser.add_argument
    f("--input_file", required=True, help="one example per line; 'A ||| B' for pairs")
    f("--output_file", required=True,
      help="JSON lines output (OUTPUT.tmp until complete: a stopped run resumes from it)")
    f("--layers", default="-1,-2,-3,-4", help="layer indexes, -1 = last")
    f("--max_seq_length", type=int, default=128)
    f("--batch_size", type=int, default=32)
    f("--doc_stride", type=int, default=None,
      help="read a single text longer than max_seq_length - 2 pieces in windows starting "
           "this many pieces apart (at most max_seq_length - 2: windows end to end), each "
           "piece's vectors from the window where it has the most context (default: cut "
           "it there, as google's extract_features does)")
    f("--init_checkpoint", default=None,
      help="google TF1 checkpoint, HF directory or .keras file; or a released "
           "checkpoint's name (uncased_L-12_H-768_A-12, bert-base-uncased, ...: "
           "bert_tf/checkpoints/registry.py), downloaded once into $BERT_TF_CACHE")
    f("--vocab_file", default=None, help="default: vocab.txt beside the checkpoint")
    f("--bert_config_file", default=None, help="default: the config beside the checkpoint")
    boolean(parser, "--do_lower_case", default=True)
    f("--output_format", choices=sorted(FORMATS), default="json",
      help="json: google's layout, a line per example, values rounded to 6 decimals; "
           "tfrecord: a tf.train.Example per example (linex_index, token_ids, layers, "
           "shape, float32 values as computed), less than half of JSON's size")
    f("--runner", default=None,
      help="run on Apache Beam with this runner (DirectRunner, ...), its RunInference "
           "loading the encoder once per worker; Beam's own flags go after ours")
    args, rest = parser.parse_known_args(argv)
    if rest and args.runner is None:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return run_main(lambda a: run(a, rest), args, positive=("batch_size", "doc_stride"),
                    errors=(Interrupted,))


if __name__ == "__main__":
    main()
