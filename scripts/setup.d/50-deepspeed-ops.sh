#!/usr/bin/env bash
# DeepSpeed's CPU accelerator compiles its shared-memory collective op (deepspeed_shm_comm) with torch's JIT
# the first time a rank calls deepspeed.initialize: ~2 CPU-minutes, during which every rank waits on torch's
# build lock. Build it once here, into torch's extension cache (~/.cache/torch_extensions), so the DeepSpeed
# tests (tests/frameworks/test_deepspeed.py) start at once, from any clone. Needs the main environment (setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
"$MAIN_VENV/bin/python" - <<'PY'  # by its cached path: scripts/run_tests.sh runs the tests through it
from deepspeed.accelerator import get_accelerator

builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
if builder is not None:
    builder.load()
    print("deepspeed: shared-memory comm op built for", get_accelerator().device_name())
PY
