"""The text floor: raw text to the three inputs. Google's text rules, the tokenizers,
word cutting, vocabulary learning, packing, the one preprocessing step training and
serving share, batching by length, raw text's words and offsets in the graph. bert_tf/README.md lists
every file."""
