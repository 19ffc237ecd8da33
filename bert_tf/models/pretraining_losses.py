"""Pretraining loss and metrics, as google's run_pretraining.py defines them.

    masked_lm_loss = sum(weight * CE) / (sum(weight) + 1e-5)
    next_sentence_loss = mean(CE)
    loss = masked_lm_loss + next_sentence_loss

A model without a next-sentence head (outputs without "nsp_logits") is trained on the
masked-LM loss alone, and its metrics have no next_sentence_* entries.

Everything is first computed as *sums* over the local batch, so that replicas (and
gradient-accumulation micro-batches) can be combined exactly: the ratios are taken over
the global batch, never averaged from per-replica ratios.

Written in `keras.ops`, so the tf.distribute loop (trainer.py) and the Keras `fit` step
of the other backends (BertPretrainer.compute_loss, fit.py) share one definition.
"""

from keras import ops

MLM_EPSILON = 1e-5  # google's denominator guard


def _cross_entropy_and_hits(labels, logits):
    labels = ops.cast(labels, "int32")
    ce = ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    hits = ops.cast(ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), labels),
                    "float32")
    return ce, hits


def local_sums(outputs, batch):
    """Sums over this batch: masked-LM CE numerator, weight, correct count; NSP CE sum,
    correct count and example count. outputs: mlm_logits [b, P, V], nsp_logits [b, 2];
    batch: masked_lm_ids, masked_lm_weights [b, P], next_sentence_labels [b]."""
    weights = ops.cast(batch["masked_lm_weights"], "float32")  # [b, P]
    mlm_ce, mlm_hit = _cross_entropy_and_hits(batch["masked_lm_ids"], outputs["mlm_logits"])
    sums = {
        "mlm_loss_sum": ops.sum(weights * mlm_ce),
        "mlm_weight": ops.sum(weights),
        "mlm_correct": ops.sum(weights * mlm_hit),
        "examples": ops.cast(ops.shape(mlm_ce)[0], "float32"),
    }
    if "nsp_logits" in outputs:
        nsp_ce, nsp_hit = _cross_entropy_and_hits(batch["next_sentence_labels"],
                                                  outputs["nsp_logits"])
        sums["nsp_loss_sum"] = ops.sum(nsp_ce)
        sums["nsp_correct"] = ops.sum(nsp_hit)
    return sums


def metrics_from_sums(sums):
    """Global sums -> google's four metrics plus the total loss (the masked-LM two and
    the loss when the sums have no next-sentence entries)."""
    mlm_loss = sums["mlm_loss_sum"] / (sums["mlm_weight"] + MLM_EPSILON)
    metrics = {
        "loss": mlm_loss,
        "masked_lm_loss": mlm_loss,
        "masked_lm_accuracy": sums["mlm_correct"] / ops.maximum(sums["mlm_weight"], 1e-9),
    }
    if "nsp_loss_sum" in sums:
        nsp_loss = sums["nsp_loss_sum"] / ops.maximum(sums["examples"], 1.0)
        metrics["loss"] = mlm_loss + nsp_loss
        metrics["next_sentence_loss"] = nsp_loss
        metrics["next_sentence_accuracy"] = sums["nsp_correct"] / ops.maximum(
            sums["examples"], 1.0)
    return metrics
