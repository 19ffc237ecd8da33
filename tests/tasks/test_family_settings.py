"""A family is its folder and one registry line, its settings one type: a toy family
written into a temporary folder (its settings with their flags, a `Task` on the driver,
a command) is registered for the test alone, trained by its own command on a tiny
random BERT, exported by `python -m export.saved_model --task toy` and predicted by
`python -m export.batch_predict`, with no other file of the project touched; and each
project family's settings type owns the flags its command offers and their ranges."""

import json
import os
import sys
import textwrap

import numpy as np
import pytest

from tests.testing import run_command

LABELS = ["negative", "positive"]
WORDS = {"negative": ["bad", "sad", "dull", "awful"], "positive": ["good", "glad", "fun",
                                                                   "great"]}
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "film", "was", "very",
         *WORDS["negative"], *WORDS["positive"]]

# The toy family's folder: its settings (flags, defaults, a range), its Task and its
# command. It imports only the driver's API, an existing model class and serving module.
TOY = {
    "__init__.py": '"""A toy family: word polarity from a JSON-lines file."""\n',
    "config.py": '''
        import dataclasses
        from typing import ClassVar

        from tasks import driver


        @dataclasses.dataclass(frozen=True)
        class ToyConfig(driver.FineTuneConfig):
            train_file: str = None
            dev_file: str = None
            max_rows: int = 0          # 0: every row

            FLAGS: ClassVar[dict] = {
                "train_file": dict(help="JSON lines: text, label"),
                "dev_file": dict(help="JSON lines to score (--do_eval)"),
                "max_rows": dict(help="read at most N rows of a file (0: all)"),
            }
            RANGES: ClassVar[dict] = dict(non_negative=("max_rows",))
        ''',
    "task.py": '''
        import json

        import numpy as np

        import bert_tf
        from tasks import driver
        from tasks.families.classification.serving import ClassifierModule
        from tasks.task import Task, family
        from toyfam.config import ToyConfig

        LABELS = ["negative", "positive"]


        def read(path, config):
            with open(path, encoding="utf-8") as f:
                rows = [json.loads(line) for line in f][:config.max_rows or None]
            return [r["text"] for r in rows], np.array([LABELS.index(r["label"])
                                                        for r in rows], np.int32)


        @family
        class ToyTask(Task):
            export_name = "toy"
            run_name = "toy"                        # toy_config.json
            model_class = bert_tf.BertClassifier
            config_class = ToyConfig
            serving_module = ClassifierModule

            def read_train(self, config, tokenizer):
                return read(config.train_file, config)

            def num_examples(self, train):
                return len(train[0])

            def settings(self, config, train):
                return dict(bert_tf.BertClassifier.settings(
                    LABELS, config.max_seq_length, config.do_lower_case),
                    task=self.run_name, model="BertClassifier")

            def read_eval(self, config, settings, tokenizer):
                return read(config.dev_file, config) if config.do_eval else None

            def build_model(self, encoder, config, settings, train=None):
                return bert_tf.BertClassifier(encoder, len(LABELS))

            def compile(self, model, optimizer, config, jit_compile):
                import keras
                model.compile(optimizer=optimizer, loss={"logits": keras.losses.
                              SparseCategoricalCrossentropy(from_logits=True)})

            def dataset(self, data, config, settings, training):
                import tensorflow as tf
                from bert_tf.text.preprocessor import BertPreprocessor
                preprocess = BertPreprocessor(bert_tf.BertTokenizer(
                    config.vocab_file, do_lower_case=config.do_lower_case),
                    config.max_seq_length)
                texts, labels = data
                ds = tf.data.Dataset.from_tensor_slices((list(texts), labels))
                if training:
                    ds = ds.shuffle(len(texts), seed=config.seed).repeat()
                return ds.batch(driver.batch_size(config, training)).map(
                    lambda t, y: (preprocess(t), {"logits": y}))

            def evaluate(self, model, data, config, settings):
                logits = model.predict(self.dataset(data, config, settings, False),
                                       verbose=0)["logits"]
                return {"eval_accuracy": float((logits.argmax(-1) == data[1]).mean())}
        ''',
    "__main__.py": '''
        from tasks import common
        from toyfam.config import ToyConfig


        def add_flags(parser):
            return common.add_flags(parser, ToyConfig)


        def main(argv=None):
            parser = add_flags(common.parser("Fine-tune the toy family."))

            def family(config):
                from toyfam.task import ToyTask
                return ToyTask()
            return common.run(family, ToyConfig, parser.parse_args(argv))
        ''',
}


def rows(count, seed):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        label = LABELS[i % 2]
        out.append({"text": f"the film was {rng.choice(WORDS[label])}", "label": label})
    return out


@pytest.fixture
def toy_family(tmp_path, monkeypatch):
    """The toy family's folder on sys.path and its line in the registry, for this test
    only (the project's REGISTRY and FAMILIES as they were afterwards)."""
    import tasks.families
    import tasks.task
    folder = tmp_path / "families" / "toyfam"
    folder.mkdir(parents=True)
    for name, text in TOY.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "families"))
    monkeypatch.setitem(tasks.families.REGISTRY, "toy", "toyfam.task")
    families = dict(tasks.task.FAMILIES)
    monkeypatch.setattr(tasks.task, "FAMILIES", families)
    monkeypatch.setattr(tasks.families, "FAMILIES", families)
    yield folder
    for name in [m for m in sys.modules if m == "toyfam" or m.startswith("toyfam.")]:
        del sys.modules[name]


@pytest.mark.slow
def test_a_toy_family_is_its_folder_and_one_registry_line(tmp_path, toy_family, capsys):
    import tensorflow as tf

    import bert_tf
    from bert_tf.base.config import BertConfig
    from bert_tf.text.preprocessor import BertPreprocessor
    from tasks.families import REGISTRY

    def write(name, data):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in data) if name.endswith(
            ".jsonl") else data, encoding="utf-8")
        return str(path)

    vocab = write("vocab.txt", "\n".join(VOCAB) + "\n")
    config = str(tmp_path / "bert_config.json")
    BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1,
               num_attention_heads=2, intermediate_size=32,
               max_position_embeddings=16).to_json_file(config)
    run = str(tmp_path / "run")
    argv = ["--bert_config_file", config, "--vocab_file", vocab, "--output_dir", run,
            "--train_file", write("train.jsonl", rows(48, 0)),
            "--dev_file", write("dev.jsonl", rows(16, 1)), "--max_seq_length", "8",
            "--train_batch_size", "8", "--eval_batch_size", "8", "--learning_rate", "1e-3",
            "--num_train_epochs", "4", "--seed", "1"]

    # Its settings own its flags: --help lists them after google's, and their ranges
    # are checked before anything runs.
    from toyfam.__main__ import main
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["--help"])
    helped = capsys.readouterr().out
    assert "--max_rows MAX_ROWS" in helped and "(0: all) (default: 0)" in helped
    assert helped.index("--learning_rate") < helped.index("--train_file")
    code, err = run_command("toyfam.__main__", argv + ["--do_train", "--max_rows=-1"],
                            capsys)
    assert (code, err) == (1, ["error: --max_rows must be a number >= 0, got -1"])
    assert not os.path.exists(run)

    # Trained and evaluated by its command.
    code, err = run_command("toyfam.__main__", argv + ["--do_train", "--do_eval"], capsys)
    assert code == 0, err
    assert {"toy_config.json", "best.weights.h5", "vocab.txt"} <= set(os.listdir(run))
    saved = json.load(open(os.path.join(run, "toy_config.json"), encoding="utf-8"))
    assert saved["model"] == "BertClassifier" and saved["labels"] == LABELS
    assert open(os.path.join(run, "eval_results.txt")).read().startswith("eval_accuracy")

    # Exported by export.saved_model, its --task the registry's new name.
    assert "toy" in REGISTRY
    models = str(tmp_path / "models" / "toy")
    code, err = run_command("export.saved_model", ["--task", "toy", "--checkpoint_dir",
                                                   run, "--output_dir", models], capsys)
    assert code == 0, err
    assert os.listdir(models) == ["1"]

    # Predicted by export.batch_predict: the Keras model's labels and probabilities.
    texts = [r["text"] for r in rows(12, 2)]
    code, err = run_command("export.batch_predict", [
        "--model_dir", models, "--input_file", write("corpus.txt", "\n".join(texts) + "\n"),
        "--output_file", str(tmp_path / "preds" / "toy")], capsys)
    assert code == 0, err
    lines = [json.loads(line) for name in sorted(os.listdir(tmp_path / "preds"))
             if name.endswith(".jsonl") and "rejected" not in name
             for line in open(tmp_path / "preds" / name, encoding="utf-8")]
    assert [line["line"] for line in lines] == list(range(1, len(texts) + 1))
    model, _, tokenizer = bert_tf.load_task_model(run)
    logits = model(BertPreprocessor(tokenizer, 8)(tf.constant(texts)))["logits"]
    expected = tf.nn.softmax(logits).numpy()
    np.testing.assert_allclose([line["outputs"]["probabilities"] for line in lines],
                               expected, atol=1e-5)
    assert [line["outputs"]["label"] for line in lines] == \
        [LABELS[i] for i in expected.argmax(-1)]


@pytest.mark.parametrize("family", ["classification", "swag", "ner", "squad",
                                    "multilabel"])
def test_a_family_command_offers_its_settings_flags(family):
    """Each project family's command is its settings type's flags: google's fine-tuning
    flags, then the settings' own (FLAGS), each a field of the settings; the ranges the
    command checks are the settings' (flag_ranges), every one a field of them."""
    import dataclasses
    import importlib

    from tasks import common
    from tasks.families import family_class
    task = family_class(family)
    settings = task.config_class
    command = importlib.import_module(task.__module__.rpartition(".")[0] + ".__main__")
    parser = command.add_flags(common.parser(family))
    flags = [a.dest for a in parser._actions if a.dest != "help"]
    assert flags == [*common.COMMON_FLAGS, *settings.FLAGS]
    fields = {field.name for field in dataclasses.fields(settings)}
    assert set(flags) <= fields
    ranges = settings.flag_ranges()
    assert {name for names in ranges.values() for name in names} <= fields
    assert ranges["positive"][:7] == ("max_seq_length", "train_batch_size",
                                      "eval_batch_size", "predict_batch_size",
                                      "learning_rate", "num_train_epochs",
                                      "save_checkpoints_steps")
