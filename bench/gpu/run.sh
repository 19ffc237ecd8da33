#!/usr/bin/env bash
# The GPU benchmark in one command (bench/gpu/README.md).
#   bash bench/gpu/run.sh [--cpu] [BUDGET_SECONDS [--only SIDE:GROUP,...]]
# On the GPU machine: installs the wheels bench/gpu/fetch_wheels.sh put in .gpu_kit/
# (what the machine's image lacks: keras and its two small dependencies), then runs every
# group within the budget (default 520 s) and writes results.{jsonl,json,md} to $OUT
# (else runs/gpu_kit). --cpu: the CPU mode (a tiny model, a few steps, JAX on the CPU with
# XLA's fast-compile settings), in the environment at hand ($PYTHON, else python3); CI runs
# it. --only: a follow-up call for the groups a first call had no time for (kit.py --help).
set -uo pipefail
cd "$(dirname "$0")/../.."
mode=gpu
if [ "${1:-}" = --cpu ]; then mode=cpu; shift; fi
budget=${1:-520}
[ $# -gt 0 ] && shift
out=${OUT:-runs/gpu_kit}
if [ "$mode" = gpu ]; then
    if ! ls .gpu_kit/wheels/*.whl >/dev/null 2>&1; then
        echo "error: .gpu_kit/wheels/ has no wheels: run bash bench/gpu/fetch_wheels.sh first and carry .gpu_kit" >&2
        exit 2
    fi
    "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/gpu_kit_site .gpu_kit/wheels/*.whl || exit 1
    export PYTHONPATH=/tmp/gpu_kit_site${PYTHONPATH:+:$PYTHONPATH}
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
else
    export JAX_PLATFORMS=cpu CUDA_VISIBLE_DEVICES=""
    # The CPU mode checks that every group runs and agrees; its speeds are not kept. XLA's
    # CPU compiles dominate it, and these settings (tests/models/test_backends.py uses them too)
    # halve its time (116 -> 46 CPU-s) with the same losses and logits. A caller's own
    # XLA_FLAGS win.
    export XLA_FLAGS=${XLA_FLAGS:-"--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false --xla_llvm_disable_expensive_passes=true"}
fi
exec "${PYTHON:-python3}" bench/gpu/kit.py --mode "$mode" --out "$out" --budget "$budget" "$@"
