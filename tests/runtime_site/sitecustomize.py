"""Run at the start of every Python process the suite starts (tests/conftest.py puts this
folder first on PYTHONPATH for them): JAX and scikit-learn, which only the test extra
installs, are hidden from it as a runtime-only install (requirements.txt) lacks them.
TensorFlow imports JAX when it is there (tf.lite) and Keras scikit-learn (its sklearn
wrappers): ~3 CPU-s of each command's start on the 2-core CI machine, for modules no
command uses. `import jax` raises ImportError and `importlib.util.find_spec` says None,
as when they are not installed. A process that runs Keras on JAX (KERAS_BACKEND=jax:
tests/backend_worker.py, the GPU kit) keeps both."""

import os
import sys

if os.environ.get("KERAS_BACKEND") != "jax":
    for _name in ("jax", "jaxlib", "sklearn"):
        sys.modules.setdefault(_name, None)
