"""Pretrains BERT (masked LM + next sentence) from TFRecord shards.

    python -m bert_tf.run_pretraining --input_file='shards/*.tfrecord' \\
        --output_dir=runs/base --bert_config_file=bert_config.json --do_train --do_eval \\
        --train_batch_size=32 --max_seq_length=128 --max_predictions_per_seq=20 \\
        --num_train_steps=100000 --num_warmup_steps=10000 --learning_rate=1e-4

Flags keep google-research/bert's names and defaults. Shards from google's
create_pretraining_data.py and from `python -m bert_tf.create_pretraining_data` both work.
The run resumes by itself when --output_dir holds a checkpoint, bit for bit (weights,
optimizer, dropout state, input position). SIGTERM (a preempted VM or cluster job) or
Ctrl-C saves a checkpoint at the current step and exits with status 1 and one line saying
so; a checkpoint is only written when the weights are finite. At the end the model is
also written in google's TF1 format (output_dir/google) and HF's (output_dir/hf).
"""

import os

from bert_tf.cli import ArgumentParser, DTYPES, boolean, check_seq_length, run_main
from bert_tf.files import write_results as write_eval_results  # google's eval_results.txt


def parse_args(argv=None):
    p = ArgumentParser(prog="python -m bert_tf.run_pretraining",
                       description=__doc__.split("\n\n")[0])
    flag = lambda name, **kw: p.add_argument(f"--{name}", **kw)  # noqa: E731
    flag("bert_config_file", default=None,
         help="bert_config.json (google) or config.json (HF); or use --preset")
    flag("preset", default=None, help="tiny|mini|small|medium|base|large instead of a file")
    flag("vocab_file", default=None,
         help="vocab.txt to copy beside the exported models (its size must match)")
    flag("input_file", required=True, help="comma-separated globs of training shards")
    flag("eval_input_file", default=None,
         help="comma-separated globs of eval shards (default: --input_file)")
    flag("output_dir", required=True, help="checkpoints, logs and exported models")
    flag("init_checkpoint", default=None,
         help="initial weights: google TF1, HF or Keras checkpoint (heads optional), or "
              "a released checkpoint's name (bert_tf/registry.py), downloaded once")
    flag("max_seq_length", type=int, default=128)
    flag("max_predictions_per_seq", type=int, default=20)
    boolean(p, "--do_train")
    boolean(p, "--do_eval")
    flag("train_batch_size", type=int, default=32, help="global batch size")
    flag("eval_batch_size", type=int, default=8)
    flag("learning_rate", type=float, default=5e-5)
    flag("num_train_steps", type=int, default=100000)
    flag("num_warmup_steps", type=int, default=10000)
    flag("save_checkpoints_steps", type=int, default=1000)
    flag("keep_checkpoints", type=int, default=5, help="checkpoints kept (newest)")
    flag("max_eval_steps", type=int, default=100, help="eval batches at most (0: all)")
    flag("steps_per_loop", type=int, default=1,
         help="steps run inside one tf.function call (fewer host round trips)")
    flag("optimizer", default="adamw", choices=("adamw", "lamb"))
    flag("mixed_precision", default="float32", choices=tuple(DTYPES))
    flag("gradient_accumulation_steps", type=int, default=1)
    boolean(p, "--jit_compile")
    flag("strategy", default="auto",
         choices=("auto", "one_device", "mirrored", "multi_worker", "tpu"))
    flag("cpu_devices", type=int, default=0,
         help="split the CPU into N logical devices (to run --strategy=mirrored on a host "
              "without accelerators)")
    flag("tpu", default=None, help="TPU name or grpc:// address; implies --strategy=tpu")
    flag("tpu_zone", default=None)
    flag("gcp_project", default=None)
    flag("seed", type=int, default=12345, help="initialisation, dropout and shuffling")
    flag("shuffle_buffer", type=int, default=10000)
    boolean(p, "--skip_corrupt_records", help="check every record's checksum first and "
            "leave out the damaged ones (counted in the log and in eval results as "
            "skipped_corrupt_records) instead of stopping at the first")
    flag("length_batching", default="off", choices=("longest", "off"),
         help="--do_eval: longest cuts each eval batch to its longest sequence (a "
              "multiple of 8); off keeps the shards' fixed length (google's)")
    args = p.parse_args(argv)
    if not (args.do_train or args.do_eval):
        p.error("at least one of --do_train or --do_eval must be true")
    if (args.bert_config_file is None) == (args.preset is None):
        p.error("give exactly one of --bert_config_file or --preset")
    return args


# What a run's checkpoints were made with, kept as OUTPUT_DIR/RUN_SETTINGS: a resumed run
# must have the same. Flags that say how a run goes, not what it computes, may change.
RUN_SETTINGS = "pretraining_settings.json"
RESUME_FREE = ("output_dir", "do_train", "do_eval", "eval_input_file", "eval_batch_size",
               "max_eval_steps", "save_checkpoints_steps", "keep_checkpoints",
               "steps_per_loop", "strategy", "cpu_devices", "tpu", "tpu_zone", "gcp_project",
               "jit_compile", "length_batching", "skip_corrupt_records", "vocab_file",
               # Read once, by the first run (a resumed run starts from its checkpoint):
               "init_checkpoint",
               # Where the model came from; the model itself is compared (bert_config).
               "bert_config_file", "preset")


# Everything a run writes in its --output_dir: the loop's TensorBoard folder, step log,
# checkpoints and the scratch folders of multi-worker saves (pretraining/trainer.py),
# then the model's config, the run's settings, the exported copies and eval results.
RUN_OUTPUTS = ("train", "train_log.jsonl", "checkpoint", "ckpt-*", ".worker_*",
               "bert_config.json", RUN_SETTINGS, "google", "hf", "eval_results.txt")


def load_config(args):
    from bert_tf.config import BertConfig
    return BertConfig.from_json_file(args.bert_config_file) if args.bert_config_file \
        else BertConfig.preset(args.preset)


def run_settings(args, config, train_files):
    """The settings a resumed run must share with the run that wrote the checkpoints: the
    model (bert_config), every flag not in RESUME_FREE (shapes, batch, schedule,
    optimizer, precision, seed, shuffling) and the training shards it streams, as JSON
    values."""
    import dataclasses
    import json
    values = {k: v for k, v in sorted(vars(args).items()) if k not in RESUME_FREE}
    values["input_file"] = [os.path.abspath(f) for f in train_files]
    values["bert_config"] = dataclasses.asdict(config)
    return json.loads(json.dumps(values))   # as read back from the file


def check_resume(args, settings):
    """ValueError, before anything is written, when --output_dir holds the checkpoints of
    a run with other settings: resuming them would mix two runs (or fail deep inside
    TensorFlow on a shape). A run without a checkpoint yet has nothing to resume."""
    import json
    latest = tf_latest(args.output_dir)
    if latest is None:
        return
    path = os.path.join(args.output_dir, RUN_SETTINGS)
    theirs = None
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                theirs = json.load(f)
        except ValueError:
            raise ValueError(f"{path}: not valid JSON (the settings of the run whose "
                             f"checkpoints {args.output_dir} holds)") from None
    else:   # a run from before the settings were kept: its model at least must match
        config_path = os.path.join(args.output_dir, "bert_config.json")
        if os.path.exists(config_path):
            import dataclasses

            from bert_tf.config import BertConfig
            theirs = json.loads(json.dumps({"bert_config": dataclasses.asdict(
                BertConfig.from_json_file(config_path))}))
    if theirs is None:
        return
    # Evaluating compares the model alone, and so does a run from before the settings
    # were kept (its record holds only the model).
    keys = sorted(theirs) if args.do_train else ["bert_config"]
    differ = []
    for key in keys:
        a, b = theirs.get(key), settings.get(key)
        if key == "bert_config" and a != b:
            fields = sorted(k for k in set(a or {}) | set(b or {})
                            if (a or {}).get(k) != (b or {}).get(k))
            differ += [f"bert_config {k}: {(a or {}).get(k)!r} there, {(b or {}).get(k)!r} now"
                       for k in fields]
        elif key == "input_file" and a != b:
            differ.append(f"--input_file: {len(a or [])} shard(s) there, other "
                          f"{len(b or [])} now")
        elif a != b:
            differ.append(f"--{key}: {a!r} there, {b!r} now")
    if differ:
        raise ValueError(
            f"--output_dir={args.output_dir} holds checkpoints ({os.path.basename(latest)}) "
            f"of a run with other settings ({'; '.join(differ[:3])}"
            f"{f'; {len(differ) - 3} more' if len(differ) > 3 else ''}): run that command "
            f"again to resume it, or choose another --output_dir")


def write_run_settings(output_dir, settings):
    from bert_tf.files import write_json
    write_json(os.path.join(output_dir, RUN_SETTINGS), settings)


def build(args, strategy, config):
    """Model + optimizer under the strategy's scope (init_checkpoint loaded if any)."""
    import keras

    from bert_tf import checkpoints
    from bert_tf.pretrainer import BertPretrainer
    from bert_tf.pretraining.optimization import create_optimizer

    if args.vocab_file:
        from bert_tf.tokenization import check_vocab_fits
        check_vocab_fits(args.vocab_file, config.vocab_size)
    if args.max_seq_length > config.max_position_embeddings:
        raise ValueError(f"--max_seq_length {args.max_seq_length} exceeds the config's "
                         f"max_position_embeddings {config.max_position_embeddings}")
    with strategy.scope():
        keras.utils.set_random_seed(args.seed)
        model = BertPretrainer.from_config_object(config, dtype=DTYPES[args.mixed_precision])
        if args.init_checkpoint and not tf_latest(args.output_dir):
            report = checkpoints.restore(model, args.init_checkpoint, allow_missing_heads=True)
            print(f"initialised from {args.init_checkpoint}: {report}", flush=True)
        optimizer = create_optimizer(args.optimizer, args.learning_rate, args.num_train_steps,
                                     args.num_warmup_steps, model.trainable_variables)
        if args.mixed_precision == "float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
    return config, model, optimizer


def tf_latest(output_dir):
    import tensorflow as tf
    return tf.train.latest_checkpoint(output_dir) if os.path.isdir(output_dir) else None


def run(args):
    import tensorflow as tf

    from bert_tf import checkpoints
    from bert_tf.pretraining.data import (check_shards, data_loss_error,
                                          expand_file_patterns, pretraining_dataset)
    from bert_tf.pretraining.distribution import create_strategy
    from bert_tf.pretraining.trainer import Pretrainer

    check_seq_length(args.max_seq_length, texts=2)
    # What a run writes in --output_dir is never one of its inputs, though a glob such as
    # --input_file='DIR/train*' with --output_dir=DIR matches it once written: without
    # this, the run's own resume would read other "shards" than its first start did.
    own = [os.path.join(args.output_dir, name) for name in RUN_OUTPUTS]
    train_files = expand_file_patterns(args.input_file, skip=own)
    eval_files = expand_file_patterns(args.eval_input_file or args.input_file, skip=own)
    # Before any work: shards that are not TFRecord files, cut, damaged, or written for
    # other lengths stop here with one line naming the file and byte offset.
    damaged = check_shards(
        sorted(set((train_files if args.do_train else []) +
                   (eval_files if args.do_eval else []))),
        args.max_seq_length, args.max_predictions_per_seq, args.skip_corrupt_records)
    skipped = sum(len(shard.skipped) for shard in damaged.values())
    config = load_config(args)
    settings = run_settings(args, config, train_files)
    check_resume(args, settings)
    strategy = create_strategy(args.strategy, args.tpu, args.tpu_zone, args.gcp_project,
                               args.cpu_devices)
    print(f"strategy: {type(strategy).__name__} with {strategy.num_replicas_in_sync} "
          f"replica(s); {len(train_files)} training file(s)", flush=True)
    os.makedirs(args.output_dir, exist_ok=True)
    config, model, optimizer = build(args, strategy, config)
    trainer = Pretrainer(strategy, model, optimizer, args.output_dir, args.train_batch_size,
                         args.gradient_accumulation_steps, args.jit_compile,
                         args.keep_checkpoints)
    if trainer._is_chief():
        config.to_json_file(os.path.join(args.output_dir, "bert_config.json"))
        if args.do_train:
            write_run_settings(args.output_dir, settings)

    if args.do_train:
        def dataset_fn(ctx, batch_size, skip_batches):
            dataset = pretraining_dataset(
                train_files, batch_size, args.max_seq_length, args.max_predictions_per_seq,
                is_training=True, input_context=ctx, seed=args.seed,
                shuffle_buffer=args.shuffle_buffer, damaged=damaged)
            return dataset.skip(skip_batches) if skip_batches else dataset
        try:
            trainer.train(dataset_fn, args.num_train_steps, args.save_checkpoints_steps,
                          args.steps_per_loop)
        except tf.errors.DataLossError as e:  # a record damaged past the first: which?
            raise data_loss_error(e, train_files) from None
        if trainer._is_chief():
            for fmt in ("google", "hf"):
                out = os.path.join(args.output_dir, fmt)
                checkpoints.save_checkpoint(model, out, fmt, vocab_file=args.vocab_file,
                                            overwrite=True)
                print(f"wrote {fmt} checkpoint to {out}", flush=True)
    else:
        latest = trainer.restore_latest()
        if latest is None and not args.init_checkpoint:
            raise ValueError(f"--do_eval without --do_train needs a checkpoint in "
                             f"{args.output_dir} or --init_checkpoint")

    if args.do_eval:
        dataset = pretraining_dataset(eval_files, args.eval_batch_size, args.max_seq_length,
                                      args.max_predictions_per_seq, is_training=False,
                                      damaged=damaged)
        if args.length_batching == "longest":
            from bert_tf.batching import trim_to_longest
            inputs = ("token_ids", "segment_ids", "padding_mask")
            dataset = dataset.map(lambda b: dict(b, **trim_to_longest(
                {k: b[k] for k in inputs})))
        try:
            metrics = trainer.evaluate(dataset, args.max_eval_steps)
        except tf.errors.DataLossError as e:
            raise data_loss_error(e, eval_files) from None
        if args.skip_corrupt_records:  # in the shards this run read, each counted once
            metrics["skipped_corrupt_records"] = skipped
        print("***** Eval results *****")
        for key in sorted(metrics):
            print(f"  {key} = {metrics[key]}")
        if trainer._is_chief():
            write_eval_results(os.path.join(args.output_dir, "eval_results.txt"), metrics)
        return metrics
    return None


def main(argv=None):
    """Exit status 0, or 1 with one `error: ...` line (bert_tf/cli.py); returns run's
    eval metrics (None without --do_eval)."""
    args = parse_args(argv)
    # After the flags: the trainer module loads TensorFlow, which run() needs anyway.
    from bert_tf.pretraining.trainer import Interrupted, NonFiniteLossError
    return run_main(run, args, errors=(NonFiniteLossError, Interrupted), positive=(
        "train_batch_size", "eval_batch_size", "num_train_steps", "save_checkpoints_steps",
        "steps_per_loop", "gradient_accumulation_steps", "max_seq_length",
        "max_predictions_per_seq", "learning_rate", "keep_checkpoints", "shuffle_buffer"),
        non_negative=("num_warmup_steps", "cpu_devices", "max_eval_steps"))


if __name__ == "__main__":
    main()
