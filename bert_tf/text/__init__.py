"""The text floor: raw text to the three inputs. Google's text rules, the tokenizers,
word cutting, vocabulary learning, packing, the one preprocessing step training and
serving share, batching by length, conlleval's chunk rules. bert_tf/README.md lists
every file."""
