"""The pretraining loop: one code path for every tf.distribute strategy.

Per step, on each replica: forward + backward over the local batch (split into
micro-batches for gradient accumulation), then one all-reduce of the gradients, clipping
to global norm 1.0, and the optimizer update. Loss normalisers (sum of masked-LM weights,
number of examples) are all-reduced *before* the backward pass, so the summed gradient is
exactly the gradient of the global-batch loss whatever the number of replicas or
micro-batches.

State saved by `tf.train.CheckpointManager`: model, optimizer (slots and step), the
dropout layers' random state and the input iterator's position, so a run killed at any
point resumes with the same losses, bit for bit. Stopping on a signal (Interrupted), the
step log and the chief check are bert_tf/base/training_plumbing.py's, shared with fine-tuning.
"""

import contextlib
import os
import signal
import time

import keras
import tensorflow as tf

from bert_tf.models.pretraining_losses import local_sums, metrics_from_sums
from bert_tf.training.distribution import worker_devices
from bert_tf.training.optimization import CLIP_NORM
from bert_tf.base.files import system_error
from bert_tf.base.shard_schema import MODEL_INPUTS
from bert_tf.base.training_plumbing import Interrupted, MetricLog, is_chief, stop_requests
from bert_tf.checkpoints.bundle import check_bundle, latest_prefix, restore_or_refuse

METRIC_KEYS = ("loss", "masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss",
               "next_sentence_accuracy", "learning_rate", "grad_norm")
NEXT_SENTENCE_KEYS = ("next_sentence_loss", "next_sentence_accuracy")


def _restore(checkpoint, prefix):
    """checkpoint.restore(prefix); ValueError in one line naming it when TensorFlow cannot
    read it (a changed byte fails a tensor's checksum; a cut or missing file is said
    before, by bundle.check_bundle)."""
    return restore_or_refuse(lambda: checkpoint.restore(prefix), prefix, "checkpoint")


class NonFiniteLossError(RuntimeError):
    pass


def _is_multi_worker(strategy):
    """MultiWorkerMirroredStrategy over a cluster (TF_CONFIG), where a stop must be agreed
    between the workers; without a cluster it is one process, like the others."""
    resolver = getattr(strategy, "cluster_resolver", None)
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and resolver is not None and bool(resolver.cluster_spec().jobs))


@contextlib.contextmanager
def _preemption_handler(strategy, manager, exit_fn):
    """tf.distribute.experimental.PreemptionCheckpointHandler over the trainer's
    `manager`. Created after the trainer's own restore: it adds a `checkpointed_runs`
    counter to the checkpoint (older checkpoints lack it) and restores the latest
    checkpoint again to read it. Its SIGTERM handler (which tells the other workers
    through the coordination service) replaces the process's until the block ends.
    After a SIGTERM on any worker, `save_checkpoint_if_preempted` on every worker saves
    after the same loop (no grace period) and calls `exit_fn`."""
    previous = signal.getsignal(signal.SIGTERM)
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, manager,
        termination_config=tf.distribute.experimental.TerminationConfig(
            exit_fn=exit_fn, grace_period=0))
    try:
        yield handler
    finally:
        signal.signal(signal.SIGTERM, previous)


class PretrainingLoop:
    """The pretraining loop (not the model: that is BertPretrainer, which it trains). Owns
    the model, optimizer, checkpoint and the compiled train/eval steps."""

    def __init__(self, strategy, model, optimizer, output_dir, train_batch_size,
                 gradient_accumulation_steps=1, jit_compile=False, keep_checkpoints=5):
        self.strategy = strategy
        self.model = model
        # What the loss reaches (BertPretrainer.trained_variables: without a next-sentence
        # head, not the pooler), and what the optimizer updates.
        self.variables = getattr(model, "trained_variables", model.trainable_variables)
        self.optimizer = optimizer
        self.output_dir = output_dir
        self.train_batch_size = train_batch_size
        self.accumulation = gradient_accumulation_steps
        self.loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        replicas = strategy.num_replicas_in_sync
        if train_batch_size % (replicas * gradient_accumulation_steps):
            raise ValueError(
                f"--train_batch_size {train_batch_size} must be divisible by "
                f"replicas ({replicas}) x --gradient_accumulation_steps "
                f"({gradient_accumulation_steps})")
        # TPUs need tf.distribute's own input path; elsewhere a plain tf.data iterator per
        # worker is used because it can be checkpointed (distributed iterators cannot).
        self._distributed_input = isinstance(strategy, tf.distribute.TPUStrategy)
        self.local_replicas = len(worker_devices(strategy))
        self.num_workers = max(1, replicas // self.local_replicas)
        # AutoGraph converts only the loop over steps (_train_steps_fn's tf.range); the
        # model's code and the step's are graph code already, and converting them took
        # seconds of every run's start.
        self._grads_fn = tf.function(self._micro_batch_grads, jit_compile=jit_compile,
                                     autograph=False)
        self._train_steps = tf.function(self._train_steps_fn)
        self._eval_step = tf.function(self._eval_step_fn, autograph=False)
        self._weights_finite = tf.function(lambda: tf.reduce_all(
            [tf.reduce_all(tf.math.is_finite(v)) for v in self.variables]),
            autograph=False)
        self.keep_checkpoints = keep_checkpoints
        # The metrics a step reports: no next_sentence_* without a next-sentence head.
        has_head = getattr(model, "nsp_head", True) is not None
        self.metric_keys = tuple(k for k in METRIC_KEYS
                                 if has_head or k not in NEXT_SENTENCE_KEYS)

    # -- one replica ---------------------------------------------------------------------

    def _micro_batch_grads(self, batch, mlm_denominator, num_examples):
        variables = self.variables
        with tf.GradientTape() as tape:
            outputs = self.model({k: batch[k] for k in MODEL_INPUTS}, training=True)
            sums = local_sums(outputs, batch)
            # This replica's share of the global loss: the replicas' shares add up to it.
            loss = sums["mlm_loss_sum"] / (mlm_denominator + 1e-5)
            if "nsp_loss_sum" in sums:
                loss += sums["nsp_loss_sum"] / num_examples
            if self.loss_scaling:
                loss = self.optimizer.scale_loss(loss)
        # Dense gradients (the embedding tables' come as IndexedSlices) so micro-batches
        # and replicas can be summed element-wise.
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]
        return grads, sums

    def _replica_step(self, batch):
        ctx = tf.distribute.get_replica_context()
        if not self._distributed_input and self.local_replicas > 1:
            # The worker's batch reaches every local replica whole; each takes its slice,
            # so replica r of a step sees the r-th consecutive part of the stream.
            index = ctx.replica_id_in_sync_group % self.local_replicas
            size = tf.shape(batch["token_ids"])[0] // self.local_replicas
            batch = {k: v[index * size:(index + 1) * size] for k, v in batch.items()}
        mlm_denominator = ctx.all_reduce(
            "sum", tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32)))
        num_examples = ctx.all_reduce(
            "sum", tf.cast(tf.shape(batch["token_ids"])[0], tf.float32))
        micro_batches = [dict(zip(batch, parts)) for parts in zip(
            *[tf.split(v, self.accumulation) for v in batch.values()])]
        grads, sums = None, None
        for micro in micro_batches:
            g, s = self._grads_fn(micro, mlm_denominator, num_examples)
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
            sums = s if sums is None else {k: sums[k] + s[k] for k in sums}
        grads = ctx.all_reduce("sum", grads)
        sums = ctx.all_reduce("sum", sums)
        scale = self.optimizer.dynamic_scale if self.loss_scaling else 1.0
        norm = tf.linalg.global_norm(grads) / scale
        # Clipping the (possibly loss-scaled) sum at CLIP_NORM * scale equals clipping the
        # true gradient at CLIP_NORM.
        grads, _ = tf.clip_by_global_norm(grads, CLIP_NORM * scale, use_norm=norm * scale)
        # The Keras optimizer sums gradients across replicas once more; they are already
        # summed, so hand each replica 1/N of the total (exact for power-of-two N).
        replicas = float(ctx.num_replicas_in_sync)
        if replicas > 1:
            grads = [g / replicas for g in grads]
        lr = self.learning_rate()
        self.optimizer.apply(grads, self.variables)
        metrics = metrics_from_sums(sums)
        metrics["learning_rate"] = lr
        metrics["grad_norm"] = norm
        return tf.stack([tf.cast(metrics[k], tf.float32) for k in self.metric_keys])

    def learning_rate(self):
        opt = self.optimizer.inner_optimizer if self.loss_scaling else self.optimizer
        lr = opt.learning_rate
        return tf.cast(lr, tf.float32)

    # -- loops ---------------------------------------------------------------------------

    def _train_steps_fn(self, iterator, num_steps):
        history = tf.TensorArray(tf.float32, size=num_steps)
        for i in tf.range(num_steps):
            per_replica = self.strategy.run(
                tf.autograph.experimental.do_not_convert(self._replica_step),
                args=(next(iterator),))
            # Every replica holds the same all-reduced metrics.
            history = history.write(i, self.strategy.experimental_local_results(
                per_replica)[0])
        return history.stack()  # [num_steps, len(self.metric_keys)]

    def _eval_step_fn(self, batch):
        def replica(batch):
            outputs = self.model({k: batch[k] for k in MODEL_INPUTS}, training=False)
            return tf.distribute.get_replica_context().all_reduce(
                "sum", local_sums(outputs, batch))
        return self.strategy.experimental_local_results(
            self.strategy.run(replica, args=(batch,)))[0]

    def _checkpoint(self):
        """What a checkpoint holds. The dropout layers' SeedGenerator states are Keras
        variables that tf.train.Checkpoint does not reach through the model (they are not
        weights), so they are added by hand: without them a resumed run draws new dropout
        masks and its losses drift from the uninterrupted run's."""
        seeds = [v for v in self.model.variables if "seed_generator_state" in v.path]
        return tf.train.Checkpoint(model=self.model, optimizer=self.optimizer,
                                   dropout_seeds=seeds)

    @property
    def step(self):
        opt = self.optimizer.inner_optimizer if self.loss_scaling else self.optimizer
        return int(opt.iterations.numpy())

    def input_context(self):
        """This worker's tf.distribute.InputContext (which file shard it reads)."""
        _, task_id = self._task()
        return tf.distribute.InputContext(
            num_input_pipelines=self.num_workers, input_pipeline_id=task_id,
            num_replicas_in_sync=self.strategy.num_replicas_in_sync)

    def worker_batch_size(self):
        return self.train_batch_size // self.num_workers

    def train(self, dataset_fn, num_train_steps, save_checkpoints_steps, steps_per_loop=1,
              progress=True, first_step=0):
        """Trains to `num_train_steps`, resuming from the latest checkpoint in output_dir.

        `dataset_fn(input_context, batch_size, skip_batches)` builds this worker's dataset
        of `batch_size` examples per batch. `first_step`: the step the run started at
        (its optimizer's step before the first batch). Returns the per-step metric dicts
        of this run.
        """
        tf.io.gfile.makedirs(self.output_dir)
        if is_chief(self.strategy):
            remove_unfinished_saves(self.output_dir)
        checkpoint = self._checkpoint()
        manager = tf.train.CheckpointManager(
            checkpoint, self._checkpoint_dir(), max_to_keep=self.keep_checkpoints,
            checkpoint_name="ckpt")
        latest = manager.latest_checkpoint
        if self._distributed_input:
            # The input position is not checkpointable here: skip the consumed batches.
            if latest:
                _restore(checkpoint, latest).assert_existing_objects_matched()
            dataset = self.strategy.distribute_datasets_from_function(
                lambda ctx: dataset_fn(ctx, ctx.get_per_replica_batch_size(
                    self.train_batch_size), self.step - first_step))
            iterator = iter(dataset)
        else:
            dataset = dataset_fn(self.input_context(), self.worker_batch_size(), 0)
            iterator = iter(dataset)
            checkpoint.iterator = iterator
            if latest:
                _restore(checkpoint, latest).assert_existing_objects_matched()
        if latest:
            print(f"resumed from {latest} at step {self.step}", flush=True)
        start = self.step
        log = MetricLog(os.path.join(self.output_dir, "train_log.jsonl"), start,
                        enabled=is_chief(self.strategy))
        writer = tf.summary.create_file_writer(os.path.join(self.output_dir, "train")) \
            if is_chief(self.strategy) else tf.summary.create_noop_writer()
        bar = _progress(num_train_steps, start, progress and is_chief(self.strategy))
        history = []
        step = start
        if _is_multi_worker(self.strategy):
            # A SIGTERM reaches one worker; all must save at the same step or the
            # collective save hangs. TF's handler agrees on the loop to save after, saves
            # there with `manager` on every worker, then calls `preempted` on each.
            def preempted():
                bar.close()
                # Every worker names the chief's copy (the one that is kept).
                raise Interrupted(
                    f"SIGTERM at step {step}: saved "
                    f"{os.path.join(self.output_dir, f'ckpt-{step}')}; run the same "
                    f"command again to resume from it")

            with _preemption_handler(self.strategy, manager, preempted) as handler:
                while step < num_train_steps:
                    step = self._train_loop(iterator, step, num_train_steps,
                                            save_checkpoints_steps, steps_per_loop,
                                            manager, log, writer, bar, history)
                    # Not after the last loop: the run is complete (and saved), and a
                    # worker that only now announced a stop could race the others'
                    # shutdown of the handler.
                    if step < num_train_steps:
                        handler.save_checkpoint_if_preempted(checkpoint_number=step)
            bar.close()
            writer.flush()
            self._cleanup_worker_dir()
            return history
        with stop_requests() as stop:
            while step < num_train_steps and not stop:
                step = self._train_loop(iterator, step, num_train_steps,
                                        save_checkpoints_steps, steps_per_loop, manager,
                                        log, writer, bar, history)
            if stop and step < num_train_steps:
                if step % save_checkpoints_steps:  # else just saved
                    self._save(manager, step)
                bar.close()
                raise Interrupted(
                    f"{stop[0]} at step {step}: saved {manager.latest_checkpoint}; run the "
                    f"same command again to resume from it")
        bar.close()
        writer.flush()
        self._cleanup_worker_dir()
        return history

    def _save(self, manager, step):
        # The step's loss and gradient were finite, but its update may not be: a
        # checkpoint is written only with finite weights, so a rerun never resumes from a
        # diverged model.
        if not bool(self._weights_finite()):
            raise NonFiniteLossError(
                f"step {step}: the weights are no longer finite after its update (is "
                f"--learning_rate too high?); not saved; last good checkpoint: "
                f"{manager.latest_checkpoint or 'none'}")
        try:
            manager.save(checkpoint_number=step)
        except Exception as e:
            # A full disk: TensorFlow's error names its temporary file. What the save
            # wrote (ckpt-N_temp/, a part of ckpt-N's files) goes; the state file still
            # names the checkpoint before, which a rerun resumes from.
            prefix = os.path.join(manager.directory, f"ckpt-{step}")
            failure = system_error(e, prefix)
            if failure is None:
                raise
            gfile = tf.io.gfile
            for path in gfile.glob(prefix + "_temp") + gfile.glob(prefix + ".*"):
                with contextlib.suppress(tf.errors.OpError):
                    (gfile.rmtree if gfile.isdir(path) else gfile.remove)(path)
            raise failure from None

    def _train_loop(self, iterator, step, num_train_steps, save_checkpoints_steps,
                    steps_per_loop, manager, log, writer, bar, history):
        """One call of the compiled loop (up to steps_per_loop steps), its metrics logged,
        and the checkpoint when a save step is reached. Returns the new step."""
        # Loops end on checkpoint boundaries so saved steps are the same for any
        # --steps_per_loop.
        next_save = (step // save_checkpoints_steps + 1) * save_checkpoints_steps
        n = min(steps_per_loop, num_train_steps - step, next_save - step)
        t0 = time.perf_counter()
        values = self._train_steps(iterator, tf.constant(n, tf.int32)).numpy()
        elapsed = time.perf_counter() - t0
        for row in values:
            step += 1
            m = {k: float(v) for k, v in zip(self.metric_keys, row)}
            if not all(map(_finite, (m["loss"], m["grad_norm"]))):
                raise NonFiniteLossError(
                    f"step {step}: non-finite loss ({m['loss']}) or gradient norm "
                    f"({m['grad_norm']}); training stopped, last good checkpoint: "
                    f"{manager.latest_checkpoint or 'none'}")
            m["step"] = step
            history.append(m)
            log.write(m)
        m["examples_per_second"] = n * self.train_batch_size / elapsed
        with writer.as_default(step=step):
            for k, v in m.items():
                if k != "step":
                    tf.summary.scalar(k, v)
        bar.update(n)
        bar.set_postfix(loss=f"{m['loss']:.3f}", mlm_acc=f"{m['masked_lm_accuracy']:.3f}",
                        ex_s=f"{m['examples_per_second']:.0f}")
        if step % save_checkpoints_steps == 0 or step == num_train_steps:
            self._save(manager, step)
        return step

    def evaluate(self, dataset, max_eval_steps=None):
        """google's four eval metrics over `dataset` (a tf.data.Dataset of global
        batches), at most `max_eval_steps` batches."""
        sums = None
        for i, batch in enumerate(self.strategy.experimental_distribute_dataset(dataset)):
            if max_eval_steps and i >= max_eval_steps:
                break
            s = self._eval_step(batch)
            sums = s if sums is None else {k: sums[k] + s[k] for k in sums}
        if sums is None:
            raise ValueError("eval input is empty: no batch was read")
        metrics = {k: float(v) for k, v in metrics_from_sums(sums).items()}
        metrics["global_step"] = self.step
        return metrics

    def restore_latest(self):
        """Restores model weights (and optimizer) from the latest checkpoint, if any;
        returns its path or None."""
        latest = latest_prefix(self.output_dir)
        if latest:
            check_bundle(latest, "checkpoint")
            _restore(self._checkpoint(), latest).expect_partial()
        return latest

    # -- multi-worker checkpoint placement ----------------------------------------------

    def _task(self):
        resolver = getattr(self.strategy, "cluster_resolver", None)
        if resolver is None or not resolver.task_type:
            return None, 0
        return resolver.task_type, resolver.task_id

    def _checkpoint_dir(self):
        # Every worker takes part in saving (it is collective), but only the chief's copy
        # is kept; the others write to a scratch directory removed at the end.
        if is_chief(self.strategy):
            return self.output_dir
        _, task_id = self._task()
        return os.path.join(self.output_dir, f".worker_{task_id}")

    def _cleanup_worker_dir(self):
        if not is_chief(self.strategy):
            tf.io.gfile.rmtree(self._checkpoint_dir())


def remove_unfinished_saves(output_dir):
    """Removes what a save killed midway left in `output_dir`: TensorFlow writes a
    checkpoint's data as `ckpt-N_temp/` and merges it into ckpt-N's files at the end, so
    a kill -9 in between leaves that folder, never read, for good. Called by the chief
    at the start, while it holds the folder's lock (nothing else saves there)."""
    for path in tf.io.gfile.glob(os.path.join(output_dir, "ckpt-*_temp")):
        print(f"removing {path} (an unfinished checkpoint save)", flush=True)
        tf.io.gfile.rmtree(path)


def _finite(x):
    return x == x and abs(x) != float("inf")


def _progress(total, initial, enabled):
    from bert_tf.base.progress import progress_bar
    return progress_bar(total, "pretraining", unit="step", initial=initial,
                        disable=not enabled)
