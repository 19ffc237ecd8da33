"""BERT's input embeddings: word + learned position + token type, LayerNorm, dropout."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEmbeddings(keras.layers.Layer):
    """Sums the three embeddings, then LayerNorm and dropout (google's
    `embedding_postprocessor`). The word table is public (`word_embeddings`) because the
    masked-LM head reuses it as its output projection (tied weights)."""

    def __init__(self, vocab_size, hidden_size, max_position_embeddings=512,
                 type_vocab_size=2, initializer_range=0.02, layer_norm_eps=1e-12,
                 dropout=0.1, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.dropout_rate = dropout
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_eps, dtype=self.dtype_policy, name="layer_norm")
        self.dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy, name="dropout")

    def build(self, input_shape):
        init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        # autocast=False: under a mixed policy the tables are read in their own float32,
        # the three embeddings summed in float32 and the sum cast once, so each lookup's
        # gradient accumulates in float32 (a bfloat16 scatter-add of every token's
        # gradient into a few rows, [CLS]'s or [PAD]'s, loses precision). The masked-LM
        # head casts the word table itself.
        def table(name, rows):
            return self.add_weight(name=name, shape=(rows, self.hidden_size),
                                   initializer=init, autocast=False)
        self.word_embeddings = table("word_embeddings", self.vocab_size)
        self.position_embeddings = table("position_embeddings", self.max_position_embeddings)
        self.token_type_embeddings = table("token_type_embeddings", self.type_vocab_size)
        self.layer_norm.build((None, None, self.hidden_size))
        self.built = True

    def call(self, token_ids, segment_ids, training=False):
        # token_ids, segment_ids: [batch, seq]
        seq_length = ops.shape(token_ids)[1]
        words = ops.take(self.word_embeddings, token_ids, axis=0)  # [batch, seq, hidden]
        # Token types through a one-hot matmul, as google's model does ("always faster for
        # a small vocabulary"): the same values as a lookup, and its gradient is a
        # [types, tokens] x [tokens, hidden] product, where a lookup's is a scatter-add in
        # which every token writes to one of two rows: on a GPU, atomic adds on the same
        # addresses, the likeliest cause of bench/gpu/README.md's slow steps.
        table = self.token_type_embeddings
        types = ops.matmul(ops.one_hot(segment_ids, self.type_vocab_size, dtype=table.dtype),
                           table)
        positions = self.position_embeddings[:seq_length]  # [seq, hidden], broadcast on batch
        x = words + types + positions[None]
        x = self.layer_norm(ops.cast(x, self.compute_dtype))
        return self.dropout(x, training=training)

    def compute_output_shape(self, token_ids_shape, segment_ids_shape=None):
        # Said, not traced: JAX's symbolic shapes cannot compare seq with
        # max_position_embeddings when Keras traces call() to build a functional model.
        return tuple(token_ids_shape) + (self.hidden_size,)

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                      max_position_embeddings=self.max_position_embeddings,
                      type_vocab_size=self.type_vocab_size,
                      initializer_range=self.initializer_range,
                      layer_norm_eps=self.layer_norm_eps, dropout=self.dropout_rate)
        return config
