"""The code's shape: every module imports and stands on a floor of docs/architecture.md,
importing none above its own; library modules never import a command (a module that
parses flags), export/ never imports a fine-tuning command, no import circles, no private name (`_x`) used across modules, long files say why they are long,
and the README's Python API example runs as written."""

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
    """A command (run as __main__: a package's __main__.py, or a module with a
    `if __name__ == "__main__":` block) or a module that builds argparse parsers."""
    source = open(path, encoding="utf-8").read()
    return os.path.basename(path) == "__main__.py" or re.search(
        r"^(if __name__ == .__main__.:|import argparse)", source, re.M) is not None


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
    # (A family's own command, a package's __main__.py in its folder, is a command.)
    for name, path in found.items():
        if name.startswith("tasks.families") and name not in commands:
            wrong += [f"{name} imports {m}" for m in sorted(imported(path) & commands)
                      if m.startswith("tasks.")]
    # export's library builds its modules from bert_tf (task models, run directories) and
    # uses no tasks module. The export command finds a run's family (tasks/families/:
    # model class, serving module) and reads no fine-tuning command.
    for name, path in found.items():
        if not name.startswith("export."):
            continue
        for m in sorted(imported(path)):
            if not m.startswith("tasks") or m == "tasks":
                continue
            module = m if m in found else m.rpartition(".")[0]
            if name not in commands or module in commands or module not in found:
                wrong.append(f"{name} imports {m}")
    assert not wrong, wrong


def dependencies(found):
    """{module: project modules it imports}, function-level imports included. `from P
    import m` of a submodule m depends on P.m alone (P is a package whose __init__ only
    names things)."""
    edges = {}
    for name, path in found.items():
        targets = set()
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name in found)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                submodules = {f"{node.module}.{a.name}" for a in node.names} & set(found)
                targets |= submodules
                if len(submodules) < len(node.names) and node.module in found:
                    targets.add(node.module)
        edges[name] = targets - {name}
    return edges


def circles(edges):
    """Every strongly connected group of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def floors():
    """[(floor, [module prefixes])] of docs/architecture.md's floor table, top first."""
    text = open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8").read()
    table = text.split("## Floors", 1)[1].split("\n\n", 3)[2]
    rows = [line.split("|") for line in table.splitlines()[2:]]
    return [(row[1].strip(), re.findall(r"`([\w.]+)`", row[2])) for row in rows]


def floor_of(module, table):
    """The index (0 = top) of the floor whose longest prefix names `module`, or None."""
    best = None
    for index, (_, prefixes) in enumerate(table):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and \
                    (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return None if best is None else best[0]


def test_every_module_is_on_a_floor_and_imports_none_above_its_own():
    table = floors()
    assert [name for name, _ in table] == ["commands", "tasks", "export", "training",
                                           "checkpoints", "models", "text", "base"]
    assert floor_of("bert_tf.models.layers.transformer", table) == 5
    assert floor_of("tasks.families.multilabel.__main__", table) == 0
    found = modules()
    homeless = [m for m in found if m not in PACKAGES and floor_of(m, table) is None]
    assert not homeless, f"on no floor of docs/architecture.md: {homeless}"
    named = [p for _, prefixes in table for p in prefixes]
    assert [p for p in named if not any(m == p or m.startswith(p + ".") for m in found)] \
        == [], "docs/architecture.md names a module that does not exist"
    upward = [f"{m} ({table[floor_of(m, table)][0]}) imports {t} "
              f"({table[floor_of(t, table)][0]})"
              for m, targets in dependencies(found).items() if m not in PACKAGES
              for t in sorted(targets) if t not in PACKAGES
              and floor_of(t, table) < floor_of(m, table)]
    assert not upward, upward


def test_no_import_circles():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles(dependencies(modules())) == []


def private_uses(name, path, found):
    """`from M import _x` and `M._x` (M bound to another project module) in one module."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    aliases, uses = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in found and a.asname:
                    aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                if f"{node.module}.{a.name}" in found:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                elif node.module in found and node.module != name and \
                        a.name.startswith("_") and not a.name.startswith("__"):
                    uses.append(f"{name} imports {node.module}.{a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.attr.startswith("_") and not node.attr.startswith("__"):
            module = aliases.get(node.value.id)
            if module and module != name:
                uses.append(f"{name} uses {module}.{node.attr}")
    return uses


def test_no_private_name_is_used_across_modules(tmp_path):
    found = modules()
    probe = tmp_path / "probe.py"
    probe.write_text("from bert_tf.base.cli import _x\nfrom bert_tf.base import files\nfiles._y()\n")
    assert private_uses("probe", str(probe), found) == [
        "probe imports bert_tf.base.cli._x", "probe uses bert_tf.base.files._y"]
    wrong = [use for name, path in found.items() for use in private_uses(name, path, found)]
    assert not wrong, wrong


@pytest.mark.fast
def test_every_module_imports():
    """Each module of the three packages imports (the fast tier's floor: a module no fast
    test reaches is still compiled and its imports resolved)."""
    import importlib
    failed = []
    for name in sorted(modules()):
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001
            failed.append(f"{name}: {type(e).__name__}: {e}")
    assert not failed, failed


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


def test_old_module_names_are_gone():
    """The modules' names are their folders' (no aliases of earlier layouts): the old flat
    names and the tasks/*_data aliases do not import, and the checkpoints floor gives its
    submodules only (the dispatcher's names are `bert_tf.<name>` or `checkpoints.dispatch`)."""
    import importlib

    for old in ("bert_tf.encoder", "bert_tf.pretraining", "bert_tf.files", "tasks.glue_data",
                "tasks.squad_data", "tasks.squad_metrics", "tasks.families.glue",
                "export.text_offsets", "bert_tf.data.tokenizer"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
    from bert_tf import checkpoints
    with pytest.raises(AttributeError):
        checkpoints.load_encoder  # noqa: B018


def imported_test_modules(path):
    """The test modules (`tests...test_*`) that the file at `path` imports anywhere."""
    found = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found += [n for n in names if n.split(".")[0] == "tests"
                  and n.split(".")[-1].startswith("test_")]
    return found


def test_imported_test_modules_sees_every_form(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nfrom tests import testing\nfrom tests.text import test_words\n"
                     "def f():\n    from tests.families.ner.test_ner import make\n")
    assert imported_test_modules(str(probe)) == [
        "tests.text.test_words", "tests.families.ner.test_ner"]


def test_no_test_module_imports_another():
    """What several test files share is in a helpers module (tests/testing.py,
    tests/task_runs.py, ...) or a conftest.py fixture, never taken from another test file:
    a test file can be moved, split or deleted without breaking another (bench/ too)."""
    wrong = []
    for top in ("tests", "bench"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    wrong += [f"{os.path.relpath(path, ROOT)} imports {m}"
                              for m in imported_test_modules(path)]
    assert not wrong, wrong


@pytest.mark.parametrize("group", ["task runs", "bad inputs"])
def test_the_shared_fixtures_files_are_the_files_that_use_them(group, request):
    """conftest.py's SHARED groups, each of whose files the scheduler keeps on one xdist
    worker so that the group's session fixtures are built once: a group's files are
    exactly the test files whose tests use its fixtures (checked where the run collected
    every one of those files, whatever it selected from them)."""
    from tests.conftest import DESELECTED, SHARED
    assert sorted(SHARED) == ["bad inputs", "task runs"]
    fixtures, files = SHARED[group]
    items = list(request.session.items) + DESELECTED
    if not set(files) <= {item.nodeid.split("::")[0] for item in items}:
        pytest.skip(f"checked on a run that collects every file of the {group} group")
    using = {item.nodeid.split("::")[0] for item in items
             if set(fixtures) & set(getattr(item, "fixturenames", ()))}
    assert using == set(files), (sorted(using), files)


def test_collecting_the_files_imports_no_library_their_tests_use_only_sometimes():
    """torch, transformers and snownlp are imported by the tests that use them: pytest's
    probes of a file's objects while collecting it (`__wrapped__`, `_mock_name`) leave a
    `testing.lazy_module` unimported, so no run, the fast tier's included, starts by
    paying for them."""
    from tests.conftest import IMPORTED_BY_COLLECTION
    assert IMPORTED_BY_COLLECTION == []


def test_every_collected_test_has_a_recorded_duration(request):
    """tests/durations.json holds a time for every test this run collected: the fast tier
    (conftest.py) is chosen from those times, and a test without one would land in it
    unmeasured. A whole run (`python -m pytest -q`) checks the whole suite."""
    from tests.conftest import recorded_durations
    if request.config.getoption("record_durations"):
        pytest.skip("--record-durations: this run records every test it runs")
    recorded = recorded_durations()
    missing = [item.nodeid for item in request.session.items if item.nodeid not in recorded]
    assert not missing, (
        f"{len(missing)} collected tests have no time in tests/durations.json "
        f"(the fast tier is chosen from it): {missing[:20]}. Record them with a whole run, "
        "`python -m pytest -q --record-durations` (or with only their files named after it: "
        "the tests it does not run keep their times), and commit tests/durations.json.")


def test_recorded_durations_name_no_test_that_is_gone(request):
    """Every test timed in tests/durations.json still exists: the times add up to the
    suite's, which sets the fast tier's limit (conftest.py's FAST_SHARE), and a renamed or
    deleted test's time would stay there unseen. Checked where the run collected every
    test file."""
    from tests.conftest import DESELECTED, recorded_durations
    collected = {item.nodeid for item in list(request.session.items) + DESELECTED}
    files = {os.path.relpath(os.path.join(folder, name), ROOT)
             for folder, _, names in os.walk(os.path.join(ROOT, "tests"))
             for name in names if name.startswith("test_") and name.endswith(".py")}
    if not files <= {nodeid.split("::")[0] for nodeid in collected}:
        pytest.skip("checked on a run that collects every test file")
    gone = sorted(set(recorded_durations()) - collected)
    assert not gone, (
        f"tests/durations.json times {len(gone)} tests that are gone: {gone[:20]}. "
        "Delete their lines from it.")
