"""What every fine-tuning task shares: flags, the encoder from any checkpoint, the
optimizer, and a Keras `fit` loop with TensorBoard, best/last checkpoints and a strategy.

A task module (glue.py, squad.py, ner.py, swag.py) supplies its reader, its Keras model
(encoder + head), its loss/metrics and its post-processing; the rest is here.
"""

import argparse
import math
import os

from bert_tf.run_pretraining import DTYPES, str2bool


def add_common_flags(parser):
    """google-research/bert's fine-tuning flags (run_classifier.py / run_squad.py names)."""
    boolean = dict(type=str2bool, nargs="?", const=True, default=False)
    f = parser.add_argument
    f("--init_checkpoint", default=None,
      help="pretrained weights: google TF1 (bert_model.ckpt), HF directory, or .keras; "
           "omitted = random initialisation (for comparisons)")
    f("--bert_config_file", default=None,
      help="config JSON; default: the one beside --init_checkpoint")
    f("--vocab_file", default=None, help="vocab.txt; default: the one beside --init_checkpoint")
    f("--do_lower_case", type=str2bool, nargs="?", const=True, default=True)
    f("--output_dir", required=True, help="checkpoints, logs, predictions, eval results")
    f("--max_seq_length", type=int, default=128)
    f("--do_train", **boolean)
    f("--do_eval", **boolean)
    f("--do_predict", **boolean)
    f("--train_batch_size", type=int, default=32)
    f("--eval_batch_size", type=int, default=8)
    f("--predict_batch_size", type=int, default=8)
    f("--learning_rate", type=float, default=5e-5)
    f("--num_train_epochs", type=float, default=3.0)
    f("--warmup_proportion", type=float, default=0.1)
    f("--weight_decay", type=float, default=0.01)
    f("--mixed_precision", default="float32", choices=tuple(DTYPES))
    f("--strategy", default="auto",
      choices=("auto", "one_device", "mirrored", "multi_worker", "tpu"))
    f("--cpu_devices", type=int, default=0,
      help="split the CPU into N logical devices (mirrored strategy without accelerators)")
    f("--tpu", default=None)
    f("--seed", type=int, default=12345)
    f("--length_batching", default="sort", choices=("sort", "bucket", "longest", "off"),
      help="sort: training examples sorted by length within windows of 50 batches, "
           "every batch cut to its longest sequence (a multiple of 8), batches shuffled "
           "(HF's group_by_length); bucket: tf.data length buckets instead; longest: "
           "batches keep their order, each cut to its longest; off: every batch padded "
           "to --max_seq_length (google's). Evaluation and prediction keep their order "
           "(sort and bucket act as longest there). See bert_tf/batching.py")
    return parser


def length_batching(args, training):
    """The bert_tf.batching mode of a pipeline: evaluation and prediction keep their
    example order, so sort and bucket become longest there."""
    mode = getattr(args, "length_batching", "off")
    return "longest" if mode in ("sort", "bucket") and not training else mode


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


def resolve_paths(args):
    """Fills --vocab_file / --bert_config_file from the checkpoint's directory; one clear
    error when neither is found."""
    from bert_tf.checkpoints import vocab_beside
    base = None
    if args.init_checkpoint:
        base = args.init_checkpoint if os.path.isdir(args.init_checkpoint) else \
            os.path.dirname(args.init_checkpoint)
    args.vocab_file = vocab_beside(args.init_checkpoint, args.vocab_file)
    if args.bert_config_file is None and base:
        for name in ("bert_config.json", "config.json"):
            if os.path.exists(os.path.join(base, name)):
                args.bert_config_file = os.path.join(base, name)
                break
    if args.bert_config_file is None and not args.init_checkpoint:
        raise ValueError("--bert_config_file is required without --init_checkpoint")
    return args


def build_encoder(args):
    """The encoder from --init_checkpoint (any format the converters read), or randomly
    initialised from --bert_config_file. Call under the strategy's scope."""
    import keras

    from bert_tf.checkpoints import load_encoder
    from bert_tf.config import BertConfig
    from bert_tf.encoder import BertEncoder
    keras.utils.set_random_seed(args.seed)
    dtype = DTYPES[args.mixed_precision]
    if args.init_checkpoint:
        return load_encoder(args.init_checkpoint, bert_config_file=args.bert_config_file,
                            dtype=dtype)
    return BertEncoder.from_config_object(BertConfig.from_json_file(args.bert_config_file),
                                          dtype=dtype)


def task_encoder(args):
    """The encoder of a run: from the pretrained checkpoint with --do_train, else shaped
    like the fine-tuned run in --output_dir (its task model's weights are loaded after).
    Checks --max_seq_length against its positions. Call under the strategy's scope."""
    from tasks import task_dir
    if args.do_train:
        encoder = build_encoder(args)
    else:
        encoder = task_dir.encoder_from_task_dir(args.output_dir, DTYPES[args.mixed_precision])
    positions = encoder.bert_config.max_position_embeddings
    if args.max_seq_length > positions:
        raise ValueError(f"--max_seq_length {args.max_seq_length} exceeds the model's "
                         f"max_position_embeddings {positions}")
    return encoder


def create_strategy(args):
    from bert_tf.pretraining.distribution import create_strategy as create
    return create(args.strategy, tpu=args.tpu, cpu_devices=args.cpu_devices)


def create_optimizer(args, num_train_examples, variables):
    """AdamW, warmup over --warmup_proportion of the steps then linear decay, BERT's
    weight-decay exclusions, gradients clipped to global norm 1.0 (google's value).
    Returns (optimizer, num_train_steps)."""
    from bert_tf.pretraining.optimization import create_optimizer as create
    steps_per_epoch = max(1, num_train_examples // args.train_batch_size)
    num_train_steps = max(1, int(math.ceil(steps_per_epoch * args.num_train_epochs)))
    warmup = int(num_train_steps * args.warmup_proportion)
    optimizer = create("adamw", args.learning_rate, num_train_steps, warmup, variables,
                       weight_decay=args.weight_decay)
    optimizer.global_clipnorm = 1.0
    return optimizer, num_train_steps


def fit(model, train_ds, eval_ds, args, num_train_steps, monitor, mode="max",
        eval_steps=None):
    """Keras fit with TensorBoard, progress (a bar on a terminal, else a line every 5% of
    the steps), and two checkpoints in output_dir:
    `last.weights.h5` after every epoch and `best.weights.h5` for the best `monitor`
    (a validation metric name such as "val_accuracy"; mode "max" or "min").
    Returns the Keras History."""
    import keras
    steps_per_epoch = max(1, num_train_steps // max(1, int(math.ceil(args.num_train_epochs))))
    epochs = max(1, int(math.ceil(num_train_steps / steps_per_epoch)))
    callbacks = [
        # write_graph=False: serializing the train step's graph (the whole encoder and its
        # gradients) costs seconds to tens of seconds at the first step; scalars suffice.
        keras.callbacks.TensorBoard(os.path.join(args.output_dir, "logs"),
                                    write_graph=False),
        keras.callbacks.ModelCheckpoint(os.path.join(args.output_dir, "last.weights.h5"),
                                        save_weights_only=True),
    ]
    if eval_ds is not None and monitor:
        callbacks.append(keras.callbacks.ModelCheckpoint(
            os.path.join(args.output_dir, "best.weights.h5"), monitor=monitor, mode=mode,
            save_best_only=True, save_weights_only=True))
    from bert_tf.progress import interactive
    if not interactive():
        # Keras prints nothing to a file until an epoch ends: a line every few steps.
        callbacks.append(step_lines(steps_per_epoch * epochs, args.train_batch_size))
    return model.fit(train_ds.repeat(), validation_data=eval_ds, epochs=epochs,
                     steps_per_epoch=steps_per_epoch, validation_steps=eval_steps,
                     callbacks=callbacks, verbose=1 if interactive() else 2)


def step_lines(total_steps, batch_size):
    """A Keras callback printing one progress line every 5% of the training steps (steps
    done, loss, examples/s, ETA), for output that is not a terminal."""
    import keras

    from bert_tf.progress import LineProgress

    class StepLines(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.progress = LineProgress(total_steps, "training", unit="step")

        def on_train_batch_end(self, batch, logs=None):
            if self.progress.due():
                # Reading the loss waits for the step: only when a line is printed.
                rate = self.progress.rate(1) * batch_size
                self.progress.set_postfix(loss=f"{float(logs['loss']):.4f}",
                                          examples_per_s=f"{rate:.1f}")
            self.progress.update(1)

        def on_train_end(self, logs=None):
            self.progress.close()

    return StepLines()


def write_results(path, metrics):
    """`key = value` lines, sorted (google's eval_results.txt), temp name then rename."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for key in sorted(metrics):
            f.write(f"{key} = {metrics[key]}\n")
    os.replace(tmp, path)


def parser(description):
    return argparse.ArgumentParser(description=description,
                                   formatter_class=argparse.ArgumentDefaultsHelpFormatter)
