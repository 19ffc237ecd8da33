"""The fine-tuning driver: one run of any task, from its settings to its results files.

    results = driver.run(ClassificationTask(),
                         ClassificationConfig(output_dir="runs/mrpc", do_train=True, ...))

`run` owns what every task does the same way: the distribution strategy, the paths
beside the checkpoint, the encoder, the optimizer, Keras `fit` with TensorBoard,
best/last checkpoints and a resumable state (a run stopped by SIGTERM or killed resumes
where it was: tasks/resume.py), loading the chosen weights, evaluation, prediction and
eval_results.txt. A task (a `Task` subclass, tasks/task.py; the project's are in
tasks/families/) says only what differs: how it reads its files, what its examples
become, which model, loss and metrics, and how predictions are scored and written. Its
settings are a frozen dataclass (`FineTuneConfig` or a subclass); the command lines
(`python -m tasks.<name>`) fill one from their flags.

Adding a task: subclass `Task` (read_train, settings, build_model, compile, dataset,
evaluate and/or predict), give it its settings type if it has settings of its own (a
`FineTuneConfig` subclass: its fields, their help texts `FLAGS` and ranges `RANGES`; the
command, the Task and the serving module read them there), and declare its parts: `model_class` (a bert_tf task model: the run directory it leaves),
`serving_module` (an export.serving class) and `export_name`, registered with `@family`
for `python -m export.saved_model`. tests/tasks/test_driver.py builds and exports one in about
100 lines.
"""

import contextlib
import dataclasses
import math
import os
import sys
from typing import ClassVar

from bert_tf.models import run_dir
from bert_tf.base.cli import DTYPES, check_seq_length
from bert_tf.base.files import write_results


# --jit_compile's help text, for the families' settings that offer the flag (FLAGS: after
# their own flags in --help).
JIT_COMPILE_FLAG = {"jit_compile": dict(help=(
    "XLA-compile the train/eval steps (compiling takes a minute or more; on "
    "CPU the steps measured slower with it: docs/benchmarks.md, Fine-tuning)"))}


@dataclasses.dataclass(frozen=True)
class FineTuneConfig:
    """google-research/bert's fine-tuning settings (run_classifier.py / run_squad.py
    flag names; `python -m tasks.<name> --help` describes each)."""
    output_dir: str
    init_checkpoint: str = None
    bert_config_file: str = None
    vocab_file: str = None
    do_lower_case: bool = True
    max_seq_length: int = 128
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    weight_decay: float = 0.01
    mixed_precision: str = "float32"
    strategy: str = "auto"
    cpu_devices: int = 0
    tpu: str = None
    seed: int = 12345
    length_batching: str = "longest"
    jit_compile: bool = False
    save_checkpoints_steps: int = 1000

    # A family's settings (a subclass) own its flags: FLAGS, the help texts of its own
    # fields in --help's order, after google's (tasks/common.py's COMMON_FLAGS; defaults
    # and types are the fields'), and RANGES, its numeric flags' ranges by kind
    # (bert_tf/base/cli.py's check_flags: positive, non_negative, fractions), which
    # `flag_ranges` adds after its bases'.
    FLAGS: ClassVar[dict] = {}
    RANGES: ClassVar[dict] = dict(
        positive=("max_seq_length", "train_batch_size", "eval_batch_size",
                  "predict_batch_size", "learning_rate", "num_train_epochs",
                  "save_checkpoints_steps"),
        non_negative=("weight_decay", "cpu_devices"),
        fractions=("warmup_proportion",))

    @classmethod
    def flag_ranges(cls):
        """{kind: flag names} of every numeric flag of these settings (check_flags'
        keyword arguments): the RANGES of its bases first, then its own."""
        ranges = {}
        for klass in reversed(cls.__mro__):
            for kind, names in vars(klass).get("RANGES", {}).items():
                ranges[kind] = ranges.get(kind, ()) + tuple(names)
        return ranges

    @classmethod
    def from_args(cls, args):
        """The config of parsed flags (an argparse Namespace; unknown names ignored)."""
        names = {field.name for field in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in vars(args).items() if k in names})

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


def run(task, config):
    """Trains (--do_train), evaluates (--do_eval) and predicts (--do_predict) `task` as
    `config` says; returns the evaluation metrics ({} without any)."""
    from bert_tf.text.tokenization import (BertTokenizer, check_case_matches_vocab,
                                           check_vocab_fits)
    task.check(config)
    check_output_dir(task, config)
    # First: splitting the CPU into logical devices (--cpu_devices) must happen before
    # any TensorFlow op runs, and the tokenizer below runs some.
    strategy = create_strategy(config)
    os.makedirs(config.output_dir, exist_ok=True)
    train = None
    if config.do_train:
        config = task.training_config(resolve_paths(config))
    else:
        saved = run_dir.read_task_config(config.output_dir, task.name)
        config = task.restore(config, saved)
    check_seq_length(config.max_seq_length, task.text_segments(config))
    check_case_matches_vocab(config.vocab_file, config.do_lower_case)
    tokenizer = BertTokenizer(config.vocab_file, do_lower_case=config.do_lower_case)
    if config.do_train:
        train = task.read_train(config, tokenizer)
        settings = task.settings(config, train)
        # A resumable state of other settings is refused before save_task_files below
        # rewrites TASK_config.json: the refused command leaves the folder as it was
        # (else the old weights would be exported under the new labels).
        from bert_tf.base.files import data_fingerprints
        from tasks.resume import check_resume_state, resume_settings
        data = data_fingerprints(task.training_files(config) +
                                 [("--vocab_file", config.vocab_file)])
        resolved = task.resolved(config, settings, train)
        resuming, _ = check_resume_state(config.output_dir, resume_settings(
            config, *step_plan(config, train_steps(config, task.num_examples(train))), data,
            resolved))
    else:
        settings = saved
    evaluation = task.read_eval(config, settings, tokenizer)
    with strategy.scope():
        encoder = task_encoder(config)
        model = task.build_model(encoder, config, settings, train)
        task.prepare(model, config, train, evaluation)
    check_vocab_fits(config.vocab_file, encoder.bert_config.vocab_size)

    if config.do_train:
        with strategy.scope():
            optimizer, num_steps = create_optimizer(config, task.num_examples(train),
                                                    model.trainable_variables)
            task.compile(model, optimizer, config,
                         resolve_jit_compile(config.jit_compile, strategy))
        if resuming is None:
            remove_earlier_weights(config.output_dir)
        run_dir.save_task_files(config.output_dir, task.name, settings, encoder.bert_config,
                                config.vocab_file)
        validation = task.validation(evaluation) if evaluation is not None else None
        with strategy.scope():
            trained, train, validation = task.trainer(model, train, validation, config,
                                                      settings)
        eval_ds = None
        if validation is not None:
            eval_ds = task.dataset(validation, config, settings, training=False)
        metric, mode = task.monitor(settings)
        fit(trained, lambda: task.dataset(train, config, settings, training=True), eval_ds,
            config, num_steps, monitor=f"val_{metric}" if eval_ds is not None else None,
            mode=mode, saved=model, data=data, resolved=resolved)
    run_dir.load_weights(model, run_dir.weights_file(config.output_dir))

    results = {}
    if config.do_eval:
        results.update(task.evaluate(model, evaluation, config, settings))
    if config.do_predict:
        results.update(task.predict(model, config, settings, tokenizer, evaluation))
    if results:
        write_results(os.path.join(config.output_dir, "eval_results.txt"), results)
        task.print_results(results)
    if config.do_train:
        # Kept until here: a run killed while it evaluates or predicts skips training
        # when it is run again.
        from tasks.resume import remove_resume_state
        remove_resume_state(config.output_dir)
    return results


# What a run writes at the top of its --output_dir besides TASK_config.json (and the
# vocabulary's copy, which it never writes over itself: run_dir.save_task_files).
RUN_FILES = ("bert_config.json", *run_dir.WEIGHT_FILES, "eval_results.txt", "train_log.jsonl",
             "logs")


def check_output_dir(task, config):
    """ValueError, before anything is written, when --output_dir would destroy or change
    what the run reads: it is, holds or lies inside --init_checkpoint (training), or one
    of the files it writes (every run's and the family's `written_files`) is one of the
    family's `input_files`; or when it cannot be a folder (bert_tf/base/checks.py)."""
    from bert_tf.base.checks import check_not_inputs, check_output_place
    from tasks.resume import RESUME_DIR
    check_not_inputs([("output_dir", config.output_dir)], task.input_files(config),
                     checkpoints=[("--init_checkpoint", config.init_checkpoint)]
                     if config.do_train else [],
                     writes=(f"{task.name}_config.json", RESUME_DIR, *RUN_FILES,
                             *task.written_files(config)))
    check_output_place("output_dir", config.output_dir, folder=True)


# ----------------------------------------------------------------------------- steps

def batch_size(config, training):
    """train_batch_size for training batches, eval_batch_size for evaluation."""
    return config.train_batch_size if training else config.eval_batch_size


def length_batching(config, training):
    """The bert_tf.text.batching mode of a pipeline: evaluation and prediction keep their
    example order, so sort and bucket become longest there."""
    mode = getattr(config, "length_batching", "off")
    return "longest" if mode in ("sort", "bucket") and not training else mode


def create_strategy(config):
    from bert_tf.training.distribution import create_strategy as create
    return create(config.strategy, tpu=config.tpu, cpu_devices=config.cpu_devices)


def resolve_paths(config):
    """The config with vocab_file / bert_config_file found beside the checkpoint; one
    clear error when neither is found."""
    from bert_tf.checkpoints.dispatch import GOOGLE_CONFIG_NAME, HF_CONFIG_NAME, vocab_beside
    from bert_tf.checkpoints.registry import resolve_checkpoint
    base = None
    if config.init_checkpoint:
        local = resolve_checkpoint(config.init_checkpoint)  # a released name: its cache dir
        base = local if os.path.isdir(local) else os.path.dirname(local)
    bert_config_file = config.bert_config_file
    if bert_config_file is None and base:
        for name in (GOOGLE_CONFIG_NAME, HF_CONFIG_NAME):
            if os.path.exists(os.path.join(base, name)):
                bert_config_file = os.path.join(base, name)
                break
    vocab_file = vocab_beside(config.init_checkpoint, config.vocab_file)
    if bert_config_file is None and not config.init_checkpoint:
        raise ValueError("--bert_config_file is required without --init_checkpoint")
    return config.replace(vocab_file=vocab_file, bert_config_file=bert_config_file)


def build_encoder(config):
    """The encoder from init_checkpoint (any format the converters read), or randomly
    initialised from bert_config_file. Call under the strategy's scope."""
    import keras

    from bert_tf.checkpoints.dispatch import load_encoder
    from bert_tf.base.config import BertConfig
    from bert_tf.models.encoder import BertEncoder
    keras.utils.set_random_seed(config.seed)
    dtype = DTYPES[config.mixed_precision]
    if config.init_checkpoint:
        return load_encoder(config.init_checkpoint,
                            bert_config_file=config.bert_config_file, dtype=dtype)
    return BertEncoder.from_config_object(
        BertConfig.from_json_file(config.bert_config_file), dtype=dtype)


def task_encoder(config):
    """The encoder of a run: from the pretrained checkpoint with do_train, else shaped
    like the fine-tuned run in output_dir (its task model's weights are loaded after).
    Checks max_seq_length against its positions. Call under the strategy's scope."""
    if config.do_train:
        encoder = build_encoder(config)
    else:
        encoder = run_dir.encoder_from_task_dir(config.output_dir,
                                                DTYPES[config.mixed_precision])
    positions = encoder.bert_config.max_position_embeddings
    if config.max_seq_length > positions:
        raise ValueError(f"--max_seq_length {config.max_seq_length} exceeds the model's "
                         f"max_position_embeddings {positions}")
    return encoder


def train_steps(config, num_train_examples):
    """The number of training steps: whole batches per epoch times num_train_epochs
    (rounded up), at least one."""
    steps_per_epoch = max(1, num_train_examples // config.train_batch_size)
    return max(1, int(math.ceil(steps_per_epoch * config.num_train_epochs)))


def step_plan(config, num_train_steps):
    """(steps per epoch, epochs) of fit: num_train_steps over the whole epochs that
    num_train_epochs rounds up to (the plan a resumable state records)."""
    epochs_wanted = max(1, int(math.ceil(config.num_train_epochs)))
    steps_per_epoch = max(1, num_train_steps // epochs_wanted)
    return steps_per_epoch, max(1, int(math.ceil(num_train_steps / steps_per_epoch)))


def create_optimizer(config, num_train_examples, variables):
    """AdamW, warmup over warmup_proportion of the steps then linear decay, BERT's
    weight-decay exclusions, gradients clipped to global norm 1.0 (google's value).
    Returns (optimizer, num_train_steps)."""
    from bert_tf.training.optimization import create_optimizer as create
    num_train_steps = train_steps(config, num_train_examples)
    warmup = int(num_train_steps * config.warmup_proportion)
    optimizer = create("adamw", config.learning_rate, num_train_steps, warmup, variables,
                       weight_decay=config.weight_decay)
    optimizer.global_clipnorm = 1.0
    return optimizer, num_train_steps


def resolve_jit_compile(requested, strategy):
    """jit_compile, except under a strategy mirrored over several CPU devices
    (--cpu_devices): XLA compiles the whole step for one device and fails on variables
    that live on the others."""
    from bert_tf.training.distribution import worker_devices
    if requested and strategy.num_replicas_in_sync > 1 and \
            all("CPU" in d.upper() for d in worker_devices(strategy)):
        print("note: --jit_compile is off: XLA cannot compile one step over several CPU "
              "devices", file=sys.stderr, flush=True)
        return False
    return requested


def remove_earlier_weights(output_dir):
    """Deletes the weights files of an earlier run in output_dir as a new training (not a
    resumed one) writes its own settings there: left beside them, they would be read as
    this run's (export, or run_dir.weights_file, which prefers best over last) until it
    saves its own, under other labels or settings; and a run without an evaluation set
    never replaces best.weights.h5."""
    for name in run_dir.WEIGHT_FILES:
        path = os.path.join(output_dir, name)
        if os.path.exists(path):
            print(f"removing {path} of an earlier run (a new training starts here)",
                  file=sys.stderr, flush=True)
            os.remove(path)


def fit(model, train_ds_fn, eval_ds, config, num_train_steps, monitor, mode="max",
        eval_steps=None, saved=None, data=None, resolved=None):
    """Keras fit with TensorBoard, progress (a bar on a terminal, else a line every 5% of
    the steps), each step's logs in output_dir/train_log.jsonl, and two checkpoints in
    output_dir: `last.weights.h5` after every epoch and `best.weights.h5` for the best
    `monitor` (a validation metric name such as "val_accuracy"; mode "max" or "min") of
    the model `saved` (default: `model`; a task model when fit trains a part of it).

    Resumable: every `config.save_checkpoints_steps` steps and at every epoch end the
    whole training state goes to output_dir/resume/ (tasks/resume.py), and SIGTERM or
    SIGINT saves it after the current step and raises bert_tf/base/training_plumbing.py's
    Interrupted (one line, exit 1). A run that finds that state continues from its step,
    bit for bit as if never stopped.
    `data`: what the run learns from, by content (bert_tf/base/files.py's data_fingerprints),
    kept in the state: a resume on other data is refused. `resolved`: the run's settings
    (TASK_config.json's dict), which the state compares as they resolved
    (tasks/resume.py's resume_settings).
    `train_ds_fn()` makes the training tf.data.Dataset, a new one for each fit call: the
    iterators of one dataset object may share its shuffles' reshuffling state, so each
    stream starts from a dataset that nothing has read. Returns the Keras History of
    the last fit call (None when the saved state says training is done)."""
    from bert_tf.base.progress import interactive, step_lines
    from bert_tf.base.training_plumbing import MetricLog, stop_requests
    from tasks.resume import ResumeCallback, ResumeState, resume_settings
    saved = model if saved is None else saved
    steps_per_epoch, epochs = step_plan(config, num_train_steps)
    total_steps = steps_per_epoch * epochs
    callbacks, best = checkpoint_callbacks(config, saved, eval_ds is not None and monitor,
                                           monitor, mode)
    first_ds = train_ds_fn()
    if eval_ds is not None:
        # The dev set's batches are built in the first validation and read from memory
        # in every later one (google's run_classifier writes its eval features once): a
        # validation no longer tokenizes again, nor starts the tokenizer's functions.
        eval_ds = eval_ds.cache()
    with fit_reads_only_its_data(model, first_ds.element_spec):
        state = ResumeState(config.output_dir, model, saved,
                            resume_settings(config, steps_per_epoch, epochs, data,
                                            resolved))
        start = resume_step(state, best, total_steps)
        if start is None:
            return None
        if not interactive():
            # Keras prints nothing to a file until an epoch ends: a line every few steps.
            callbacks.append(step_lines(total_steps, config.train_batch_size, initial=start))
        log = MetricLog(os.path.join(config.output_dir, "train_log.jsonl"), start,
                        enabled=state.chief)
        tracker = ResumeCallback(state, start, steps_per_epoch, total_steps,
                                 config.save_checkpoints_steps, best, log)
        callbacks.append(tracker)   # last: it saves what the checkpoint callbacks updated

        history = None
        with stop_requests() as stop:
            tracker.stop = stop
            phases = fit_phases(start, steps_per_epoch, epochs)
            for i, (first_epoch, steps, skip) in enumerate(phases):
                train_ds = (first_ds if i == 0 else train_ds_fn()).repeat()
                if skip:
                    train_ds = train_ds.skip(skip)
                last_epoch = first_epoch + 1 if steps < steps_per_epoch else epochs
                tracker.metrics_from = state.latest_path if steps < steps_per_epoch else None
                # shuffle=False: the pipelines shuffle themselves (Keras would only warn
                # that it cannot shuffle a tf.data.Dataset).
                history = model.fit(train_ds, validation_data=eval_ds, epochs=last_epoch,
                                    initial_epoch=first_epoch, steps_per_epoch=steps,
                                    validation_steps=eval_steps, callbacks=callbacks,
                                    verbose=1 if interactive() else 2, shuffle=False)
        # Training is done (a stop asked for in its last step has nothing left to stop): a
        # rerun that finds this skips training (see run()).
        state.save(total_steps, finished=True)
        return history


def checkpoint_callbacks(config, saved, validated, monitor, mode):
    """([TensorBoard, last.weights.h5, best.weights.h5 when `validated`], the best one
    or None): the callbacks of every fit, saving the model `saved`."""
    import keras
    callbacks = [
        # write_graph=False: serializing the train step's graph (the whole encoder and its
        # gradients) costs seconds to tens of seconds at the first step; scalars suffice.
        keras.callbacks.TensorBoard(os.path.join(config.output_dir, "logs"),
                                    write_graph=False),
        run_dir.WeightsCheckpoint(saved, os.path.join(config.output_dir, "last.weights.h5")),
    ]
    best = None
    if validated:
        best = run_dir.WeightsCheckpoint(
            saved, os.path.join(config.output_dir, "best.weights.h5"), monitor=monitor,
            mode=mode, save_best_only=True)
        callbacks.append(best)
    return callbacks, best


def resume_step(state, best, total_steps):
    """The step training starts from: 0, or that of the resumable state `state` restores
    (said in one line; the best score so far goes back into `best`); None when that
    state says training is done."""
    start, saved_state = state.restore()
    if saved_state is not None:
        print(f"resumed from {state.latest_path} at step {start} of {total_steps}"
              + (f" (skipping {start} batches of input)" if start < total_steps else
                 ": training is done"), flush=True)
        if start >= total_steps:
            return None
        if best is not None and saved_state.get("best") is not None:
            best.best = saved_state["best"]
    return start


def fit_phases(start, steps_per_epoch, epochs):
    """[(first epoch, steps, batches to skip)] of the fit calls from step `start`. A run
    resumed inside epoch e first finishes that epoch (a fit of its remaining steps, which
    Keras still numbers from 0), then fits the epochs after it."""
    epoch, done = divmod(start, steps_per_epoch)
    phases = []
    if done:
        phases.append((epoch, steps_per_epoch - done, start))
        epoch += 1
    if epoch < epochs:
        phases.append((epoch, steps_per_epoch, epoch * steps_per_epoch))
    return phases


@contextlib.contextmanager
def fit_reads_only_its_data(model, element_spec):
    """`model` built for fit (compiled metrics, losses, optimizer) from the training
    data's element_spec, and fit kept from reading a batch of its own to build it.

    Under a tf.distribute strategy, Keras' fit (and evaluate) first reads one batch from
    an iterator of its own (`_maybe_symbolic_build`), then trains from a new iterator of
    the same dataset. The iterators of one dataset share the seed of its shuffles, so
    where a pipeline reshuffles per pass (a shuffle under the outer repeat: NER's,
    SQuAD's) the training batches depend on that read: a resumed run, which first skips
    the batches done, reads other passes there and trains on other batches than the
    uninterrupted run; and on a small set the read's prefetching can end in another pass
    from one run to the next. Built here from shapes, nothing reads the data but
    training, and the metric variables exist before a resumed run restores them."""
    with model.distribute_strategy.scope():
        model._symbolic_build(data_batch=element_spec)
    # Everything is built: Keras' own build step (the read included) has nothing to do.
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
    try:
        yield
    finally:
        del model._maybe_symbolic_build


def predict_per_token(model, dataset, seq_length):
    """model.predict for models whose outputs all have a token axis (axis 1), over batches
    that may be cut to different widths: each batch's outputs are padded back to
    seq_length before they are joined. -> {name: np.ndarray [N, seq_length, ...]}."""
    import numpy as np
    outputs = {}
    for element in dataset:
        inputs = element[0] if isinstance(element, tuple) else element
        for name, value in model.predict_on_batch(inputs).items():
            value = np.asarray(value)
            pad = [(0, 0)] * value.ndim
            pad[1] = (0, seq_length - value.shape[1])
            outputs.setdefault(name, []).append(np.pad(value, pad))
    return {name: np.concatenate(parts) for name, parts in outputs.items()}
