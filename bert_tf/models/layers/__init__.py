from bert_tf.models.layers.embeddings import BertEmbeddings
from bert_tf.models.layers.scalar_mix import ScalarMix
from bert_tf.models.layers.transformer import (MASK_LOGIT, TransformerBlock, activation_fn,
                                               check_attention_implementation)

__all__ = ["BertEmbeddings", "ScalarMix", "TransformerBlock", "MASK_LOGIT", "activation_fn",
           "check_attention_implementation"]
