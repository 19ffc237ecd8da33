"""The offline masking script's parts (`python -m bert_tf.create_pretraining_data`); no
TensorFlow in here. See README.md in this folder."""
