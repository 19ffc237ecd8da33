"""What a fine-tuning run leaves in --output_dir besides the logs, and reading it back.

    output_dir/
      TASK_config.json     the task's settings (sequence length, labels, thresholds, ...)
      bert_config.json     the encoder's hyperparameters (all fields, epsilon included)
      vocab.txt            the vocabulary the run tokenized with
      best.weights.h5      the task model at its best validation score (when evaluated)
      last.weights.h5      the task model after the last epoch

The directory is self-contained: an exporter (or `--do_predict` without `--do_train`)
rebuilds the Keras task model from the two JSON files and loads the weights, without the
pretrained checkpoint.
"""

import json
import os
import shutil

WEIGHT_FILES = ("best.weights.h5", "last.weights.h5")


def write_json(path, value):
    """JSON with sorted keys, written under a temporary name then renamed."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)


def save_task_files(output_dir, task, task_config, bert_config, vocab_file):
    """Writes TASK_config.json, bert_config.json and a copy of vocab.txt."""
    os.makedirs(output_dir, exist_ok=True)
    write_json(os.path.join(output_dir, f"{task}_config.json"), task_config)
    bert_config.to_json_file(os.path.join(output_dir, "bert_config.json"), "full")
    target = os.path.join(output_dir, "vocab.txt")
    if os.path.abspath(vocab_file) != os.path.abspath(target):
        shutil.copyfile(vocab_file, target + ".tmp")
        os.replace(target + ".tmp", target)


def read_task_config(output_dir, task):
    path = os.path.join(output_dir, f"{task}_config.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: not found (train first with --do_train, or "
                                f"point --output_dir at a fine-tuned {task} run)") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None


def weights_file(output_dir):
    """best.weights.h5 if the run had an eval set, else last.weights.h5; error if none."""
    for name in WEIGHT_FILES:
        path = os.path.join(output_dir, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"{output_dir}: no fine-tuned weights ({' or '.join(WEIGHT_FILES)})"
                            f"; run with --do_train first")


def encoder_from_task_dir(output_dir, dtype=None):
    """A randomly initialised encoder shaped by output_dir/bert_config.json (the
    fine-tuned weights are loaded into the whole task model afterwards)."""
    from bert_tf.config import BertConfig
    from bert_tf.encoder import BertEncoder
    config = BertConfig.from_json_file(os.path.join(output_dir, "bert_config.json"))
    return BertEncoder.from_config_object(config, dtype=dtype)


def load_task_model(output_dir, task, build, dtype=None, weights=None):
    """(Keras task model, TASK_config dict, BertTokenizer) of a fine-tuning run:
    `build(encoder, task_config)` makes the model, then `weights` (default: best, else
    last) are loaded into it."""
    from bert_tf.tokenization import BertTokenizer
    config = read_task_config(output_dir, task)
    model = build(encoder_from_task_dir(output_dir, dtype), config)
    model.load_weights(weights or weights_file(output_dir))
    tokenizer = BertTokenizer(os.path.join(output_dir, "vocab.txt"),
                              do_lower_case=config["do_lower_case"])
    return model, config, tokenizer
