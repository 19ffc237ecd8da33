"""Optimizer and learning-rate schedule of BERT pretraining and fine-tuning.

AdamW (decoupled weight decay 0.01, betas 0.9/0.999, epsilon 1e-6) with decay skipped for
LayerNorm and bias variables, as google's AdamWeightDecayOptimizer; LAMB for large
batches. Gradient clipping to global norm 1.0 is done by the training loop *after* the
cross-replica sum, so every strategy clips the same global gradient (Keras' own
`global_clipnorm` would clip each replica's partial gradient).
"""

import re

import keras
from keras import ops

# google excludes ["LayerNorm", "layer_norm", "bias"] by name; our variable paths spell
# LayerNorm "layer_norm" and biases "bias" / "output_bias".
NO_DECAY_PATTERN = re.compile(r"layer_norm|LayerNorm|bias")
CLIP_NORM = 1.0  # google's clip_by_global_norm(grads, clip_norm=1.0)


@keras.saving.register_keras_serializable(package="bert_tf")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak` over `warmup_steps`, then linear decay to 0 at
    `total_steps`.

    The decay runs from the end of warmup: google's original decays from step 0 and
    switches to it after warmup, so its rate drops abruptly at the end of warmup (to
    peak * (1 - warmup/total)). Here the rate is continuous and peaks at `warmup_steps`.
    """

    def __init__(self, peak, total_steps, warmup_steps):
        if total_steps <= 0:
            raise ValueError(f"num_train_steps must be positive, got {total_steps}")
        if not 0 <= warmup_steps <= total_steps:
            raise ValueError(f"num_warmup_steps must be in [0, num_train_steps], "
                             f"got {warmup_steps} with {total_steps} steps")
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warmup = float(max(self.warmup_steps, 1))
        decay = float(max(self.total_steps - self.warmup_steps, 1))
        warm = self.peak * step / warmup
        cool = self.peak * ops.maximum(0.0, float(self.total_steps) - step) / decay
        return ops.where(step < self.warmup_steps, warm, cool)

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps}


@keras.saving.register_keras_serializable(package="bert_tf")
class AdamW(keras.optimizers.AdamW):
    """keras.optimizers.AdamW, with its Adam step done by TensorFlow's fused kernel.

    Keras writes the step as about ten element-wise ops, each reading and writing a
    whole variable. That costs little for most variables, but the word-embedding table
    (vocab x hidden, 11.7M values in MiniLM, 23M in BERT-base) is updated densely, as
    google's and HF's AdamW update it (every row's moments decay every step, seen or
    not): on short fine-tuning batches its update was about a third of the step (see
    docs/benchmarks.md, "Fine-tuning (real short text)"). `ResourceApplyAdam` does the
    same arithmetic (m += (g - m)(1 - beta_1); v += (g^2 - v)(1 - beta_2);
    var -= lr sqrt(1 - beta_2^t) / (1 - beta_1^t) m / (sqrt(v) + epsilon)) in one
    multi-threaded pass over the variable and its two moments. The decoupled weight decay
    stays Keras' own. Other backends, amsgrad and non-float variables run Keras' code.

    The embedding's gradient (IndexedSlices) is summed into a dense gradient first, so a
    word that occurs twice in a batch adds (g1 + g2)^2 to v, as in torch's and google's
    AdamW; Keras' own step squares IndexedSlices slice by slice (g1^2 + g2^2), and so
    does its global-norm clipping. Summed, the gradient is what JAX and torch compute.
    """

    def apply(self, grads, trainable_variables=None):
        # Summed before anything else reads them: Keras' global-norm clipping would also
        # count a repeated row's slices apart (g1^2 + g2^2 in the norm).
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                     for g in grads]
        return super().apply(grads, trainable_variables)

    def update_step(self, gradient, variable, learning_rate):
        if keras.backend.backend() != "tensorflow" or self.amsgrad or \
                variable.dtype not in ("float32", "float64"):
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf
        dtype = variable.dtype
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        # The embedding's gradient arrives as IndexedSlices: the kernel takes it dense.
        gradient = tf.convert_to_tensor(tf.cast(gradient, dtype))
        return tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=m.handle, v=v.handle, beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step), lr=tf.cast(learning_rate, dtype),
            beta1=beta_1, beta2=beta_2, epsilon=tf.cast(self.epsilon, dtype), grad=gradient)


def decayed_variables(variables):
    """The variables that get weight decay (all but LayerNorm and bias)."""
    return [v for v in variables if not NO_DECAY_PATTERN.search(v.path)]


def create_optimizer(name, learning_rate, num_train_steps, num_warmup_steps, variables,
                     weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                     global_clipnorm=None):
    """AdamW or LAMB with the warmup/decay schedule and BERT's weight-decay exclusions.

    `variables`: the trainable variables, to mark LayerNorm and bias ones as excluded
    (before the optimizer is built, as Keras requires). `global_clipnorm`: clipping done
    by the optimizer (Keras' fit; the tf.distribute loop clips the all-reduced gradient
    itself and leaves this None).
    """
    schedule = WarmupLinearDecay(learning_rate, num_train_steps, num_warmup_steps)
    common = dict(weight_decay=weight_decay, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                  global_clipnorm=global_clipnorm)
    if name == "adamw":
        optimizer = AdamW(schedule, **common)
    elif name == "lamb":
        # Keras' LAMB applies decoupled weight decay (scaled by the rate) next to the
        # trust-ratio update.
        optimizer = keras.optimizers.Lamb(schedule, **common)
    else:
        raise ValueError(f"--optimizer must be adamw or lamb, got {name!r}")
    excluded = [v for v in variables if NO_DECAY_PATTERN.search(v.path)]
    optimizer.exclude_from_weight_decay(var_list=excluded)
    return optimizer
