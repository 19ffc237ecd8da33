"""Pretraining loss and metrics, as google's run_pretraining.py defines them.

    masked_lm_loss = sum(weight * CE) / (sum(weight) + 1e-5)
    next_sentence_loss = mean(CE)
    loss = masked_lm_loss + next_sentence_loss

Everything is first computed as *sums* over the local batch, so that replicas (and
gradient-accumulation micro-batches) can be combined exactly: the ratios are taken over
the global batch, never averaged from per-replica ratios.
"""

import tensorflow as tf

MLM_EPSILON = 1e-5  # google's denominator guard


def local_sums(outputs, batch):
    """Sums over this batch: masked-LM CE numerator, weight, correct count; NSP CE sum,
    correct count and example count. outputs: mlm_logits [b, P, V], nsp_logits [b, 2]."""
    weights = tf.cast(batch["masked_lm_weights"], tf.float32)  # [b, P]
    labels = batch["masked_lm_ids"]
    mlm_ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, outputs["mlm_logits"])
    mlm_hit = tf.cast(tf.equal(tf.argmax(outputs["mlm_logits"], -1, output_type=tf.int32),
                               labels), tf.float32)
    nsp_labels = batch["next_sentence_labels"]
    nsp_ce = tf.nn.sparse_softmax_cross_entropy_with_logits(nsp_labels, outputs["nsp_logits"])
    nsp_hit = tf.cast(tf.equal(tf.argmax(outputs["nsp_logits"], -1, output_type=tf.int32),
                               nsp_labels), tf.float32)
    return {
        "mlm_loss_sum": tf.reduce_sum(weights * mlm_ce),
        "mlm_weight": tf.reduce_sum(weights),
        "mlm_correct": tf.reduce_sum(weights * mlm_hit),
        "nsp_loss_sum": tf.reduce_sum(nsp_ce),
        "nsp_correct": tf.reduce_sum(nsp_hit),
        "examples": tf.cast(tf.shape(nsp_labels)[0], tf.float32),
    }


def metrics_from_sums(sums):
    """Global sums -> google's four metrics plus the total loss."""
    mlm_loss = sums["mlm_loss_sum"] / (sums["mlm_weight"] + MLM_EPSILON)
    nsp_loss = sums["nsp_loss_sum"] / tf.maximum(sums["examples"], 1.0)
    return {
        "loss": mlm_loss + nsp_loss,
        "masked_lm_loss": mlm_loss,
        "masked_lm_accuracy": sums["mlm_correct"] / tf.maximum(sums["mlm_weight"], 1e-9),
        "next_sentence_loss": nsp_loss,
        "next_sentence_accuracy": sums["nsp_correct"] / tf.maximum(sums["examples"], 1.0),
    }
