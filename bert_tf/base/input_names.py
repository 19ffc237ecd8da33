"""The names of the three model inputs, the same in tf.data, Keras models and signatures.

    token_ids     int32 [batch, seq]  WordPiece ids, [CLS] A [SEP] B [SEP] then [PAD]
    segment_ids   int32 [batch, seq]  0 for the first text (with [CLS] and its [SEP]), 1 after
    padding_mask  int32 [batch, seq]  1 for a real token, 0 for padding
"""

TOKEN_IDS, SEGMENT_IDS, PADDING_MASK = "token_ids", "segment_ids", "padding_mask"
INPUT_NAMES = (TOKEN_IDS, SEGMENT_IDS, PADDING_MASK)
