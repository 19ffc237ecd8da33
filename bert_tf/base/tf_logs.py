"""Quiet TensorFlow start-up, unless the user set TF_CPP_MIN_LOG_LEVEL=0.

`import tensorflow` loads two shared libraries, and each writes its start-up lines to
file descriptor 2 from C++ static initialisers ("All log messages before
absl::InitializeLog() is called...", the oneDNN and CUDA-stub notices), before any log
level applies; on a machine without an NVIDIA driver the first op adds "failed call to
cuInit", and with oneDNN's kernels on the first int64 Transpose in a graph adds a
once-per-process "oneDNN supports DT_INT64 only on platforms with AVX-512" notice. None
of it is actionable, and every command printed it twice.

`install()` (called by `import bert_tf`) sets TF_CPP_MIN_LOG_LEVEL=2 where the user set
no level (TensorFlow's C++ warnings and info off, errors kept; a level the user set is
kept, and 0 turns all of this off) and puts a one-shot import hook in front of the
`tensorflow` package: its first import runs with descriptor 2 pointed at /dev/null, and
where no NVIDIA driver exists the device probe runs there too. Python exceptions raised by
the import are unaffected (they are objects, printed after the descriptor is restored).
Nothing is imported until a module imports tensorflow itself, so commands that never need
it (`--help`, create_pretraining_data's workers) stay fast.
"""

import importlib.abc
import importlib.util
import json
import os
import sys


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        with _stderr_to_devnull():
            self.loader.exec_module(module)
            if not os.path.exists("/proc/driver/nvidia"):
                module.config.list_physical_devices()
            if _configures_devices():
                _deferred.append(module)    # spent by spend_int64_notice()
            else:
                _spend_int64_notice(module)

    def __getattr__(self, name):   # get_code, get_source, is_package... of the real one
        return getattr(self.loader, name)


def _spend_int64_notice(tf):
    """With oneDNN's kernels on (bert_tf turns them on), the first graph op on int64
    that oneDNN could rewrite (a Transpose) logs, once per process and at ERROR level,
    "oneDNN supports DT_INT64 only on platforms with AVX-512. Falling back to the default
    Eigen-based implementation": a notice, not an error, and it landed before a
    command's own one-line `error:`. One such op here, while descriptor 2 is muted,
    spends it (about 20 ms)."""
    try:
        tf.function(tf.transpose)(tf.zeros([2, 3], tf.int64))   # a 1x1 one is folded away
    except Exception:  # noqa: BLE001  a quieter start-up is not worth a failed import
        pass


_deferred = []


def _flag(name):
    """The value of --name in this command's arguments, or None."""
    args = sys.argv[1:]
    for i, arg in enumerate(args):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}" and i + 1 < len(args):
            return args[i + 1]
    return None


def _configures_devices():
    """Whether this command will set up its devices after import, which TensorFlow
    refuses once an op has run, so the notice's op must wait (spend_int64_notice, called
    by training/distribution.py once they are set): the CPU split into logical
    devices (--cpu_devices N > 1), a multi-worker cluster (TF_CONFIG, whose collective
    ops are configured by the strategy) or a TPU."""
    cpus = (_flag("cpu_devices") or "").strip()
    if cpus.isdigit() and int(cpus) > 1:
        return True
    if _flag("tpu") or _flag("strategy") in ("multi_worker", "tpu"):
        return True
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster") or {}
    except (ValueError, AttributeError):
        return False
    return sum(len(cluster.get(job) or []) for job in ("chief", "worker")) > 1


def spend_int64_notice():
    """The int64 notice spent with descriptor 2 muted, once the logical devices are set
    (training/distribution.py's create_strategy calls it); nothing when it was spent at
    import."""
    while _deferred:
        module = _deferred.pop()
        with _stderr_to_devnull():
            _spend_int64_notice(module)


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


class _stderr_to_devnull:
    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)


def install():
    """Quiet TensorFlow's start-up lines unless TF_CPP_MIN_LOG_LEVEL=0 asks for every
    line (or tensorflow is already imported). A level the user set is kept (2 where none
    is): the start-up lines ignore it, so they are muted at every level but 0."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "").strip() == "0" or \
            "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not any(isinstance(f, _QuietTensorFlowImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietTensorFlowImport())


def tf_error_text(error):
    """An error TensorFlow raised, as one line: white space folded, its op's
    `{{function_node ...}}` prefix and `[Op:Name]` suffix removed."""
    import re
    text = " ".join(str(error).split())
    text = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", text)
    return re.sub(r"\s*\[Op:\w+\]( name: \S*)?$", "", text)
