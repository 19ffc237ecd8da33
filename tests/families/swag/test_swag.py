"""SWAG: the official CSV reader and its bad-row reports, [B, 4, L] packing against
google's per-pair packing, one shared score per choice (permuting the choices permutes
the scores), and learning from the real MiniLM weights vs random initialisation on a
data set in SWAG's format whose held-out endings use words training never shows."""

import csv
import os
import random

import numpy as np
import pytest

from bert_tf.base.input_names import INPUT_NAMES
from bert_tf.models.task_models import BertMultipleChoice
from tasks import metrics
from tasks import swag as swag_command
from tasks.families.classification import task as glue
from tasks.families.swag import task as swag

HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
          "ending0", "ending1", "ending2", "ending3", "label"]


def write_csv(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def official_row(i, sent1, sent2, endings, label=None):
    row = [str(i), f"anetv_{i}", str(1000 + i), f"{sent1} {sent2}", sent1, sent2, "gold"]
    return row + list(endings) + ([] if label is None else [str(label)])


def test_reader_official_columns_and_bad_rows(tmp_path):
    rows = [official_row(0, 'Students lower their eyes nervously, "ready".', "She",
                         ["pats her shoulder, then saunters toward someone.", "turns with two",
                          "walks slowly towards someone.", "wheels around as her dog thunders"],
                         2),
            official_row(1, "He is skiing.", "", ["a", "b", "c", "d"], 0),   # empty sent2 ok
            official_row(2, "x", "y", ["a", "b", "  ", "d"], 1),              # line 4
            official_row(3, "x", "y", ["a", "b", "c", "d"], 4),               # line 5
            official_row(4, "x", "y", ["a", "b", "c", "d"])]                  # line 6
    path = write_csv(tmp_path / "train.csv", HEADER, rows)
    examples, report = swag.read_swag_csv(str(path))
    assert [(e.context, e.start, e.label) for e in examples] == [
        ('Students lower their eyes nervously, "ready".', "She", 2), ("He is skiing.", "", 0)]
    assert examples[0].endings[0] == "pats her shoulder, then saunters toward someone."
    assert examples[0].guid == f"{path}:2"
    assert dict(report.skipped) == {"empty_text": 1, "unknown_label": 1, "malformed": 1}
    assert report.first["empty_text"] == f"{path}:4: empty ending2"
    assert report.first["unknown_label"] == f"{path}:5: label '4' is not 0, 1, 2 or 3"
    assert report.first["malformed"] == f"{path}:6: expected 12 fields, found 11"
    with pytest.raises(glue.DataError, match=f"^{path}:4: empty ending2$"):
        swag.read_swag_csv(str(path), policy="error")

    test = write_csv(tmp_path / "test.csv", HEADER[:-1], [r[:11] for r in rows[:2]])
    examples, _ = swag.read_swag_csv(str(test), with_labels=False)
    assert [(e.guid, e.label) for e in examples] == [("0", None), ("1", None)]
    with pytest.raises(glue.DataError, match=f"{test}:1: no column 'label'"):
        swag.read_swag_csv(str(test))


def test_cli_bad_input_one_line(tmp_path, capsys, minilm_dir):
    path = write_csv(tmp_path / "train.csv", HEADER,
                     [official_row(0, "x", "y", ["a", "b", "c", "d"], 9)])
    with pytest.raises(SystemExit) as e:
        swag_command.main(["--train_file", str(path), "--output_dir", str(tmp_path / "out"),
                   "--do_train", "--init_checkpoint", str(minilm_dir)])
    assert e.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"error: {path}: no usable rows ({path}: 0 of 1 rows used; skipped " \
        f"1 unknown_label (first: {path}:2: label '9' is not 0, 1, 2 or 3))"


def test_preprocessing_packs_each_choice_like_a_pair(tokenizer):
    import tensorflow as tf
    from tests.testing import reference_pack
    contexts = ["A man is sitting on a roof .", "She takes a very long breath and dives "
                "into the cold water below the old bridge ."]
    starts = ["He", ""]
    endings = [["is using wrap to wrap a pair of skis .", "starts pulling up roofing .",
                "is ripping level tiles off .", "holds a rubik's cube ."],
               ["swims .", "climbs out again and again and again and again .", "waves .",
                "shivers ."]]
    seq = 14
    pre = swag.MultipleChoicePreprocessor(tokenizer, seq)
    got = pre(tf.constant(contexts), tf.constant(starts), tf.constant(endings))
    assert got["token_ids"].shape == (2, 4, seq)
    for b in range(2):
        for c in range(4):
            want = reference_pack(tokenizer, contexts[b], f"{starts[b]} {endings[b][c]}", seq)
            for name, values in zip(INPUT_NAMES, want):
                assert got[name][b, c].numpy().tolist() == values, (b, c, name)

    examples = [swag.SwagExample(str(i), contexts[i % 2], starts[i % 2], endings[i % 2], i % 4)
                for i in range(3)]
    batches = list(swag.make_dataset(examples, pre, 2))
    inputs, labels, weights = batches[1]
    assert inputs["token_ids"].shape == (2, 4, seq)
    assert labels["logits"].numpy().tolist() == [2, 0]
    np.testing.assert_allclose(weights["logits"].numpy(), [4 / 3, 0])


def test_model_scores_each_choice_with_the_shared_encoder():
    import keras
    from tests.testing import tiny_encoder
    from tests.testing import random_inputs
    keras.utils.set_random_seed(0)
    model = BertMultipleChoice(tiny_encoder())
    flat = random_inputs(8, 10, 64)
    inputs = {k: v.reshape(2, 4, 10) for k, v in flat.items()}
    logits = np.asarray(model(inputs)["logits"])
    assert logits.shape == (2, 4)
    # Each score is dense(1) on that choice's pooled output, whatever the other choices.
    from bert_tf.models.encoder import BertEncoder
    encoder = [layer for layer in model.layers if isinstance(layer, BertEncoder)][0]
    pooled = np.asarray(encoder(flat)["pooled_output"])                      # [8, H]
    head = model.get_layer("classifier")
    expected = (pooled @ np.asarray(head.kernel) + np.asarray(head.bias)).reshape(2, 4)
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    order = [2, 0, 3, 1]
    permuted = np.asarray(model({k: v[:, order] for k, v in inputs.items()})["logits"])
    np.testing.assert_allclose(permuted, logits[:, order], atol=1e-5)
    # Sequence length is free; probabilities come from a softmax over the 4 scores.
    short = {k: v[:, :, :6] for k, v in inputs.items()}
    assert model(short)["logits"].shape == (2, 4)
    out = swag.postprocess({"logits": logits})
    np.testing.assert_allclose(out["probabilities"].sum(-1), 1.0)
    assert out["label_ids"].tolist() == logits.argmax(-1).tolist()
    assert swag.score_predictions({"label_ids": np.array([1, 0]), "probabilities": np.array(
        [[0.1, 0.6, 0.2, 0.1], [0.3, 0.3, 0.2, 0.2]])}, [1, 2]) == pytest.approx(
        {"accuracy": 0.5, "loss": -(np.log(0.6) + np.log(0.2)) / 2})


# ----------------------------------------------------------------------------- learning

# "i went to the PLACE . there i bought" + "some ITEM ." : the right ending names
# something sold there, the three others things sold at other places. Held-out endings
# name only items training never shows (the places are shared). Every item is one word
# piece: items split into pieces shared across places ("parrot ##s", "hamster ##s")
# would let a randomly initialised model match held-out endings through the pieces.
PLACES = {"bakery": (["bread", "cake", "cookies"], ["pie", "biscuits", "pastry"]),
          "pharmacy": (["medicine", "pills", "bandages"], ["tablets", "antibiotics", "syrup"]),
          "florist": (["roses", "flowers", "petals"], ["bouquet", "blossoms", "orchid"]),
          "hardware store": (["nails", "hammer", "bolts"], ["drills", "tools", "paint"]),
          "bookstore": (["novels", "magazines", "textbooks"],
                        ["poems", "biographies", "comics"]),
          "pet shop": (["rabbits", "puppy", "kitten"], ["parrot", "birds", "cat"]),
          "butcher": (["beef", "pork", "lamb"], ["steak", "bacon", "sausage"]),
          "shoe store": (["sneakers", "boots", "sandals"], ["heels", "shoes", "trainers"])}


def write_swag(path, held_out, n, seed, with_labels=True):
    """A SWAG CSV in the official layout (test: no label column). Returns the labels."""
    rng = random.Random(seed)
    places = sorted(PLACES)
    rows, labels = [], []
    for i in range(n):
        place = places[i % len(places)]
        others = rng.sample([p for p in places if p != place], 3)
        endings = [f"some {rng.choice(PLACES[p][int(held_out)])} ." for p in [place] + others]
        label = rng.randrange(4)
        endings[0], endings[label] = endings[label], endings[0]
        labels.append(label)
        rows.append(official_row(i, f"i went to the {place} .", "there i bought", endings,
                                 label if with_labels else None))
    write_csv(path, HEADER if with_labels else HEADER[:-1], rows)
    return labels


@pytest.mark.slow
def test_swag_learns_from_minilm_not_from_random(tmp_path, minilm_dir):
    """32 training rows; the 32 held-out rows are test.csv (no labels), predicted by the
    training call with its last weights. Chance is 1/4."""
    import keras
    write_swag(tmp_path / "train.csv", False, 32, 0)
    gold = write_swag(tmp_path / "test.csv", True, 32, 1, with_labels=False)
    accuracy = {}
    for name in ("minilm", "random"):
        out = tmp_path / name
        init = ["--init_checkpoint", str(minilm_dir)] if name == "minilm" else [
            "--bert_config_file", os.path.join(minilm_dir, "config.json"),
            "--vocab_file", os.path.join(minilm_dir, "vocab.txt")]
        keras.backend.clear_session()
        swag_command.main(["--data_dir", str(tmp_path), "--output_dir", str(out), "--do_train",
                   "--do_predict", "--max_seq_length", "16", "--train_batch_size", "8",
                   "--learning_rate", "2e-4", "--num_train_epochs", "3", "--seed", "1",
                   "--predict_batch_size", "16", "--jit_compile=false"] + init)
        lines = (out / "test_results.tsv").read_text().splitlines()
        assert lines[0].split("\t") == ["index", "prediction", "probability_0",
                                        "probability_1", "probability_2", "probability_3"]
        rows = [line.split("\t") for line in lines[1:]]
        assert [r[0] for r in rows] == [str(i) for i in range(len(gold))]
        np.testing.assert_allclose([sum(map(float, r[2:])) for r in rows], 1.0, atol=1e-5)
        accuracy[name] = metrics.accuracy(gold, [int(r[1]) for r in rows])
    print(f"swag held-out accuracy: MiniLM {accuracy['minilm']:.4f}, random init "
          f"{accuracy['random']:.4f}")
    assert accuracy["minilm"] >= 0.75
    assert accuracy["random"] <= 0.45
    assert accuracy["minilm"] - accuracy["random"] >= 0.35
