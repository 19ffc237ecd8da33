"""The bad (and awkward but valid) inputs of tests/workflows/test_fuzz.py and
tests/workflows/test_full_disk.py, written once per test session into one directory
(conftest.py's `bad_inputs`): text files in every broken shape, damaged binaries of each
checkpoint and data format the commands read, and small good inputs to damage. The
directory's inputs.json names them (`load`: for the full-disk worker's process)."""

import json
import os
import shutil
import types

TINY = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 64}

DATA = ".data-00000-of-00001"     # a TensorFlow checkpoint's one data shard

SENTENCES = ["The cat sat on the mat.", "It was a sunny day in the park.",
             "Dogs like to run after balls.", "She read the whole book in one night.",
             "The train left the station at noon.", "A small boat crossed the lake."]


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def cut(path, out, keep=None):
    """The first half of `path`'s bytes (`keep`: that many; negative: all but that many
    from the end)."""
    data = open(path, "rb").read()
    return _write(out, data[:len(data) // 2 if keep is None else keep])


def damaged_copies(source, directory, stem, damages):
    """{kind: a copy of the folder `source` at directory/STEM_KIND, damaged by
    damages[kind](copy)}."""
    found = {}
    for kind, damage in damages.items():
        target = os.path.join(directory, f"{stem}_{kind}")
        shutil.copytree(source, target)
        damage(target)
        found[kind] = target
    return found


def flip(path, out, at):
    """`path` with the byte at `at` (negative: from the end) inverted."""
    data = bytearray(open(path, "rb").read())
    data[at] ^= 0xFF
    return _write(out, bytes(data))


def text_variants(directory, name, good):
    """{kind: path} for one text input: `good` (str) as UTF-8, and the same role as a
    missing file, an empty file, a directory, latin-1, NUL bytes (UTF-16 without a BOM),
    one 5 MB line without a newline, and CRLF line ends behind a UTF-8 BOM."""
    stem, ext = os.path.splitext(name)
    p = lambda kind: os.path.join(directory, f"{stem}_{kind}{ext}")  # noqa: E731
    os.makedirs(p("dir"))
    latin1 = good.replace("e", "\xe9")      # French-like text saved as latin-1
    return {
        "good": _write(p("good"), good.encode("utf-8")),
        "missing": p("missing"),
        "empty": _write(p("empty"), b""),
        "dir": p("dir"),
        "latin1": _write(p("latin1"), latin1.encode("latin-1", "replace")),
        "nul": _write(p("nul"), good.encode("utf-16-le")),
        "long_line": _write(p("long_line"), (" ".join(SENTENCES) + " ").encode() * 30000),
        "crlf_bom": _write(p("crlf_bom"), b"\xef\xbb\xbf" + good.replace(
            "\n", "\r\n").encode("utf-8")),
    }


def build(directory, minilm_dir):
    """Every input of the table, under `directory`; a namespace of paths."""
    import tensorflow as tf

    from bert_tf.checkpoints.dispatch import write_google_checkpoint
    from bert_tf.base.config import BertConfig
    from bert_tf.models.pretrainer import BertPretrainer
    from tests.testing import write_pretraining_shards

    d = lambda *names: os.path.join(directory, *names)  # noqa: E731
    ns = types.SimpleNamespace(root=directory, minilm=minilm_dir,
                               vocab=os.path.join(minilm_dir, "vocab.txt"))

    # Configs: good, wrong-typed, not JSON, empty, and another model size.
    ns.config = _write(d("bert_config.json"), json.dumps(TINY).encode())
    ns.config_wrong_type = _write(d("config_wrong_type.json"),
                                  json.dumps(dict(TINY, hidden_size="32")).encode())
    ns.config_not_json = _write(d("config_not_json.json"), b'{"hidden_size": 32,')
    ns.config_list = _write(d("config_list.json"), b"[32, 1, 2]")
    ns.config_bad_heads = _write(d("config_bad_heads.json"),
                                 json.dumps(dict(TINY, num_attention_heads=3)).encode())
    ns.config_other_size = _write(d("config_other_size.json"),
                                  json.dumps(dict(TINY, hidden_size=48)).encode())

    # vocab.txt cut (another vocabulary size) and byte-flipped in its middle.
    ns.vocab_cut = cut(ns.vocab, d("vocab_cut.txt"))
    ns.vocab_flipped = flip(ns.vocab, d("vocab_flipped.txt"), 1000)
    ns.vocab_empty = _write(d("vocab_empty.txt"), b"")
    ns.vocab_big = _write(d("vocab_big.txt"), open(ns.vocab, "rb").read() + b"".join(
        b"[extra%d]\n" % i for i in range(8)))

    # Text inputs of each command's role.
    corpus = "\n".join(SENTENCES[:3]) + "\n\n" + "\n".join(SENTENCES[3:]) + "\n"
    ns.corpus = text_variants(directory, "corpus.txt", corpus)
    ns.lines = text_variants(directory, "lines.txt", "\n".join(SENTENCES) + "\n")
    tsv = "sentence\tlabel\n" + "".join(f"{s}\t{i % 2}\n" for i, s in enumerate(SENTENCES))
    ns.tsv = text_variants(directory, "train.tsv", tsv)
    conll = "".join(f"{w} {'B-PER' if w[0].isupper() else 'O'}\n" + ("\n" if w[-1] == "." else "")
                    for s in SENTENCES for w in s.replace(".", " .").split())
    ns.conll = text_variants(directory, "train.conll", conll)
    swag = "sent1,sent2,ending0,ending1,ending2,ending3,label\n" + "".join(
        f"{s},Then,it ended.,it rained.,it stopped.,it grew.,{i % 4}\n"
        for i, s in enumerate(SENTENCES))
    ns.swag = text_variants(directory, "train.csv", swag)
    squad = {"version": "v1.1", "data": [{"title": "t", "paragraphs": [{
        "context": " ".join(SENTENCES), "qas": [{
            "id": f"q{i}", "question": "Where did the cat sit?",
            "answers": [{"text": "on the mat", "answer_start": 12}]} for i in range(3)]}]}]}
    ns.squad = text_variants(directory, "train.json", json.dumps(squad, indent=1))
    ns.squad_wrong_type = _write(d("squad_wrong_type.json"), json.dumps(
        {"data": [{"paragraphs": [{"context": 7, "qas": []}]}]}).encode())
    ns.squad_no_data = _write(d("squad_no_data.json"), b'{"version": "v1.1"}')

    # Pretraining shards: good, cut, byte-flipped, not a TFRecord.
    shards = write_pretraining_shards(d("shards"), num_files=1, examples_per_file=16)
    ns.shard = tf.io.gfile.glob(shards)[0]
    # Cut inside a record: a cut on a record boundary leaves a valid, shorter shard.
    ns.shard_cut = _write(d("shard_cut.tfrecord"), open(ns.shard, "rb").read()[:2020])
    ns.shard_flipped = flip(ns.shard, d("shard_flipped.tfrecord"), 2000)
    ns.shard_text = ns.corpus["good"]
    ns.shard_empty = _write(d("shard_empty.tfrecord"), b"")
    os.makedirs(d("shard_dir"))
    ns.shard_dir = d("shard_dir")

    # A tiny google TF1 checkpoint (weights of TINY) and its damaged copies.
    model = BertPretrainer.from_config_object(BertConfig.from_dict(TINY))
    ns.google = d("google")
    write_google_checkpoint(model, ns.google, vocab_file=ns.vocab)
    shutil.copy(ns.config, os.path.join(ns.google, "bert_config.json"))
    ns.google_damaged = {}
    for kind in ("index_cut", "index_flipped", "data_cut", "data_flipped"):
        target = d(f"google_{kind}")
        shutil.copytree(ns.google, target)
        part = "index" if kind.startswith("index") else "data-00000-of-00001"
        path = os.path.join(target, f"bert_model.ckpt.{part}")
        if kind.endswith("cut"):
            cut(path, path)
        else:
            flip(path, path, len(open(path, "rb").read()) // 2)
        ns.google_damaged[kind] = target

    # The tiny checkpoint's embeddings export (a raw-text signature for batch_predict),
    # and copies with its variables' .data file cut by one byte, emptied, removed or a
    # byte of it changed, or its .index cut in half.
    from export import saved_model
    ns.export = d("export")
    saved_model.main(["--task=embeddings", f"--checkpoint_dir={ns.google}",
                      f"--output_dir={ns.export}"])
    variables = os.path.join("1", "variables", "variables")
    ns.export_damaged = damaged_copies(ns.export, directory, "export", {
        "data_cut1": lambda t: cut(*[os.path.join(t, variables + DATA)] * 2, keep=-1),
        "data_empty": lambda t: cut(*[os.path.join(t, variables + DATA)] * 2, keep=0),
        "data_missing": lambda t: os.remove(os.path.join(t, variables + DATA)),
        "index_cut": lambda t: cut(*[os.path.join(t, variables + ".index")] * 2),
        "data_flipped": lambda t: flip(*[os.path.join(t, variables + DATA)] * 2, at=(
            os.path.getsize(os.path.join(t, variables + DATA)) // 2))})

    # A run_pretraining folder (one step of the tiny model: ckpt-1, an object-based
    # tf.train.Checkpoint with the optimizer and the input position) and copies with
    # ckpt-1's .data file cut by one byte, emptied or removed, its .index removed, and
    # its `checkpoint` state file naming a ckpt-7 that is not there.
    from bert_tf import run_pretraining
    ns.pretraining = d("pretraining")
    run_pretraining.main([f"--input_file={ns.shard}", f"--output_dir={ns.pretraining}",
                          f"--bert_config_file={ns.config}", "--do_train",
                          "--num_train_steps=1", "--train_batch_size=4",
                          "--max_seq_length=32", "--max_predictions_per_seq=5",
                          "--num_warmup_steps=0", "--save_checkpoints_steps=1"])
    state = lambda t: _write(os.path.join(t, "checkpoint"), open(os.path.join(  # noqa: E731
        t, "checkpoint"), "rb").read().replace(b'"ckpt-1"', b'"ckpt-7"'))
    ns.pretraining_damaged = damaged_copies(ns.pretraining, directory, "pretraining", {
        "data_cut1": lambda t: cut(*[os.path.join(t, "ckpt-1" + DATA)] * 2, keep=-1),
        "data_empty": lambda t: cut(*[os.path.join(t, "ckpt-1" + DATA)] * 2, keep=0),
        "data_missing": lambda t: os.remove(os.path.join(t, "ckpt-1" + DATA)),
        "no_index": lambda t: os.remove(os.path.join(t, "ckpt-1.index")),
        "state_names_missing": state})

    # The tiny checkpoint as a keras-hub preset, with its model.weights.h5 cut by one
    # byte or in half.
    from bert_tf.checkpoints.dispatch import save_checkpoint
    ns.preset = save_checkpoint(model, d("preset"), "keras_hub", vocab_file=ns.vocab)
    weights = lambda t: os.path.join(t, "model.weights.h5")  # noqa: E731
    ns.preset_damaged = damaged_copies(ns.preset, directory, "preset", {
        "cut1": lambda t: cut(weights(t), weights(t), keep=-1),
        "cut": lambda t: cut(weights(t), weights(t))})

    # The TF1 checkpoint without its .index (the .data file and the `checkpoint` state
    # file naming it are there), and the same without the state file.
    for kind, remove in (("no_index", (".index",)), ("no_index_no_state", (".index", "/"))):
        target = d(f"google_{kind}")
        shutil.copytree(ns.google, target)
        os.remove(os.path.join(target, "bert_model.ckpt.index"))
        if "/" in remove:
            os.remove(os.path.join(target, "checkpoint"))
        ns.google_damaged[kind] = target

    # MiniLM's HF directory with model.safetensors cut in half or its header's first
    # byte flipped.
    for kind in ("cut", "flipped"):
        target = d(f"hf_{kind}")
        os.makedirs(target)
        for name in ("config.json", "vocab.txt"):
            shutil.copy(os.path.join(minilm_dir, name), target)
        weights = os.path.join(minilm_dir, "model.safetensors")
        out = os.path.join(target, "model.safetensors")
        cut(weights, out) if kind == "cut" else flip(weights, out, 8)
        setattr(ns, f"hf_{kind}", target)

    # A tiny .keras model (the encoder) and its damaged copies.
    from bert_tf.checkpoints.dispatch import write_keras_model
    ns.keras = d("model.keras")
    write_keras_model(model, ns.keras, vocab_file=ns.vocab)
    ns.keras_cut = cut(ns.keras, d("model_cut.keras"))
    ns.keras_cut1 = cut(ns.keras, d("model_cut1.keras"), keep=-1)
    ns.keras_flipped = flip(ns.keras, d("model_flipped.keras"), 30)

    # Model Garden's trainer model_dir (tests/fixtures/model_garden/trainer) with its
    # .data file cut to a tenth (the optimizer state, never read, fills its second half),
    # and with a params.yaml of a pre-LayerNorm encoder.
    trainer = os.path.join(os.path.dirname(__file__), "fixtures", "model_garden", "trainer")
    ns.mg_data_cut, ns.mg_norm_first = d("mg_data_cut"), d("mg_norm_first")
    for target in (ns.mg_data_cut, ns.mg_norm_first):
        shutil.copytree(trainer, target)
    data = os.path.join(ns.mg_data_cut, "ckpt-1.data-00000-of-00001")
    _write(data, open(data, "rb").read()[:os.path.getsize(data) // 10])
    params = os.path.join(ns.mg_norm_first, "params.yaml")
    _write(params, open(params, "rb").read().replace(b"norm_first: false",
                                                      b"norm_first: true"))

    # TF Hub's encoder SavedModel with its variables cut to a tenth.
    ns.tfhub_cut = d("tfhub_cut")
    shutil.copytree(os.path.join(os.path.dirname(trainer), "tfhub_encoder"), ns.tfhub_cut)
    data = os.path.join(ns.tfhub_cut, "variables", "variables.data-00000-of-00001")
    _write(data, open(data, "rb").read()[:os.path.getsize(data) // 10])
    ns.tfhub_cut1 = d("tfhub_cut1")
    shutil.copytree(os.path.join(os.path.dirname(trainer), "tfhub_encoder"), ns.tfhub_cut1)
    cut(*[os.path.join(ns.tfhub_cut1, "variables", "variables" + DATA)] * 2, keep=-1)
    ns.tfhub_preprocess = os.path.join(os.path.dirname(trainer), "tfhub_preprocess")

    # A fine-tuning run (tasks.glue, one epoch on six rows) and copies with its
    # last.weights.h5 cut or byte-flipped (in the HDF5 superblock: HDF5 keeps no checksum
    # of the data, so a flipped byte inside a weight's values reads back as a value).
    from tasks import glue
    ns.run = d("glue_run")
    glue.main([f"--bert_config_file={ns.config}", f"--vocab_file={ns.vocab}",
               f"--output_dir={ns.run}", "--do_train", f"--train_file={ns.tsv['good']}",
               "--task_name=custom", "--labels=0,1", "--max_seq_length=16",
               "--num_train_epochs=1", "--train_batch_size=4"])
    for kind in ("cut", "flipped"):
        target = d(f"glue_run_{kind}")
        shutil.copytree(ns.run, target)
        weights = os.path.join(target, "last.weights.h5")
        if kind == "cut":
            cut(weights, weights)
        else:
            flip(weights, weights, 9)
        setattr(ns, f"run_{kind}", target)
    _write(d(INDEX), json.dumps(vars(ns), default=str).encode())
    return ns


INDEX = "inputs.json"


def load(directory):
    """The namespace `build` returned for `directory`, read from its inputs.json."""
    with open(os.path.join(directory, INDEX), encoding="utf-8") as f:
        return types.SimpleNamespace(**json.load(f))
