"""What a task family is: the `Task` hooks that tasks/driver.py's `run` calls, the parts a
family declares (its model class, serving module and export name), and `FAMILIES`, where
`@family` registers each Task class by export name for `python -m export.saved_model`.
tasks/families/ holds the project's families; tests/tasks/test_driver.py builds one more.
"""

import os


# The task families by export name (`python -m export.saved_model --task NAME`), filled by
# `family` as each Task class is defined (tasks/families/ holds the project's own).
FAMILIES = {}


def family(cls):
    """Class decorator: registers a Task class under its `export_name`, where the export
    command finds its model and serving module."""
    FAMILIES[cls.export_name] = cls
    return cls


def run_stem(task_class):
    """The TASK_config.json stem of a family's runs: its `run_name`, else its model
    class's `TASK` (the project's first families share their model class's name)."""
    return task_class.run_name or task_class.model_class.TASK


class Task:
    """One task family for `run`. Hooks get the resolved config and `settings`, the dict
    the run directory keeps as TASK_config.json (labels, sequence length, ...).

    A family declares its parts: `model_class` (a bert_tf.models.task_models class: the run
    directory's name, what TASK_config.json keeps, how the model is rebuilt),
    `serving_module` (an export.serving.ServingModule class, built from a run by its
    `from_run`), `export_name` (export.saved_model's --task, its tasks/families
    registry name), `config_class` (its settings: a driver.FineTuneConfig subclass, which
    its command fills from flags) and, where the model class is another family's too,
    `run_name` (the run directory's stem; TASK_config.json then records the model class
    by name)."""

    model_class = None
    config_class = None        # its settings' dataclass; None: driver.FineTuneConfig
    serving_module = None
    export_name = None
    run_name = None            # TASK_config.json's stem; None: the model class's TASK
    result_format = ".4f"      # how eval_results lines are printed

    @property
    def name(self):
        """The run directory's TASK_config.json stem (`run_stem`)."""
        return run_stem(type(self))

    def preprocessor(self, config, kind=None):
        """The run's raw text -> inputs step: `kind` (a bert_tf.text.preprocessor
        BertPreprocessor class; default BertPreprocessor) over the config's vocabulary,
        case and sequence length, made once per task object and those settings, for
        the hooks that tokenize (dataset, predict)."""
        from bert_tf.text.preprocessor import BertPreprocessor
        from bert_tf.text.tokenization import BertTokenizer
        kind = kind or BertPreprocessor
        key = (kind, config.vocab_file, config.do_lower_case, config.max_seq_length)
        made = getattr(self, "_preprocessors", {})
        if key not in made:
            made = self._preprocessors = {key: kind(BertTokenizer(
                config.vocab_file, do_lower_case=config.do_lower_case),
                config.max_seq_length)}
        return made[key]

    def check(self, config):
        """Raises ValueError for flag combinations the task cannot run."""
        if not (config.do_train or config.do_eval or config.do_predict):
            raise ValueError("nothing to do: pass --do_train, --do_eval and/or --do_predict")

    @classmethod
    def check_saved(cls, saved, path):
        """ValueError naming `path` when a run's TASK_config.json (`saved`) holds values
        the family cannot use (a file edited by hand): export.saved_model calls it before
        the model loads, a later run's `restore` before it runs. Default: nothing."""

    def training_config(self, config):
        """The config of a --do_train run, flag defaults filled (checks that need them)."""
        return config

    def restore(self, config, saved):
        """The config of a run without --do_train: the trained run's settings (`saved`,
        its TASK_config.json) where they must match what the model learned."""
        return config.replace(do_lower_case=saved["do_lower_case"],
                              max_seq_length=saved["max_seq_length"],
                              vocab_file=os.path.join(config.output_dir, "vocab.txt"))

    def text_segments(self, config):
        """How many texts one input sequence packs (1, or 2 for sentence pairs): the
        driver refuses a --max_seq_length without room for a token of each."""
        return 1

    def read_train(self, config, tokenizer):
        """The training data, in whatever form `dataset` and `settings` take."""
        raise NotImplementedError

    def input_files(self, config):
        """[(flag, path)] of every file the run may read beside its checkpoint: the driver
        refuses an --output_dir that is one of them or would write over one
        (`check_output_dir`). Default: the shared data, vocabulary and config flags."""
        names = ("vocab_file", "bert_config_file", "train_file", "dev_file", "eval_file",
                 "predict_file", "test_file", "label_file")
        return [(f"--{name}", getattr(config, name, None)) for name in names]

    def written_files(self, config):
        """Names (globs allowed) the run writes into --output_dir beside the files every
        run writes (tasks/driver.py's RUN_FILES): its predictions and caches. An input
        under one of these names inside --output_dir is refused before anything is
        written, as it would be overwritten."""
        return ()

    def training_files(self, config):
        """[(flag, path)] of what a training run learns from: its training data and, with
        --do_eval, the validation data that picks best.weights.h5 (files or folders).
        The driver keeps their fingerprints (with the vocabulary's) in the resumable
        state, and refuses to resume on other data. Default: --train_file, and
        --dev_file or --eval_file with --do_eval. Called after read_train."""
        names = ("train_file",) + (("dev_file", "eval_file") if config.do_eval else ())
        return [(f"--{name}", getattr(config, name)) for name in names
                if getattr(config, name, None)]

    def num_examples(self, train):
        return len(train)

    def settings(self, config, train):
        """TASK_config.json of a training run (what `restore` and export read back)."""
        raise NotImplementedError

    def resolved(self, config, settings, train):
        """The training run's settings as a resumed run compares them
        (tasks/resume.py's resume_settings): `settings` (TASK_config.json's), and what
        else a flag's default resolved to in read_train's data (`train`) that the file
        does not keep."""
        return settings

    def read_eval(self, config, settings, tokenizer):
        """The evaluation data (also the validation set during training), or None."""
        return None

    def validation(self, evaluation):
        """The part of read_eval's data that validates during training."""
        return evaluation

    def build_model(self, encoder, config, settings, train=None):
        raise NotImplementedError

    def prepare(self, model, config, train, evaluation):
        """What read_train's and read_eval's data need of the built model, read before
        the run writes anything (NER reads --extracted_features here, checked against
        the model's frozen layers). Default: nothing."""

    def compile(self, model, optimizer, config, jit_compile):
        raise NotImplementedError

    def dataset(self, data, config, settings, training):
        """tf.data of the model's (inputs, labels[, weights]) batches."""
        raise NotImplementedError

    def trainer(self, model, train, validation, config, settings):
        """(the Keras model that fit trains, its training data, its validation data or
        None), for `dataset`. Default: `model` on read_train's and read_eval's data. A
        task may train a part of `model` that shares its trainable layers, on data made
        for it (NER's head on a frozen encoder's features, computed once); the
        checkpoints always hold `model`'s weights. Called under the strategy's scope,
        after `compile`."""
        return model, train, validation

    def monitor(self, settings):
        """(validation metric, "min" or "max") that picks best.weights.h5."""
        return "loss", "min"

    def main_metric(self, config):
        """(the eval_results.txt key of the family's dev score, "max" or "min"): the score
        its papers report, and the one `python -m tasks.search` chooses a setting by
        (its --metric changes it). None: the family names none."""
        return None

    def dev_file_flag(self, config):
        """The flag (no dashes) naming the file a --do_eval run scores, its dev set:
        `python -m tasks.search` scores its --test_file under this flag, after the
        choice, in a copy of a chosen run. None: the config reads its dev set elsewhere
        (a data folder), so no other file can be scored in its place."""
        return None

    def evaluate(self, model, data, config, settings):
        """Scores `data` (read_eval's) -> {name: value}; may write prediction files."""
        return {}

    def predict(self, model, config, settings, tokenizer, evaluation):
        """Predicts the prediction file(s) and writes them -> metrics it could score.
        evaluation: read_eval's data (None without it), for a family whose prediction
        file is its evaluation file (SQuAD's)."""
        return {}

    def print_results(self, results):
        for key in sorted(results):
            print(f"{key} = {results[key]:{self.result_format}}", flush=True)
