"""The code's shape: library modules never import a command (a module that parses flags),
export/ never imports a fine-tuning command, long files say why they are long, and the
README's Python API example runs as written."""

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("bert_tf", "tasks", "export")
LONG = 500


def modules():
    """{dotted name: path} of every module of the three packages."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found[dotted.removesuffix(".__init__")] = path
    return found


def imported(path):
    """Project modules `path` imports anywhere (function-level imports included)."""
    names = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in names if n.split(".")[0] in PACKAGES}


def parses_flags(path):
    """A command (run as __main__) or a module that builds argparse parsers."""
    source = open(path, encoding="utf-8").read()
    return "__main__" in source or re.search(r"^import argparse", source, re.M) is not None


def test_library_modules_import_no_command():
    found = modules()
    commands = {name for name, path in found.items() if parses_flags(path)}
    assert {"bert_tf.run_pretraining", "tasks.glue", "export.saved_model"} <= commands
    wrong = []
    for name, path in found.items():
        if name in commands or name.startswith("tasks."):
            continue        # commands may run other commands (the quickstart does)
        wrong += [f"{name} imports {m}" for m in sorted(imported(path) & commands)]
    # A task family (what the export command reads) imports no fine-tuning command.
    for name, path in found.items():
        if name.startswith("tasks.families"):
            wrong += [f"{name} imports {m}" for m in sorted(imported(path) & commands)
                      if m.startswith("tasks.")]
    # export's library builds its modules from bert_tf (task models, run directories);
    # the only tasks module it uses is the pure conlleval. The export command finds a
    # run's family (tasks/families/: model class, serving module) and reads no
    # fine-tuning command.
    for name, path in found.items():
        if not name.startswith("export."):
            continue
        for m in sorted(imported(path)):
            if not m.startswith("tasks") or m in ("tasks", "tasks.conlleval"):
                continue
            module = m if m in found else m.rpartition(".")[0]
            if name not in commands or module in commands or module not in found:
                wrong.append(f"{name} imports {m}")
    assert not wrong, wrong


def test_long_files_say_why():
    unexplained = []
    for name, path in modules().items():
        with open(path, encoding="utf-8") as f:
            source = f.read()
        if source.count("\n") > LONG:
            doc = ast.get_docstring(ast.parse(source)) or ""
            if "Why one file" not in doc:
                unexplained.append(f"{name}: {source.count(chr(10))} lines")
    assert not unexplained, unexplained


def test_readme_python_api_example_runs(tmp_path, minilm_dir, monkeypatch):
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    code = re.search(r"## Python API\n\n```python\n(.*?)```", readme, re.S)
    assert code, "README.md: no Python API example"
    os.symlink(minilm_dir, tmp_path / "bert-hf")
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(code.group(1), "README.md", "exec"), scope)
    assert scope["config"]["labels"] == ["negative", "positive"]
    assert type(scope["model"]).__name__ == "BertClassifier"
    assert (tmp_path / "classifier.keras").exists()


@pytest.mark.parametrize("name", ["BertConfig", "BertTokenizer", "BertPacker", "BertEncoder",
                                  "BertPretrainer", "BertClassifier", "BertMultipleChoice",
                                  "BertTokenClassifier", "BertSpanLabeler", "load_encoder",
                                  "load_pretrainer", "load_task_model", "save_task_model"])
def test_public_names_document_args_and_an_example(name):
    import bert_tf
    doc = getattr(bert_tf, name).__doc__ or ""
    assert "Args:" in doc, f"{name}: no Args section"
    assert ">>>" in doc or "Example" in doc, f"{name}: no example"
