"""requirements.txt says the truth: every third-party module that bert_tf/, tasks/ and
export/ import is declared there, and nothing is declared that they do not use.

An import inside `try: ... except ImportError` is optional (the code says what to install
when it is missing) and is not required to be declared.
"""

import ast
import importlib.metadata
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNTIME_PACKAGES = ("bert_tf", "tasks", "export")
# Declared runtime dependencies that no module imports by name, and why they are needed.
USED_WITHOUT_IMPORT = {
    "tensorboard": "tf.summary (pretraining and fine-tuning logs) is provided by it",
}
# Files that import a Keras backend's own framework only on the branch where Keras runs on
# it (keras.backend.backend() == its name), so it is installed whenever that line runs.
BACKEND_FRAMEWORK_IMPORTS = {
    os.path.join("bert_tf", "models", "layers", "fused_attention.py"): {"jax", "torch"},
}


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(requirements_file):
    """Canonical distribution names of a requirements file."""
    names = set()
    with open(requirements_file, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.add(canonical(re.match(r"[A-Za-z0-9_.\-]+", line).group(0)))
    return names


def _guards_import_error(node):
    for handler in node.handlers:
        names = []
        if handler.type is None:
            return True
        for t in handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]:
            names.append(getattr(t, "id", getattr(t, "attr", "")))
        if {"ImportError", "ModuleNotFoundError", "Exception"} & set(names):
            return True
    return False


def imports_of(path):
    """[(line, top-level module, optional)] of every absolute import in a file, at any
    depth (imports inside functions count: they run when the function does)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = []

    def visit(node, optional):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name.split(".")[0], optional) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0], optional))
        if isinstance(node, ast.Try):
            guarded = optional or _guards_import_error(node)
            for child in node.body:
                visit(child, guarded)
            for child in node.handlers + node.orelse + node.finalbody:
                visit(child, optional)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, optional)

    visit(tree, False)
    return found


def python_files(root, packages):
    for package in packages:
        for directory, _, files in os.walk(os.path.join(root, package)):
            for name in sorted(files):
                if name.endswith(".py"):
                    yield os.path.join(directory, name)


def undeclared_imports(root, packages, requirements, distributions=None):
    """One message per required third-party import whose distribution is not declared.
    Returns (messages, {distribution: [file:line, ...]} of the declared ones used)."""
    distributions = distributions or importlib.metadata.packages_distributions()
    first_party = set(packages)
    used, messages = {}, []
    for path in python_files(root, packages):
        rel = os.path.relpath(path, root)
        for line, module, optional in imports_of(path):
            if module in first_party or module in sys.stdlib_module_names or optional \
                    or module in BACKEND_FRAMEWORK_IMPORTS.get(rel, ()):
                continue
            dists = {canonical(d) for d in distributions.get(module, ())}
            hit = dists & requirements
            if hit:
                for d in hit:
                    used.setdefault(d, []).append(f"{rel}:{line}")
            else:
                where = f"distribution {', '.join(sorted(dists))}" if dists else \
                    "no installed distribution provides it"
                messages.append(f"{rel}:{line} imports {module!r} ({where}), which "
                                f"requirements.txt does not declare")
    return messages, used


def test_every_runtime_import_is_declared():
    requirements = declared(os.path.join(ROOT, "requirements.txt"))
    messages, _ = undeclared_imports(ROOT, RUNTIME_PACKAGES, requirements)
    assert not messages, "\n".join(messages)


def test_nothing_declared_that_the_packages_do_not_use():
    requirements = declared(os.path.join(ROOT, "requirements.txt"))
    _, used = undeclared_imports(ROOT, RUNTIME_PACKAGES, requirements)
    unused = requirements - set(used) - set(USED_WITHOUT_IMPORT)
    assert not unused, f"declared in requirements.txt but imported by none of " \
                       f"{RUNTIME_PACKAGES}: {sorted(unused)} (move them to an extra)"
    # The known ones: the library reads safetensors and numpy itself.
    assert {"safetensors", "numpy", "tensorflow", "tensorflow-text", "keras"} <= set(used)


def test_the_installed_package_declares_requirements_txt():
    """setup.py's install_requires is requirements.txt: what pip installs with no extra."""
    requires = importlib.metadata.requires("bert-tf") or []
    runtime = {canonical(re.match(r"[A-Za-z0-9_.\-]+", r).group(0))
               for r in requires if "extra ==" not in r}
    assert runtime == declared(os.path.join(ROOT, "requirements.txt"))


@pytest.fixture()
def fake_project(tmp_path):
    """A package `pkg` whose function imports safetensors lazily, another import guarded
    by `except ImportError`, and one of a module nothing provides."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import os\nimport numpy as np\nfrom pkg import io\n")
    (pkg / "io.py").write_text(
        "def save(x):\n"
        "    from safetensors.numpy import save_file\n"
        "    return save_file(x, 'x')\n"
        "\n"
        "def load(path):\n"
        "    try:\n"
        "        import torch\n"
        "    except ImportError:\n"
        "        raise ImportError('reading .bin needs torch') from None\n"
        "    return torch.load(path)\n")
    (pkg / "extra.py").write_text("import not_a_real_module_xyz\n")
    return tmp_path


def test_an_undeclared_import_is_caught(fake_project):
    distributions = {"numpy": ["numpy"], "safetensors": ["safetensors"], "torch": ["torch"]}
    messages, used = undeclared_imports(str(fake_project), ("pkg",), {"numpy"},
                                        distributions)
    assert messages == [
        "pkg/extra.py:1 imports 'not_a_real_module_xyz' (no installed distribution "
        "provides it), which requirements.txt does not declare",
        "pkg/io.py:2 imports 'safetensors' (distribution safetensors), which "
        "requirements.txt does not declare",
    ]
    assert used == {"numpy": ["pkg/__init__.py:2"]}
    # Declaring it (any spelling of the name) clears it; torch stays optional.
    messages, _ = undeclared_imports(str(fake_project), ("pkg",),
                                     {"numpy", "safetensors", "not-a-real-module-xyz"},
                                     dict(distributions,
                                          not_a_real_module_xyz=["Not_A.Real-Module_xyz"]))
    assert messages == []


def test_requirement_names_are_canonical(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("# comment\nTensorFlow_Text==2.21.1\nkeras>=3.10  # why\n\nfoo.bar[x]\n")
    assert declared(path) == {"tensorflow-text", "keras", "foo-bar"}


def test_started_processes_see_a_runtime_install():
    """A process the suite starts finds neither JAX nor scikit-learn (test-only packages:
    tests/runtime_site/), unless it runs Keras on JAX; both stay importable here."""
    import subprocess
    code = ("import importlib.util as u; "
            "print([u.find_spec(n) is None for n in ('jax', 'sklearn', 'numpy')])")
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True)
    assert plain.stdout.split() == ["[True,", "True,", "False]"], plain.stdout
    on_jax = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, env=dict(os.environ, KERAS_BACKEND="jax"))
    assert on_jax.stdout.split() == ["[False,", "False,", "False]"], on_jax.stdout
    import importlib.util
    assert importlib.util.find_spec("sklearn") is not None
