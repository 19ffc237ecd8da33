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

import contextlib
import os

from bert_tf.base.cli import (ArgumentParser, DTYPES, boolean, check_not_inputs,
                              check_output_place, check_seq_length, run_main)
from bert_tf.base.files import write_results as write_eval_results  # google's eval_results.txt
# TensorFlow-free at import, like this module: --help and flag errors stay fast.
from bert_tf.training.run import check_resume
from bert_tf.data.inputs import chooses_masks
from bert_tf.base.training_plumbing import is_chief


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
              "a released checkpoint's name (bert_tf/checkpoints/registry.py), downloaded once")
    flag("max_seq_length", type=int, default=128)
    flag("max_predictions_per_seq", type=int, default=20)
    flag("masking", default=None, choices=("static", "dynamic"),
         help="static: the shards' masks (google's); dynamic: new masks for every batch "
              "(RoBERTa's; needs --vocab_file), from google-format shards or those "
              "create_pretraining_data --masking=none writes. Default: what the shards' "
              "summaries say they were made for (dynamic for --masking=none shards), else "
              "static")
    flag("next_sentence", default=None, choices=("nsp", "sop", "none"),
         help="the second task: nsp or sop (a two-way head on the shards' "
              "next_sentence_labels, as create_pretraining_data wrote them) or none (masked "
              "LM alone, no next-sentence head). Default: the shards' (their summaries' "
              "--next_sentence), else nsp; one that contradicts them is refused (none on "
              "pair shards is allowed: the masked LM alone)")
    flag("masked_lm_prob", type=float, default=0.15,
         help="--masking=dynamic: share of an example's tokens to predict")
    boolean(p, "--do_whole_word_mask", default=False,
            help="--masking=dynamic: mask whole words (80/10/10 drawn once per word): '##' "
                 "pieces continue a word, and so do the Chinese words marked in shards "
                 "that create_pretraining_data segmented (docs/pretraining_data.md)")
    flag("max_ngram_size", type=int, default=1,
         help="--masking=dynamic: mask spans of up to N words (or pieces), P(n) ~ 1/n")
    boolean(p, "--do_train")
    boolean(p, "--do_eval")
    flag("train_batch_size", type=int, default=32, help="global batch size")
    flag("eval_batch_size", type=int, default=8)
    flag("learning_rate", type=float, default=5e-5)
    flag("num_train_steps", type=int, default=100000)
    flag("num_warmup_steps", type=int, default=10000)
    flag("num_schedule_steps", type=int, default=None,
         help="steps the warm-up and decay schedule spans (default: --num_train_steps); "
              "more than --num_train_steps stops the run early in its schedule, as phase 1 "
              "of a schedule that phase 2 continues")
    flag("start_step", type=int, default=0,
         help="the step a new run starts at, in its schedule: phase 2 of a continued "
              "schedule gives phase 1's --num_train_steps (with --init_checkpoint); a "
              "resumed run goes on from its own checkpoint")
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
    if args.num_schedule_steps is not None and args.num_schedule_steps <= 0:
        p.error(f"--num_schedule_steps must be a positive number, got "
                f"{args.num_schedule_steps}")
    if args.num_train_steps > 0:    # else run_main's one line says it must be positive
        if args.num_train_steps > schedule_length(args):
            p.error(f"--num_train_steps ({args.num_train_steps}) is past the schedule's "
                    f"end (--num_schedule_steps={args.num_schedule_steps})")
        if args.start_step >= args.num_train_steps:
            p.error(f"--start_step ({args.start_step}) must be below --num_train_steps "
                    f"({args.num_train_steps})")
    if args.masking == "dynamic" and not args.vocab_file:
        p.error("--masking=dynamic needs --vocab_file (the ids of [CLS], [SEP], [MASK] "
                "and, for whole words, which tokens are '##' pieces)")
    if args.masking == "static" and chooses_masks(args.masked_lm_prob,
                                                  args.do_whole_word_mask,
                                                  args.max_ngram_size):
        p.error("--masked_lm_prob, --do_whole_word_mask and --max_ngram_size choose "
                "dynamic masks; with --masking=static the shards' masks are used (pass "
                "them to create_pretraining_data instead)")
    return args


def schedule_length(args):
    """Steps of the warm-up and decay schedule: --num_schedule_steps, else the run's."""
    return args.num_schedule_steps or args.num_train_steps


def resolve_objective(args, made_for):
    """Sets --next_sentence and --masking where not given from what the shards were made
    for (`made_for`: training/run.py's shard_objective, None for shards without a
    summary: nsp and static); ValueError, one line, for a given flag that contradicts
    the shards (--next_sentence=none on pair shards is the masked LM alone: allowed)."""
    made = made_for or {}
    shard = made.get("shard")
    taken = []
    for flag, default in (("next_sentence", "nsp"), ("masking", None)):
        given, theirs = getattr(args, flag), made.get(flag)
        if given is None:
            setattr(args, flag, theirs or default)
            if theirs:
                taken.append(f"--{flag}={theirs}")
            continue
        if theirs is None or given == theirs or (flag, given) == ("next_sentence", "none"):
            continue
        if flag == "masking" and given == "dynamic":
            continue    # new masks over the shards' own: allowed
        raise ValueError(
            f"--{flag}={given}: the shards were made for --{flag}={theirs} ({shard}'s "
            f"summary); drop --{flag} to train for what they hold, or write the shards "
            f"again with create_pretraining_data --"
            f"{'masking=none' if given == 'dynamic' else flag}={given}")
    args.masking = args.masking or "static"
    if taken:
        print(f"objective: {' '.join(taken)}, as the shards were made ({shard}'s summary)",
              flush=True)
    if args.masking == "dynamic" and not args.vocab_file:
        raise ValueError(f"--masking=dynamic (the shards' --masking=none, {shard}'s summary) "
                         f"needs --vocab_file (the ids of [CLS], [SEP], [MASK] and, for "
                         f"whole words, which tokens are '##' pieces)")
    if args.masking == "static" and chooses_masks(args.masked_lm_prob,
                                                  args.do_whole_word_mask,
                                                  args.max_ngram_size):
        raise ValueError(
            "--masked_lm_prob, --do_whole_word_mask and --max_ngram_size choose dynamic "
            "masks; with --masking=static the shards' masks are used (pass them to "
            "create_pretraining_data instead)")


def masking_spec(args, files=()):
    """The MaskingSpec of --masking=dynamic, or None. Whole words are the shards' marks
    where `files` carry them (Chinese words, create_pretraining_data
    --chinese_word_segmenter --masking=none), else '##' pieces continue a word."""
    if args.masking != "dynamic":
        return None
    from bert_tf.training.data import has_word_marks
    from bert_tf.training.dynamic_masking import MaskingSpec
    from bert_tf.text.text_rules import load_vocab
    tokens = load_vocab(args.vocab_file)
    word_marks = args.do_whole_word_mask and has_word_marks(files)
    if word_marks:
        print("whole-word masking: the words the shards mark (a segmenter's Chinese "
              "words, and '##' pieces)", flush=True)
    try:
        return MaskingSpec.from_vocab(tokens, args.max_predictions_per_seq,
                                      args.masked_lm_prob, args.do_whole_word_mask,
                                      args.max_ngram_size, word_marks)
    except ValueError as e:
        raise ValueError(f"--vocab_file={args.vocab_file}: {e}") from None


def run(args):
    """The run's library calls (bert_tf/training/run.py) with its flags as arguments;
    returns the eval metrics (None without --do_eval). The shard sets it reads are
    locked for reading while it runs (no create_pretraining_data rewrites them)."""
    with contextlib.ExitStack() as locks:
        return _run(args, locks)


def _run(args, locks):
    from bert_tf.training import run as pretraining
    from bert_tf.training.distribution import create_strategy, describe
    from bert_tf.training.trainer import PretrainingLoop

    check_seq_length(args.max_seq_length, texts=2)
    # Its folder is never the checkpoint it starts from, nor holds or lies inside it, and
    # never holds a vocabulary or config it reads under a name the run writes.
    check_not_inputs([("output_dir", args.output_dir)],
                     [("--vocab_file", args.vocab_file),
                      ("--bert_config_file", args.bert_config_file)],
                     checkpoints=[("--init_checkpoint", args.init_checkpoint)],
                     writes=pretraining.RUN_OUTPUTS)
    check_output_place("output_dir", args.output_dir, folder=True)
    shards = pretraining.find_shards(
        args.input_file, args.eval_input_file, args.output_dir, args.do_train, args.do_eval,
        args.max_seq_length, args.max_predictions_per_seq, args.skip_corrupt_records,
        args.masking, locks=locks)
    pretraining.check_vocabulary(shards, args.vocab_file)
    resolve_objective(args, shards.made_for)
    masking = masking_spec(args, sorted(set(
        (shards.train if args.do_train else []) + (shards.eval if args.do_eval else []))))
    config = pretraining.load_config(args.bert_config_file, args.preset)
    if masking is not None and masking.vocab_size != config.vocab_size:
        raise ValueError(f"--vocab_file={args.vocab_file} has {masking.vocab_size} tokens, "
                         f"the model's vocab_size is {config.vocab_size}")
    settings = pretraining.run_settings(vars(args), config, shards.train)
    check_resume(args.output_dir, settings, args.do_train)
    strategy = create_strategy(args.strategy, args.tpu, args.tpu_zone, args.gcp_project,
                               args.cpu_devices)
    print(f"strategy: {describe(strategy)}; {len(shards.train)} training file(s)",
          flush=True)
    os.makedirs(args.output_dir, exist_ok=True)
    model, optimizer = pretraining.build(
        strategy, config, args.output_dir, max_seq_length=args.max_seq_length,
        seed=args.seed, dtype=DTYPES[args.mixed_precision], optimizer=args.optimizer,
        learning_rate=args.learning_rate, num_train_steps=schedule_length(args),
        num_warmup_steps=args.num_warmup_steps, vocab_file=args.vocab_file,
        init_checkpoint=args.init_checkpoint, next_sentence=args.next_sentence != "none",
        start_step=args.start_step)
    loop = PretrainingLoop(strategy, model, optimizer, args.output_dir, args.train_batch_size,
                           args.gradient_accumulation_steps, args.jit_compile,
                           args.keep_checkpoints)
    pretraining.write_run_record(loop, config, settings, args.do_train)
    if args.do_train:
        pretraining.train_and_export(
            loop, shards, num_train_steps=args.num_train_steps,
            save_checkpoints_steps=args.save_checkpoints_steps,
            steps_per_loop=args.steps_per_loop, max_seq_length=args.max_seq_length,
            max_predictions_per_seq=args.max_predictions_per_seq, seed=args.seed,
            shuffle_buffer=args.shuffle_buffer, vocab_file=args.vocab_file, masking=masking,
            start_step=args.start_step)
    else:
        pretraining.restore_for_eval(loop, args.init_checkpoint)
    if not args.do_eval:
        return None
    metrics = pretraining.evaluate(
        loop, shards, eval_batch_size=args.eval_batch_size,
        max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq,
        max_eval_steps=args.max_eval_steps, length_batching=args.length_batching,
        skip_corrupt_records=args.skip_corrupt_records, masking=masking, seed=args.seed)
    print("***** Eval results *****")
    for key in sorted(metrics):
        print(f"  {key} = {metrics[key]}")
    if is_chief(strategy):
        write_eval_results(os.path.join(args.output_dir, "eval_results.txt"), metrics)
    return metrics


def main(argv=None):
    """Exit status 0, or 1 with one `error: ...` line (bert_tf/base/cli.py); returns run's
    eval metrics (None without --do_eval)."""
    args = parse_args(argv)
    # After the flags: the loop's module loads TensorFlow, which run() needs anyway.
    from bert_tf.training.trainer import NonFiniteLossError
    from bert_tf.base.training_plumbing import Interrupted
    return run_main(run, args, errors=(NonFiniteLossError, Interrupted), positive=(
        "train_batch_size", "eval_batch_size", "num_train_steps", "save_checkpoints_steps",
        "steps_per_loop", "gradient_accumulation_steps", "max_seq_length",
        "max_predictions_per_seq", "learning_rate", "keep_checkpoints", "shuffle_buffer"),
        non_negative=("num_warmup_steps", "cpu_devices", "max_eval_steps", "start_step"))


if __name__ == "__main__":
    main()
