"""`python -m tasks.search` (tasks/search/): the paper's protocol on a tiny classifier.

One search of a 2x2 grid (learning rate x batch size) with 2 restarts on a tiny
sentiment-like CSV set, from a tiny checkpoint, is killed with SIGKILL while its third
trial trains and run again to its end (the `search` fixture, ~2.5 CPU-minutes: 11 family
commands of a few seconds each). The tests then read what it left: the complete trials
kept byte for byte across the kill, the choice the argmax of the mean dev score, the
restarts' starting weights (the encoder's shared, the new layer's and the data order
not), the test file opened only after the choice (every open of it, in every process,
logged by an audit hook), the reports against the runs' own eval_results.txt, and
reruns on another grid or on changed data refused with the folder unchanged."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests import TESTS
from tests.testing import refused, tree_hash

TINY = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 64}
POSITIVE, OTHER = "good great fine".split(), "bad awful poor film movie plot actor scene".split()
GRID = "learning_rate=1e-3,1e-6;train_batch_size=8,16"

# Run in every process the search starts (first on PYTHONPATH): the suite's own
# sitecustomize, then an audit hook that logs each open of $WATCH, and each write of a
# results.json (the choice is written there before the test set is scored).
SITE = '''
import json, os, sys, time
exec(open(os.environ["SEARCH_TEST_SITE"]).read())
_watch = os.path.realpath(os.environ["SEARCH_TEST_WATCH"])
def _hook(event, args):
    if event != "open" or not args or not isinstance(args[0], str):
        return
    path = os.path.realpath(args[0])
    what = "test" if path == _watch else "choice" if path.endswith("results.json.tmp") \\
        else None
    if what:
        with open(os.environ["SEARCH_TEST_LOG"], "a") as f:
            f.write(json.dumps({"what": what, "time": time.time(), "pid": os.getpid(),
                                "argv": sys.argv}) + "\\n")
sys.addaudithook(_hook)
'''


def write_rows(path, n, rng):
    with open(path, "w", encoding="utf-8") as f:
        f.write("sentence,label\n")
        for _ in range(n):
            words = [rng.choice(OTHER) for _ in range(rng.randint(2, 6))]
            positive = rng.random() < 0.5
            if positive:
                words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE))
            f.write(f"{' '.join(words)},{int(positive)}\n")


@pytest.fixture(scope="module")
def data(tmp_path_factory, minilm_dir):
    """A tiny google-format checkpoint (MiniLM's vocabulary) and train/dev/test CSVs:
    label 1 when a sentence holds good, great or fine."""
    from bert_tf.base.config import BertConfig
    from bert_tf.checkpoints.dispatch import save_checkpoint
    from bert_tf.models.encoder import BertEncoder
    import keras
    root = tmp_path_factory.mktemp("search")
    # Seeded: the tiny encoder's start decides whether the settings' dev scores differ
    # (at seed 0 lr 1e-6 keeps its start's majority answer, 0.625, and lr 1e-3 ends at
    # 0.375); unseeded, it depended on what the worker had run before.
    keras.utils.set_random_seed(0)
    encoder = BertEncoder.from_config_object(BertConfig(**TINY))
    save_checkpoint(encoder, str(root / "ckpt"), "google",
                    vocab_file=os.path.join(minilm_dir, "vocab.txt"))
    rng = random.Random(0)
    for name, n in (("train", 64), ("dev", 24), ("test", 24)):
        write_rows(root / f"{name}.csv", n, rng)
    site = root / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE)
    return root


def family_flags(root):
    return ["--task_name=custom", f"--train_file={root / 'train.csv'}",
            f"--dev_file={root / 'dev.csv'}", f"--init_checkpoint={root / 'ckpt'}",
            "--max_seq_length=16", "--num_train_epochs=2"]


def search_argv(root, out, grid=GRID, restarts=2, flags=None):
    return ["--task=classification", f"--output_dir={out}", f"--grid={grid}",
            f"--restarts={restarts}", f"--test_file={root / 'test.csv'}", "--",
            *(flags if flags is not None else family_flags(root))]


def status(out, trial):
    try:
        with open(os.path.join(out, "tuner", f"trial_{trial}", "trial.json")) as f:
            return json.load(f)["status"]
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="module")
def search(data):
    """The search, killed (SIGKILL) while trial 2 trains, then run again to its end.
    -> (out, {trial: tree_hash of its run and tuner folders before the kill}, stdout)."""
    out = str(data / "out")
    log = str(data / "opens.jsonl")
    site = os.path.join(TESTS, "runtime_site",
                        "sitecustomize.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(data / "site"), os.environ.get("PYTHONPATH", "")]),
        SEARCH_TEST_SITE=site, SEARCH_TEST_WATCH=str(data / "test.csv"),
        SEARCH_TEST_LOG=log)
    command = [sys.executable, "-m", "tasks.search", *search_argv(data, out)]
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 600
    while not (status(out, 1) == "COMPLETED" and os.path.exists(
            os.path.join(out, "runs", "trial_2", "glue_config.json"))):
        assert first.poll() is None, first.stdout.read()
        assert time.time() < deadline, "the search did not reach trial 2"
        time.sleep(0.2)
    kept = {t: (tree_hash(os.path.join(out, "runs", f"trial_{t}")),
                tree_hash(os.path.join(out, "tuner", f"trial_{t}"))) for t in (0, 1)}
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert status(out, 2) == "RUNNING"
    second = subprocess.run(command, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=900)
    assert second.returncode == 0, second.stdout
    return out, kept, second.stdout, log


def read_results(path):
    from bert_tf.base.files import read_results as read
    return read(path)


def trials_of(out):
    """{trial id: command.json} of the search's trials."""
    found = {}
    for name in sorted(os.listdir(os.path.join(out, "tuner"))):
        path = os.path.join(out, "tuner", name, "command.json")
        if os.path.exists(path):
            found[name.removeprefix("trial_")] = json.load(open(path))
    return found


@pytest.mark.slow
def test_a_killed_search_keeps_its_complete_trials_and_finishes(search):
    out, kept, stdout, _ = search
    for t, (run, tuner) in kept.items():
        assert tree_hash(os.path.join(out, "runs", f"trial_{t}")) == run
        assert tree_hash(os.path.join(out, "tuner", f"trial_{t}")) == tuner
    assert [status(out, t) for t in range(8)] == ["COMPLETED"] * 8
    # The rerun ran the 6 trials left (trial 2 again, resumed or from its start) and the
    # 2 test scorings; trials 0 and 1 ran once.
    assert "8 trials (2 complete)" in stdout
    for t in range(8):
        runs = open(os.path.join(out, "tuner", f"trial_{t}", "output.log")).read()
        assert runs.count("$ ") == (2 if t == 2 else 1), t
    assert "search: 10/10 run (100%)" in stdout and "ETA" in stdout


@pytest.mark.slow
def test_the_choice_is_the_best_mean_dev_score(search):
    out = search[0]
    report = json.load(open(os.path.join(out, "results.json")))
    means = {}
    for trial, command in trials_of(out).items():
        score = read_results(os.path.join(command["run_dir"], "eval_results.txt"))
        means.setdefault(json.dumps(command["setting"]), []).append(score["eval_accuracy"])
    assert all(len(v) == 2 for v in means.values()) and len(means) == 4
    best = max(means, key=lambda s: np.mean(means[s]))
    assert len({round(np.mean(v), 6) for v in means.values()}) > 1, means
    assert report["chosen"]["setting"] == json.loads(best)
    assert report["metric"] == "eval_accuracy" and report["direction"] == "max"
    chosen = report["chosen"]
    scores = {t: read_results(os.path.join(out, "runs", f"trial_{t}",
                                           "eval_results.txt"))["eval_accuracy"]
              for t in chosen["trials"]}
    assert chosen["best_trial"] == max(chosen["trials"], key=lambda t: scores[t])
    assert chosen["run_dir"] == os.path.join(out, "runs", f"trial_{chosen['best_trial']}")


def start_of(argv):
    """(encoder weights, new layer's weights, first training batch's token ids) of a
    trial's model as its command (argv) builds it before the first step."""
    from bert_tf.text.tokenization import BertTokenizer
    from tasks import common, driver
    from tasks.families.classification import __main__ as glue_command
    from tasks.families.classification.task import ClassificationConfig, ClassificationTask
    args = glue_command.add_flags(common.parser("trial")).parse_args(argv)
    task = ClassificationTask()
    config = task.training_config(driver.resolve_paths(ClassificationConfig.from_args(args)))
    tokenizer = BertTokenizer(config.vocab_file, do_lower_case=config.do_lower_case)
    train = task.read_train(config, tokenizer)
    settings = task.settings(config, train)
    task.read_eval(config, settings, tokenizer)
    model = task.build_model(driver.build_encoder(config), config, settings, train)
    batch = next(iter(task.dataset(train, config, settings, training=True)))
    encoder = [w.numpy() for w in model.encoder.weights]
    new = [w.numpy() for w in model.weights if not any(w is e for e in model.encoder.weights)]
    return encoder, new, batch[0]["token_ids"].numpy()


@pytest.mark.slow
def test_restarts_change_the_data_order_and_new_layers_not_the_encoder(search, data):
    out = search[0]
    trials = trials_of(out)
    by_setting = {}
    for trial, command in trials.items():
        by_setting.setdefault(json.dumps(command["setting"]), {})[command["restart"]] = command
    pair = next(iter(by_setting.values()))
    a, b = pair[0]["argv"][3:], pair[1]["argv"][3:]       # after python -m MODULE
    assert [x for x in a if x not in b] == ["--seed=12345", f"--output_dir={pair[0]['run_dir']}"]
    assert [x for x in b if x not in a] == ["--seed=12346", f"--output_dir={pair[1]['run_dir']}"]
    enc_a, new_a, batch_a = start_of(a)
    enc_b, new_b, batch_b = start_of(b)
    for x, y in zip(enc_a, enc_b):
        np.testing.assert_array_equal(x, y)
    from bert_tf.checkpoints.dispatch import load_encoder
    checkpoint = [w.numpy() for w in load_encoder(str(data / "ckpt")).weights]
    for x, y in zip(enc_a, checkpoint):
        np.testing.assert_array_equal(x, y)
    assert new_a and all(x.shape == y.shape for x, y in zip(new_a, new_b))
    assert not np.array_equal(new_a[0], new_b[0])
    assert not np.array_equal(batch_a, batch_b)
    # The trials' first steps differ too (train_log.jsonl's first loss).
    first = [json.loads(open(os.path.join(c["run_dir"], "train_log.jsonl")).readline())["loss"]
             for c in (pair[0], pair[1])]
    assert first[0] != first[1]


@pytest.mark.slow
def test_the_test_set_is_read_after_the_choice_only(search, data):
    out, _, _, log = search
    events = [json.loads(line) for line in open(log)]
    test_file = str(data / "test.csv")
    for trial, command in trials_of(out).items():
        assert not any(test_file in x for x in command["argv"]), trial
    first_choice = min(e["time"] for e in events if e["what"] == "choice")
    reads = [e for e in events if e["what"] == "test"]
    assert reads, "the audit hook saw no open of the test file"
    for e in reads:
        assert e["time"] > first_choice, e
        scoring = "--do_train=false" in e["argv"] and f"--dev_file={test_file}" in e["argv"]
        assert scoring or e["argv"][0].endswith(os.path.join("tasks", "search", "__main__.py")), e
    report = json.load(open(os.path.join(out, "results.json")))
    scored = sorted(t for t in os.listdir(os.path.join(out, "test"))
                    if os.path.isdir(os.path.join(out, "test", t)))
    assert scored == sorted(f"trial_{t}" for t in report["chosen"]["trials"])


@pytest.mark.slow
def test_the_reports_agree_with_the_runs(search):
    out = search[0]
    report = json.load(open(os.path.join(out, "results.json")))
    assert len(report["trials"]) == 8 and report["seeds"] == [12345, 12346]
    for row in report["trials"]:
        assert row["dev"] == read_results(os.path.join(out, "runs", f"trial_{row['trial']}",
                                                       "eval_results.txt"))
        if row["trial"] in report["chosen"]["trials"]:
            test = read_results(os.path.join(out, "test", f"trial_{row['trial']}",
                                             "eval_results.txt"))
            assert row["test"]["test_accuracy"] == test["eval_accuracy"]
        else:
            assert row["test"] is None
    for setting in report["settings"]:
        values = [r["dev"]["eval_accuracy"] for r in report["trials"]
                  if r["trial"] in setting["trials"]]
        assert setting["dev"]["mean"] == pytest.approx(np.mean(values))
        assert setting["dev"]["std"] == pytest.approx(np.std(values, ddof=1))
        assert (setting["dev"]["min"], setting["dev"]["max"]) == (min(values), max(values))
    markdown = open(os.path.join(out, "results.md")).read()
    for row in report["trials"]:
        assert f"| {row['trial']} | " in markdown
    chosen = report["chosen"]
    assert f"--checkpoint_dir {chosen['run_dir']}" in markdown
    assert f"{chosen['dev']['mean']:.4f} ± {chosen['dev']['std']:.4f}" in markdown
    import matplotlib.image
    image = matplotlib.image.imread(os.path.join(out, "dev_scores.png"))
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    # TensorBoard's HParams: one run per trial with its setting and dev scores.
    import tensorflow as tf
    from tensorboard.plugins.hparams import plugin_data_pb2
    for row in report["trials"]:
        folder = os.path.join(out, "tensorboard", f"trial_{row['trial']}")
        hparams, scalars = {}, {}
        for name in os.listdir(folder):
            for event in tf.compat.v1.train.summary_iterator(os.path.join(folder, name)):
                for value in event.summary.value:
                    if value.metadata.plugin_data.plugin_name == "hparams":
                        data = plugin_data_pb2.HParamsPluginData.FromString(
                            value.metadata.plugin_data.content)
                        for key, v in data.session_start_info.hparams.items():
                            hparams[key] = v.string_value or v.number_value
                    elif value.HasField("tensor"):
                        scalars[value.tag] = float(tf.make_ndarray(value.tensor))
        assert hparams == dict(row["setting"], restart=row["restart"])
        assert scalars["eval_accuracy"] == pytest.approx(row["dev"]["eval_accuracy"])


@pytest.mark.slow
def test_another_grid_or_changed_data_is_refused(search, data, capsys):
    from tasks.search.__main__ import main
    out = search[0]
    refused(main, search_argv(data, out, grid="learning_rate=1e-3,1e-4"), capsys,
            [f"--output_dir={out} holds a search over --grid='{GRID}' with --restarts=2, "
             f"not --grid='learning_rate=1e-3,1e-4' with --restarts=2",
             "run that command again to continue it, or choose another --output_dir"], out)
    refused(main, search_argv(data, out, restarts=3), capsys, ["--restarts=3"], out)
    refused(main, search_argv(data, out, flags=family_flags(data) + ["--seed=7"]), capsys,
            ["holds a search with other family flags (now only: --seed=7)"], out)
    train = data / "train.csv"
    text = train.read_text()
    try:
        train.write_text(text + "good film,1\n")
        refused(main, search_argv(data, out), capsys,
                [f"--train_file {train} has changed since the search in {out} started",
                 "put it back as it was, or choose another --output_dir"], out)
    finally:
        train.write_text(text)
    config = data / "ckpt" / "bert_config.json"
    text = config.read_text()
    try:
        config.write_text(text + " ")
        refused(main, search_argv(data, out), capsys,
                [f"--init_checkpoint {data / 'ckpt'} has changed since the search in {out} "
                 f"started"], out)
    finally:
        config.write_text(text)


@pytest.mark.slow
def test_bad_searches_are_refused_before_anything_is_written(data, capsys):
    from tasks.search.__main__ import main
    out = str(data / "never")
    cases = [
        (["--metric=test_accuracy"], [], "--metric=test_accuracy is a score of held-out data"),
        (["--grid=seed=1,2"], [], "--grid: seed is no setting to choose: the restarts vary it"),
        (["--grid=learning_rat=1e-3"], [], "--grid: learning_rat is not a flag of classification"),
        (["--grid=learning_rate=1e-3"], ["--learning_rate=2e-5"],
         "--learning_rate is both a family flag and a --grid axis"),
        ([], ["--do_predict"], "--do_predict: the search sets --output_dir, --do_train"),
        (["--grid=learning_rate=1e-3,-1"], [], "--learning_rate must be a positive number"),
        ([f"--test_file={data / 'dev.csv'}"], [],
         "is also the trials' --dev_file: choosing on it would choose on the test set"),
        ([f"--test_file={data / 'train.csv'}"], [], "is also the trials' --train_file"),
        (["--grid=learning_rate"], [], "--grid: expected NAME=V1,V2,..."),
    ]
    for own, extra, expect in cases:
        argv = ["--task=classification", f"--output_dir={out}",
                f"--test_file={data / 'test.csv'}", *own, "--",
                *family_flags(data), *extra]
        refused(main, argv, capsys, [expect], out)
    assert not os.path.exists(out)


def test_every_family_names_its_dev_score_and_dev_file():
    """Task.main_metric (what the search chooses by, an eval_results.txt name) and
    Task.dev_file_flag (where the test file goes after the choice), per family."""
    from tasks.families import REGISTRY, family_class
    expected = {
        ("classification", "custom", False): ("eval_accuracy", "dev_file"),
        ("classification", "custom", True): ("eval_pearson", "dev_file"),
        ("classification", "mrpc", False): ("eval_f1", None),
        ("classification", "cola", False): ("eval_mcc", None),
        ("classification", "stsb", False): ("eval_pearson", None),
        ("classification", "mnli", False): ("eval_matched_accuracy", None),
        ("ner", None, False): ("eval_f1", "eval_file"),
        ("squad", None, False): ("f1", "predict_file"),
        ("swag", None, False): ("eval_accuracy", "dev_file"),
        ("multilabel", None, False): ("eval_micro_f1", "dev_file"),
    }
    assert {name for name, _, _ in expected} == set(REGISTRY)
    for (name, task_name, regression), (metric, flag) in expected.items():
        task_class = family_class(name)
        extra = {"task_name": task_name, "regression": regression} if task_name else {}
        config = task_class.config_class(output_dir="run", **extra)
        assert task_class().main_metric(config) == (metric, "max"), (name, task_name)
        assert task_class().dev_file_flag(config) == flag, (name, task_name)
