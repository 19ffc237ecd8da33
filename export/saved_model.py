"""Exports a model as a TF Serving SavedModel that takes raw text.

    python -m export.saved_model --task embeddings --checkpoint_dir runs/quickstart/model/hf \\
        --output_dir models/bert_embeddings

writes models/bert_embeddings/<version>/ (version = 1 + the highest existing one; two
exports into one folder at once get two versions), with the vocab as an asset, so the
directory can be moved and served as is:

    tensorflow_model_server --model_name=bert --model_base_path=$PWD/models/bert_embeddings

Tasks: pretraining (fill_mask) and embeddings from a pretrained checkpoint; the task
families (classification, swag, ner, squad, multilabel: tasks/families/'s registry, which
--help lists) from the --output_dir of a fine-tuning run, which holds TASK_config.json,
bert_config.json, vocab.txt and the weights; the run's task family names its serving
module, which its `from_run` builds from the run's settings:

    python -m export.saved_model --task classification --checkpoint_dir runs/mrpc \\
        --output_dir models/mrpc

Every SavedModel has the signatures serving_default (strings), serve_tokenized and
serve_examples; see docs/serving.md.
"""

import errno
import os
import shutil
import uuid

from bert_tf.base.cli import ArgumentParser, DTYPES, boolean, check_output_place, run_main
from bert_tf.base.files import system_error
from export.limits import MAX_TEXT_BYTES
from tasks.families import REGISTRY

# From a pretrained checkpoint.
PRETRAINED = ("pretraining", "embeddings")


def tasks():
    """--task's choices: the pretrained ones, then the task families' names
    (tasks/families' registry, read without TensorFlow, so --help needs none), read when
    the flags are parsed (a family registered after this module was imported is one)."""
    return PRETRAINED + tuple(REGISTRY)


def next_version(output_dir):
    """1 + the highest numeric subdirectory (TF Serving serves the highest)."""
    versions = [int(d) for d in os.listdir(output_dir) if d.isdigit()] \
        if os.path.isdir(output_dir) else []
    return max(versions, default=0) + 1


def build_module(task, checkpoint_dir, vocab_file=None, do_lower_case=True,
                 max_seq_length=None, dtype="float32", top_k=5,
                 max_text_bytes=MAX_TEXT_BYTES, freeze_weights=False):
    """The serving module of `task`, with weights from `checkpoint_dir` (a fine-tuning
    run's output directory for the fine-tuned tasks). max_seq_length None: the run's own
    (128 for the pretrained tasks). max_text_bytes: the longest text a request may send
    (export/limits.py). freeze_weights: the weights as constants
    (ServingModule.freeze_weights). dtype "int8": the float32 model with its encoder's
    dense layers on int8 weights (export/int8.py), frozen."""
    module = _build_module(task, checkpoint_dir, vocab_file, do_lower_case,
                           max_seq_length, "float32" if dtype == "int8" else dtype, top_k,
                           max_text_bytes)
    if dtype == "int8":
        from export.int8 import quantize_encoder
        quantize_encoder(module.model)
    if freeze_weights or dtype == "int8":
        module.freeze_weights()
    return module


def _build_module(task, checkpoint_dir, vocab_file, do_lower_case, max_seq_length, dtype,
                  top_k, max_text_bytes):
    if task not in PRETRAINED:
        return build_task_module(task, checkpoint_dir, max_seq_length, dtype,
                                 max_text_bytes)
    from bert_tf.checkpoints.dispatch import load_encoder, load_pretrainer
    from bert_tf.text.tokenization import BertTokenizer, check_vocab_fits
    from export.serving import EmbeddingsModule, FillMaskModule
    policy = DTYPES[dtype]
    max_seq_length = max_seq_length or 128
    tokenizer = BertTokenizer(vocab_file, do_lower_case=do_lower_case)
    model = load_pretrainer(checkpoint_dir, dtype=policy, next_sentence="auto") \
        if task == "pretraining" else \
        load_encoder(checkpoint_dir, dtype=policy)
    config = (model.encoder if task == "pretraining" else model).bert_config
    check_vocab_fits(vocab_file, config.vocab_size)
    if not 3 <= max_seq_length <= config.max_position_embeddings:
        raise ValueError(f"--max_seq_length {max_seq_length}: must be in [3, "
                         f"{config.max_position_embeddings}] (the model's "
                         f"max_position_embeddings)")
    if task == "pretraining":
        return FillMaskModule(model, tokenizer, max_seq_length, top_k=top_k,
                              max_text_bytes=max_text_bytes)
    return EmbeddingsModule(model, tokenizer, max_seq_length, max_text_bytes)


def task_family(task):
    """The task family (a tasks.task.Task class) that --task `task` exports."""
    from tasks.families import FAMILIES, family_class
    if task not in REGISTRY and task not in FAMILIES:
        raise ValueError(f"--task must be one of "
                         f"{PRETRAINED + tuple(dict.fromkeys([*REGISTRY, *FAMILIES]))}, got "
                         f"{task!r}")
    return family_class(task)


def load_task_model(task, run_dir, dtype="float32"):
    """(Keras model, TASK_config dict, BertTokenizer) of a fine-tuning run directory."""
    from bert_tf.models.run_dir import load_task_model as load
    from tasks.task import run_stem
    name = run_stem(task_family(task))       # the run directory's (and command's)
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"--checkpoint_dir {run_dir}: not a directory (pass the "
                                f"--output_dir of a tasks.{name} run)")
    # Checked here, not left to bert_tf.models.run_dir: its hint names the training command's
    # --output_dir, and this command's flag for the run directory is --checkpoint_dir.
    config = os.path.join(run_dir, f"{name}_config.json")
    if not os.path.isfile(config):
        raise FileNotFoundError(f"{config}: not found (point --checkpoint_dir at the "
                                f"--output_dir of a tasks.{name} run trained "
                                f"with --do_train)")
    from bert_tf.models.run_dir import read_task_config
    task_family(task).check_saved(read_task_config(run_dir, name), config)
    return load(run_dir, name, dtype=DTYPES[dtype])


def build_task_module(task, run_dir, max_seq_length=None, dtype="float32",
                      max_text_bytes=MAX_TEXT_BYTES):
    """The serving module of a fine-tuned task from its run directory: the family's
    serving module, built from the run's model, tokenizer and settings."""
    model, config, tokenizer = load_task_model(task, run_dir, dtype)
    length = max_seq_length or config["max_seq_length"]
    from bert_tf.base.config import BertConfig
    positions = BertConfig.from_json_file(
        os.path.join(run_dir, "bert_config.json")).max_position_embeddings
    if not 3 <= length <= positions:
        raise ValueError(f"--max_seq_length {length}: must be in [3, {positions}] (the "
                         f"model's max_position_embeddings)")
    return task_family(task).serving_module.from_run(model, tokenizer, length, config,
                                                     max_text_bytes)


def claim_version(tmp, output_dir):
    """Renames the finished SavedModel `tmp` to output_dir/<next free version>/ and returns
    that path. The version is claimed by the rename itself: renaming onto a version that
    another export completed in the meantime fails (the target is not empty), and the
    next number is tried, so exports finishing at once never share a version."""
    version = next_version(output_dir)
    while True:
        final = os.path.join(output_dir, str(version))
        try:
            os.rename(tmp, final)
            return final
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        version = max(version + 1, next_version(output_dir))


def export(module, output_dir):
    """Saves `module` as output_dir/<next version>/ (a temporary folder of its own, then
    `claim_version`), with TF Serving's warm-up requests in assets.extra/
    (export/warmup.py; the model name in them is output_dir's last part, as TF Serving
    names models/NAME). TF Serving ignores the temporary `.tmp-*` name (not a number)."""
    import tensorflow as tf

    from export.warmup import write_warmup
    os.makedirs(output_dir, exist_ok=True)
    # A name no other export can take (uuid4), so concurrent exports write apart; made
    # with os.mkdir, not tempfile.mkdtemp, so the version folder gets the umask's mode
    # (mkdtemp's 0700 would hide the model from a server running as another user).
    tmp = os.path.join(output_dir, f".tmp-{uuid.uuid4().hex}")
    os.mkdir(tmp)
    try:
        tf.saved_model.save(module, tmp, signatures=module.signatures())
        write_warmup(module, tmp, os.path.basename(os.path.normpath(output_dir)))
        final = claim_version(tmp, output_dir)
    except BaseException as e:
        # A full disk or an interrupt: no half model under any name (run_main removes
        # the model folder too when this run made it and it is left empty).
        shutil.rmtree(tmp, ignore_errors=True)
        failure = system_error(e, output_dir)    # TensorFlow names its temporary file
        if failure is not None:
            raise failure from None
        raise
    return final


def main(argv=None):
    p = ArgumentParser(prog="python -m export.saved_model",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--task", required=True, choices=tasks())
    p.add_argument("--checkpoint_dir", required=True,
                   help=f"{'/'.join(PRETRAINED)}: google TF1, HF directory or .keras "
                        f"(vocab.txt beside); {'/'.join(REGISTRY)}: the --output_dir of "
                        f"the fine-tuning run")
    p.add_argument("--output_dir", required=True, help="models/NAME; versions go below it")
    p.add_argument("--vocab_file", default=None)
    boolean(p, "--do_lower_case", default=True)
    p.add_argument("--max_seq_length", type=int, default=None,
                   help="tokens per sequence (default: the fine-tuning run's, else 128)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "int8"),
                   help="int8: the encoder's dense layers on int8 weights, their inputs "
                        "quantized per batch (ONNX Runtime's dynamic scheme; needs "
                        "TensorFlow's oneDNN kernels; implies frozen weights; "
                        "docs/serving.md)")
    p.add_argument("--top_k", type=int, default=5, help="fill_mask: tokens per mask")
    boolean(p, "--freeze_weights", default=False,
            help="the weights as constants in the signatures (a frozen graph) instead of "
                 "variables: oneDNN packs them once, so small batches run faster on CPU, "
                 "most of all with --dtype bfloat16 (docs/serving.md)")
    p.add_argument("--max_text_bytes", type=int, default=MAX_TEXT_BYTES,
                   help="the longest text (in UTF-8 bytes) one input of a request may "
                        "have; longer ones are refused with an error naming the input, "
                        "so one request cannot exhaust the server's memory (default: "
                        "%(default)s = 1 MiB; docs/serving.md)")
    # Not locked: two exports into one --output_dir are two versions, each claimed
    # atomically when it is complete.
    return run_main(run, p.parse_args(argv),
                    positive=("max_seq_length", "top_k", "max_text_bytes"), lock=())


def run(args):
    """Builds the module of the flags and exports it; returns the version directory."""
    from bert_tf.checkpoints.dispatch import vocab_beside
    # Before the model is loaded and traced (tens of seconds for BERT-base).
    check_output_place("output_dir", args.output_dir, folder=True)
    vocab = None if args.task not in PRETRAINED else \
        vocab_beside(args.checkpoint_dir, args.vocab_file, "--checkpoint_dir")
    module = build_module(args.task, args.checkpoint_dir, vocab, args.do_lower_case,
                          args.max_seq_length, args.dtype, args.top_k, args.max_text_bytes,
                          args.freeze_weights)
    path = export(module, args.output_dir)
    print(f"exported {args.task} to {path}")
    return path


if __name__ == "__main__":
    main()
