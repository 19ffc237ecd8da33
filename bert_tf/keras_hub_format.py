"""keras-hub's BERT to our models and back, under the name the README gives it; the code
lives with the other checkpoint formats in bert_tf/checkpoint_formats/keras_hub.py."""

from bert_tf.checkpoint_formats.keras_hub import (  # noqa: F401  (re-exported)
    OUR_CONFIG, PRESET_CONFIG, PRESET_WEIGHTS, TASK_CONFIG, config_from_backbone,
    from_keras_hub, is_preset, lowercase_vocab, read_keras_hub_model, read_keras_hub_preset,
    to_keras_hub, write_keras_hub_preset)
