"""The models floor: layers, `BertEncoder`, the heads, `BertPretrainer`, the task models
and a fine-tuning run's directory. bert_tf/README.md lists every file."""
