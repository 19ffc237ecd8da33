"""What one request to an exported signature may cost: the defaults of the export's
limits, without TensorFlow (the command's --help reads them).

The span tasks' memory grows by about 140 bytes per byte of text above the loaded model
(measured on NER and SQuAD exports, docs/serving.md "What one request may cost"), and
the model runs in calls of at most bert_tf.text.batching.MAX_CALL_TOKENS tokens, so a text at
MAX_TEXT_BYTES costs about 0.15 GB of memory per text of the batch, whatever its length
in windows or parts.
"""

# The most bytes one text of a request may have (--max_text_bytes); a longer text is
# refused in the graph, naming its input, before any work.
MAX_TEXT_BYTES = 1 << 20
