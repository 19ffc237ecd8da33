"""One pretraining run as library calls: what `python -m bert_tf.run_pretraining` does,
without argparse.

    shards = find_shards("shards/*.tfrecord", None, "runs/base", do_train=True,
                         do_eval=False, max_seq_length=128, max_predictions_per_seq=20)
    config = load_config(preset="tiny")
    settings = run_settings(flags, config, shards.train)   # flags: the run's flag values
    check_resume("runs/base", settings)     # another run's checkpoints there: ValueError
    model, optimizer = build(strategy, config, "runs/base", ...)
    loop = PretrainingLoop(strategy, model, optimizer, "runs/base", 32)
    train_and_export(loop, shards, ...)     # resumes by itself; writes google/ and hf/
    metrics = evaluate(loop, shards, ...)

A run's --output_dir holds what it writes (RUN_OUTPUTS) and the settings its checkpoints
were made with (RUN_SETTINGS), which a resumed run must share. No TensorFlow at import:
the command imports this module before it parses its flags.
"""

import dataclasses
import json
import os

from bert_tf.checkpoints.bundle import check_bundle, latest_prefix
from bert_tf.checkpoints.formats.pretraining_run import RUN_COPIES, RUN_SETTINGS
from bert_tf.base.files import write_json
from bert_tf.base.training_plumbing import is_chief

# What a run's checkpoints were made with is kept as OUTPUT_DIR/RUN_SETTINGS (a run folder
# is also a checkpoint: bert_tf/checkpoints/formats/pretraining_run.py): a resumed run
# must have the same. Flags that say how a run goes, not what it computes, may change.
RESUME_FREE = ("output_dir", "do_train", "do_eval", "eval_input_file", "eval_batch_size",
               "max_eval_steps", "save_checkpoints_steps", "keep_checkpoints",
               "steps_per_loop", "strategy", "cpu_devices", "tpu", "tpu_zone", "gcp_project",
               "jit_compile", "length_batching", "skip_corrupt_records", "vocab_file",
               # Read once, by the first run (a resumed run starts from its checkpoint):
               "init_checkpoint",
               # Where the model came from; the model itself is compared (bert_config).
               "bert_config_file", "preset")


# Everything a run writes in its --output_dir: the loop's TensorBoard folder, step log,
# checkpoints and the scratch folders of multi-worker saves (training/trainer.py),
# then the model's config, the run's settings, the exported copies and eval results.
RUN_OUTPUTS = ("train", "train_log.jsonl", "checkpoint", "ckpt-*", ".worker_*",
               "bert_config.json", RUN_SETTINGS, *RUN_COPIES, "eval_results.txt")


@dataclasses.dataclass
class Shards:
    """The shard files a run reads: `train`, `eval` (lists of paths), `damaged` (path ->
    the damaged records check_shards found, left out under skip_corrupt_records) and
    `skipped`, how many records that leaves out, each counted once."""
    train: list
    eval: list
    damaged: dict
    skipped: int
    made_for: dict = None     # shard_objective's: what the shards' summaries say


def find_shards(input_file, eval_input_file, output_dir, do_train, do_eval, max_seq_length,
                max_predictions_per_seq, skip_corrupt_records=False, masking="static",
                locks=None):
    """The files --input_file and --eval_input_file (default: --input_file) name, less
    what the run writes in `output_dir`, checked before any work: shards that are not
    TFRecord files, cut, damaged, or written for other lengths stop here with one line
    naming the file and byte offset; so do shards without masks under `masking`
    "static". `locks`: a contextlib.ExitStack that takes a reader's lock on each shard
    set read (bert_tf/base/output_lock.py) before the shards are checked, held as long as
    the stack: create_pretraining_data will not rewrite them under the run, and a set
    being written now stops the run with one line naming its writer."""
    from bert_tf.base.output_lock import InputLock, shard_set
    from bert_tf.training.data import check_shards, expand_gfile_patterns
    # What a run writes in --output_dir is never one of its inputs, though a glob such as
    # --input_file='DIR/train*' with --output_dir=DIR matches it once written: without
    # this, the run's own resume would read other "shards" than its first start did.
    own = [os.path.join(output_dir, name) for name in RUN_OUTPUTS]
    train_files = expand_gfile_patterns(input_file, skip=own)
    eval_files = expand_gfile_patterns(eval_input_file or input_file, skip=own)
    read = sorted(set((train_files if do_train else []) + (eval_files if do_eval else [])))
    if locks is not None:
        for path in sorted({shard_set(p) for p in read if "://" not in p}):
            locks.enter_context(InputLock(path, "--input_file"))
    made_for = shard_objective(read)
    # Shards whose summary says they hold no masks are refused by the objective's check
    # (the command's), in words of the summary; the others by their first record.
    needs_masks = (masking or "static") == "static" and \
        made_for.get("masking", "static") == "static"
    damaged = check_shards(read, max_seq_length, max_predictions_per_seq,
                           skip_corrupt_records, needs_masks=needs_masks)
    skipped = sum(len(shard.skipped) for shard in damaged.values())
    return Shards(train_files, eval_files, damaged, skipped, made_for)


def shard_objective(files):
    """What the shards were made for, as run_pretraining's flags: {"next_sentence": nsp,
    sop or none, "masking": static, or dynamic for shards written without masks,
    "shard": one of them}, from create_pretraining_data's summaries; {} when none has
    one (google's shards). ValueError when two sets of the glob were made for different
    objectives."""
    from bert_tf.data.summary import shard_summaries
    found = {}
    for shard, (_, summary) in sorted(shard_summaries(files).items()):
        settings = (summary.get("config") or {}).get("settings") or {}
        made = (settings.get("next_sentence", "nsp"),
                "dynamic" if settings.get("masking") == "none" else "static")
        found.setdefault(made, shard)
    if len(found) > 1:
        (a, shard_a), (b, shard_b) = list(found.items())[:2]
        raise ValueError(f"--input_file: {shard_a} was made for --next_sentence={a[0]} "
                         f"--masking={a[1]} and {shard_b} for --next_sentence={b[0]} "
                         f"--masking={b[1]}; a run reads shards of one kind")
    if not found:
        return {}
    ((next_sentence, masking), shard), = found.items()
    return {"next_sentence": next_sentence, "masking": masking, "shard": shard}


def check_vocabulary(shards, vocab_file=None):
    """ValueError when the shards' summaries (create_pretraining_data's) say they were
    made with two vocabularies, or with another one than `vocab_file` (compared by
    content): the ids would be read as other words, by the model and by every
    checkpoint the run writes with `vocab_file` beside it. Shards without a summary
    (google's) cannot tell and are taken as they are."""
    from bert_tf.base.files import file_sha256
    from bert_tf.data.summary import shard_summaries
    made = {}
    for shard, (_, summary) in sorted(shard_summaries(
            sorted(set(shards.train + shards.eval))).items()):
        vocab = (summary.get("config") or {}).get("vocab") or {}
        made.setdefault(vocab.get("sha256"), (shard, vocab.get("path")))
    if len(made) > 1:
        (a, vocab_a), (b, vocab_b) = list(made.values())[:2]
        raise ValueError(f"--input_file: {a} was made with the vocabulary {vocab_a} and {b} "
                         f"with another one ({vocab_b}; their sha256 differ): a run reads "
                         f"shards of one vocabulary")
    if vocab_file and made:
        (sha, (shard, vocab)), = made.items()
        if file_sha256(vocab_file) != sha:
            raise ValueError(f"--vocab_file={vocab_file} is not the vocabulary {shard} was "
                             f"made with ({vocab}; their sha256 differ): its ids would be "
                             f"read as other words; pass that vocabulary")


def load_config(bert_config_file=None, preset=None):
    """The model's BertConfig: from bert_config.json (google) or config.json (HF), else
    the named preset."""
    from bert_tf.base.config import BertConfig
    return BertConfig.from_json_file(bert_config_file) if bert_config_file \
        else BertConfig.preset(preset)


# Bytes from each end of a shard that its fingerprint reads (files.fingerprint).
SHARD_SAMPLE = 64 << 10


def run_settings(flags, config, train_files):
    """The settings a resumed run must share with the run that wrote the checkpoints: the
    model (bert_config), every flag not in RESUME_FREE (shapes, batch, schedule,
    optimizer, precision, seed, shuffling) and the training shards it streams, as JSON
    values: their paths, what they are (size and the sha256 of their ends: a set
    written anew under the same names is another input) and, where
    create_pretraining_data's summary says, what they were made with. `flags`: the
    run's flag values by name."""
    from bert_tf.base.files import fingerprint
    from bert_tf.data.summary import made_with, shard_summaries
    values = {k: v for k, v in sorted(flags.items()) if k not in RESUME_FREE}
    values["input_file"] = [os.path.abspath(f) for f in train_files]
    values["input_fingerprints"] = [
        None if "://" in f else fingerprint(f, SHARD_SAMPLE) for f in train_files]
    values["shards_made_with"] = {
        os.path.abspath(path): made_with(summary)
        for path, summary in shard_summaries(train_files).values()}
    values["bert_config"] = dataclasses.asdict(config)
    return json.loads(json.dumps(values))   # as read back from the file


def _recorded_settings(output_dir):
    """The settings of the run whose checkpoints `output_dir` holds, or None when unknown.
    A run from before the settings were kept is known by its model alone."""
    path = os.path.join(output_dir, RUN_SETTINGS)
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except ValueError:
            raise ValueError(f"{path}: not valid JSON (the settings of the run whose "
                             f"checkpoints {output_dir} holds)") from None
    config_path = os.path.join(output_dir, "bert_config.json")
    if os.path.exists(config_path):
        from bert_tf.base.config import BertConfig
        return json.loads(json.dumps({"bert_config": dataclasses.asdict(
            BertConfig.from_json_file(config_path))}))
    return None


# The settings a refused resume names first: what decides the model and its data, then
# what decides the training, then the rest (in name order).
MOST_IMPORTANT = ("bert_config", "max_seq_length", "max_predictions_per_seq",
                  "next_sentence", "masking", "masked_lm_prob", "do_whole_word_mask",
                  "max_ngram_size", "input_file", "input_fingerprints", "train_batch_size",
                  "gradient_accumulation_steps", "optimizer", "learning_rate",
                  "num_train_steps", "num_schedule_steps", "num_warmup_steps", "start_step",
                  "mixed_precision", "seed", "shuffle_buffer")


def _importance(key):
    return (MOST_IMPORTANT.index(key), "") if key in MOST_IMPORTANT else \
        (len(MOST_IMPORTANT), key)


def _differences(theirs, settings, keys):
    """[(flag name, "what differs")] of `keys`, the most important first."""
    differ = []
    for key in sorted(keys, key=_importance):
        a, b = theirs.get(key), settings.get(key)
        if a == b or key == "shards_made_with":     # the latter: said with the shards
            continue
        if key == "bert_config":
            differ += [(f"bert_config {k}", f"bert_config {k}: {(a or {}).get(k)!r} there, "
                                            f"{(b or {}).get(k)!r} now")
                       for k in sorted(set(a or {}) | set(b or {}))
                       if (a or {}).get(k) != (b or {}).get(k)]
        elif key == "input_file":
            differ.append(("--input_file", f"--input_file: {len(a or [])} shard(s) there, "
                                           f"other {len(b or [])} now"))
        elif key == "input_fingerprints":
            if theirs.get("input_file") == settings.get("input_file"):
                differ.append(("--input_file", _shards_changed(theirs, settings)))
        else:
            differ.append((f"--{key}", f"--{key}: {a!r} there, {b!r} now"))
    return differ


def _shards_changed(theirs, settings):
    """The line part that says which shards changed and, where their summaries tell,
    which create_pretraining_data setting made them differ."""
    changed = [path for path, x, y in zip(settings["input_file"],
                                          theirs.get("input_fingerprints") or [],
                                          settings.get("input_fingerprints") or [])
               if x != y]
    made = [f"create_pretraining_data {k}: {x!r} there, {y!r} now"
            for set_path, old in (theirs.get("shards_made_with") or {}).items()
            for k, x, y in _changed(old, (settings.get("shards_made_with") or {})
                                    .get(set_path, {}))]
    return (f"--input_file: {changed[0] if changed else 'a shard'}"
            f"{f' and {len(changed) - 1} more' if len(changed) > 1 else ''} changed since "
            f"the checkpoints were written"
            + (f" ({', '.join(made[:2])})" if made else " (written anew)"))


def _changed(old, new):
    """(key, old value, new value) of the keys where two dicts differ."""
    return [(k, old.get(k), new.get(k)) for k in sorted(set(old) | set(new))
            if old.get(k) != new.get(k)]


def check_resume(output_dir, settings, do_train=True):
    """ValueError, before anything is written, when `output_dir` holds the checkpoints of
    a run with other settings: resuming them would mix two runs (or fail deep inside
    TensorFlow on a shape). A run without a checkpoint yet has nothing to resume.
    Evaluating alone (`do_train=False`) compares the model only."""
    latest = latest_checkpoint(output_dir)
    if latest is None:
        return
    # A damaged checkpoint is said here, in one line, not deep inside the restore.
    check_bundle(latest, "checkpoint")
    theirs = _recorded_settings(output_dir)
    if theirs is None:
        return
    # Evaluating compares the model alone, and so does a run from before the settings
    # were kept (its record holds only the model).
    differ = _differences(theirs, settings, list(theirs) if do_train else ["bert_config"])
    changed = [text for _, text in differ
               if "changed since the checkpoints were written" in text]
    if changed and len(changed) == len(differ):
        raise ValueError(
            f"--output_dir={output_dir} holds checkpoints ({os.path.basename(latest)}) "
            f"of a run on other shards ({changed[0]}): put back the shards it trains on, "
            f"or choose another --output_dir")
    if differ:
        # The three that matter most in full, and the name of every other one.
        rest = [name for name, _ in differ[3:]]
        raise ValueError(
            f"--output_dir={output_dir} holds checkpoints ({os.path.basename(latest)}) "
            f"of a run with other settings ({'; '.join(text for _, text in differ[:3])}"
            f"{f'; also {len(rest)} more: ' + ', '.join(rest) if rest else ''}): run "
            f"that command again to resume it, or choose another --output_dir")


def write_run_settings(output_dir, settings):
    write_json(os.path.join(output_dir, RUN_SETTINGS), settings)


def latest_checkpoint(output_dir):
    """The newest checkpoint in `output_dir`, or None (also when there is no folder);
    ValueError when its `checkpoint` state file names one whose files are gone
    (bundle.latest_prefix: a run there would start over, overwriting what is left)."""
    return latest_prefix(output_dir) if os.path.isdir(output_dir) else None


def build(strategy, config, output_dir, *, max_seq_length, seed, dtype, optimizer,
          learning_rate, num_train_steps, num_warmup_steps, vocab_file=None,
          init_checkpoint=None, next_sentence=True, start_step=0):
    """(model, optimizer) under the strategy's scope. `init_checkpoint` is loaded only
    when `output_dir` holds no checkpoint yet (a resumed run starts from its own), and
    so is `start_step` set: the optimizer's step, where its schedule (`num_train_steps`
    long) starts;
    `vocab_file` must fit the config's vocab_size. `dtype`: a Keras dtype policy name
    ("float32", "mixed_bfloat16", "mixed_float16": the last scales the loss).
    next_sentence=False: no next-sentence head (masked LM alone)."""
    import keras

    from bert_tf.checkpoints import dispatch as checkpoints
    from bert_tf.models.pretrainer import BertPretrainer
    from bert_tf.training.optimization import create_optimizer

    if vocab_file:
        from bert_tf.text.tokenization import check_vocab_fits
        check_vocab_fits(vocab_file, config.vocab_size)
    if max_seq_length > config.max_position_embeddings:
        raise ValueError(f"--max_seq_length {max_seq_length} exceeds the config's "
                         f"max_position_embeddings {config.max_position_embeddings}")
    with strategy.scope():
        keras.utils.set_random_seed(seed)
        model = BertPretrainer.from_config_object(config, dtype=dtype,
                                                  next_sentence=next_sentence)
        new_run = not latest_checkpoint(output_dir)
        if init_checkpoint and new_run:
            report = checkpoints.restore(model, init_checkpoint, allow_missing_heads=True)
            print(f"initialised from {init_checkpoint}: {report}", flush=True)
        opt = create_optimizer(optimizer, learning_rate, num_train_steps, num_warmup_steps,
                               model.trained_variables)
        if start_step and new_run:
            opt.iterations.assign(start_step)
            print(f"starting at step {start_step} of a {num_train_steps}-step schedule",
                  flush=True)
        if dtype == "mixed_float16":
            opt = keras.optimizers.LossScaleOptimizer(opt)
        opt.build(model.trained_variables)
    return model, opt


def write_run_record(loop, config, settings, do_train):
    """The chief writes the model's bert_config.json, and when training the settings a
    resumed run must share, into the loop's output_dir."""
    if is_chief(loop.strategy):
        config.to_json_file(os.path.join(loop.output_dir, "bert_config.json"))
        if do_train:
            write_run_settings(loop.output_dir, settings)


def train_and_export(loop, shards, *, num_train_steps, save_checkpoints_steps,
                     steps_per_loop, max_seq_length, max_predictions_per_seq, seed,
                     shuffle_buffer, vocab_file=None, masking=None, start_step=0):
    """Trains (resuming from the latest checkpoint in the loop's output_dir; a new run
    starts at `start_step`, its first batch the shards' first), then the
    chief writes the model in google's TF1 format (output_dir/google) and HF's
    (output_dir/hf), with `vocab_file` beside them. `masking`: a MaskingSpec for dynamic
    masking (bert_tf/training/dynamic_masking.py); None reads the shards' masks."""
    import tensorflow as tf

    from bert_tf.checkpoints import dispatch as checkpoints
    from bert_tf.training.data import data_loss_error, pretraining_dataset

    def dataset_fn(ctx, batch_size, skip_batches):
        dataset = pretraining_dataset(
            shards.train, batch_size, max_seq_length, max_predictions_per_seq,
            is_training=True, input_context=ctx, seed=seed,
            shuffle_buffer=shuffle_buffer, damaged=shards.damaged, masking=masking)
        return dataset.skip(skip_batches) if skip_batches else dataset
    try:
        loop.train(dataset_fn, num_train_steps, save_checkpoints_steps, steps_per_loop,
                   first_step=start_step)
    except tf.errors.DataLossError as e:  # a record damaged past the first: which?
        raise data_loss_error(e, shards.train) from None
    if is_chief(loop.strategy):
        for fmt in RUN_COPIES:
            out = os.path.join(loop.output_dir, fmt)
            checkpoints.save_checkpoint(loop.model, out, fmt, vocab_file=vocab_file,
                                        overwrite=True)
            print(f"wrote {fmt} checkpoint to {out}", flush=True)


def restore_for_eval(loop, init_checkpoint=None):
    """Evaluating without training: the latest checkpoint's weights, else those `build`
    loaded from `init_checkpoint`; ValueError when there are neither."""
    latest = loop.restore_latest()
    if latest is None and not init_checkpoint:
        raise ValueError(f"--do_eval without --do_train needs a checkpoint in "
                         f"{loop.output_dir} or --init_checkpoint")


def evaluate(loop, shards, *, eval_batch_size, max_seq_length, max_predictions_per_seq,
             max_eval_steps, length_batching="off", skip_corrupt_records=False,
             masking=None, seed=12345):
    """google's eval metrics over the eval shards (at most `max_eval_steps` batches, 0:
    all); "longest" `length_batching` cuts each batch to its longest sequence. Under
    `skip_corrupt_records` the metrics count the records left out. `masking`: a
    MaskingSpec: the eval batches are masked anew, the same way at every evaluation (from
    `seed`)."""
    import tensorflow as tf

    from bert_tf.training.data import data_loss_error, pretraining_dataset
    dataset = pretraining_dataset(shards.eval, eval_batch_size, max_seq_length,
                                  max_predictions_per_seq, is_training=False,
                                  damaged=shards.damaged, masking=masking, seed=seed)
    if length_batching == "longest":
        from bert_tf.text.batching import trim_to_longest
        from bert_tf.base.input_names import INPUT_NAMES
        dataset = dataset.map(lambda b: dict(b, **trim_to_longest(
            {k: b[k] for k in INPUT_NAMES})))
    try:
        metrics = loop.evaluate(dataset, max_eval_steps)
    except tf.errors.DataLossError as e:
        raise data_loss_error(e, shards.eval) from None
    if skip_corrupt_records:  # in the shards this run read, each counted once
        metrics["skipped_corrupt_records"] = shards.skipped
    return metrics
