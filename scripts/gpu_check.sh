#!/usr/bin/env bash
# A real GPU check: a barrier stage on local-cluster with an nvidia-smi based GPU discovery script and
# spark.task.resource.gpu.amount=1 runs torch DDP over NCCL and a TensorFlow MultiWorkerMirroredStrategy fit
# on the GPU; each rank must see exactly the GPU Spark assigned to its task. Skipped (exit 0) without a GPU.
#   bash scripts/gpu_check.sh        (after scripts/setup.sh; needs CUDA builds of torch and TensorFlow)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "gpu_check: SKIPPED - no NVIDIA GPU here (nvidia-smi is missing or lists no GPU)"
    exit 0
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TF_USE_LEGACY_KERAS=1
exec .venv/bin/python scripts/gpu_check.py
