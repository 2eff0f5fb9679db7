#!/usr/bin/env bash
# Builds Horovod 0.28.1 (MPI + Gloo, PyTorch only) against the torch installed in a venv, caches the wheel
# keyed by (horovod, torch, python) versions, installs it and verifies it with a 2-rank allreduce.
#
# Usage: docker/build_horovod.sh [VENV]       (default: $MAIN_VENV, else ./.venv)
# Env:   SPARKRUNNER_CACHE (wheel cache root, default ~/.cache/sparkrunner), HOROVOD_VERSION (default 0.28.1),
#        HOROVOD_NCCL=1 for GPU images: NCCL GPU operations, with CUDA from HOROVOD_CUDA_HOME (default
#        /usr/local/cuda) and NCCL from the nvidia-nccl wheel that CUDA torch brings along
#
# Why the wrapper: Horovod 0.28.1's CMake pins C++14 while PyTorch >= 2.1 headers need C++17, so the compiler
# it calls is a small wrapper that rewrites -std=c++14 into -std=c++17. Debian's cmake is used because pip's
# cmake 4.x rejects the bundled gloo's minimum version.
set -euo pipefail
VENV=${1:-${MAIN_VENV:-$(pwd)/.venv}}
PY="$VENV/bin/python"
CACHE=${SPARKRUNNER_CACHE:-$HOME/.cache/sparkrunner}
HOROVOD_VERSION=${HOROVOD_VERSION:-0.28.1}
fail() { printf 'build_horovod: cannot build Horovod %s: %s\n' "$HOROVOD_VERSION" "$*" >&2; exit 1; }

[ -x "$PY" ] || fail "no Python at $PY (pass the venv as the first argument)"
TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null) \
  || fail "torch is not importable in $VENV; install torch first"
PY_TAG=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
WHEEL_DIR="$CACHE/wheels/horovod-$HOROVOD_VERSION-torch-$TORCH_VERSION-$PY_TAG"
GPU_ENV=(HOROVOD_GPU_OPERATIONS=)
if [ "${HOROVOD_NCCL:-}" = 1 ]; then
  WHEEL_DIR="$WHEEL_DIR-nccl"
  NCCL_HOME=$("$PY" -c 'import os, nvidia.nccl as n; print(os.path.dirname(n.__file__) if n.__file__ else n.__path__[0])' 2>/dev/null) \
    || fail "HOROVOD_NCCL=1 but torch brought no nvidia-nccl wheel: install a CUDA torch first"
  GPU_ENV=(HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_CUDA_HOME="${HOROVOD_CUDA_HOME:-/usr/local/cuda}"
           HOROVOD_NCCL_INCLUDE="$NCCL_HOME/include" HOROVOD_NCCL_LIB="$NCCL_HOME/lib" HOROVOD_NCCL_LINK=SHARED)
fi

verify() {
  "$PY" - <<'PY' || return 1
import horovod.torch as hvd
assert hvd.mpi_built() and hvd.gloo_built(), f"mpi_built={hvd.mpi_built()} gloo_built={hvd.gloo_built()}"
PY
  local root=(); [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
  timeout 120 mpirun "${root[@]}" --oversubscribe -np 2 -x PATH "$PY" -c '
import torch, horovod.torch as hvd
hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
assert hvd.size() == 2 and total.item() == 3.0, (hvd.size(), total)
' || return 1
  echo "build_horovod: horovod $HOROVOD_VERSION verified (MPI + Gloo, 2-rank allreduce) in $VENV"
}

installed=$("$PY" -c 'import importlib.metadata as m; print(m.version("horovod"))' 2>/dev/null || true)
if [ "$installed" = "$HOROVOD_VERSION" ] && verify; then exit 0; fi

if ! ls "$WHEEL_DIR"/horovod-*.whl >/dev/null 2>&1; then
  command -v mpicxx >/dev/null || fail "mpicxx not found: install libopenmpi-dev (Debian) for the MPI controller"
  CMAKE=/usr/bin/cmake
  [ -x "$CMAKE" ] || fail "Debian's cmake is missing (apt-get install cmake); pip's cmake 4.x cannot build gloo"
  command -v g++ >/dev/null || fail "g++ not found (apt-get install g++)"
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  mkdir -p "$WORK/bin"
  cat > "$WORK/bin/cxx17" <<'SH'
#!/usr/bin/env bash
# Rewrites -std=c++14 into -std=c++17 (PyTorch headers need C++17), then calls g++.
args=()
for a in "$@"; do if [ "$a" = "-std=c++14" ]; then args+=("-std=c++17"); else args+=("$a"); fi; done
exec g++ "${args[@]}"
SH
  chmod +x "$WORK/bin/cxx17"
  ln -s "$CMAKE" "$WORK/bin/cmake"   # first on PATH: shadows a pip-installed cmake in the venv
  "$PY" -m pip install -q wheel setuptools packaging cloudpickle psutil pyyaml
  echo "build_horovod: building horovod $HOROVOD_VERSION for torch $TORCH_VERSION ($PY_TAG); takes ~6 min on 2 cores"
  start=$(date +%s)
  PATH="$WORK/bin:$VENV/bin:$PATH" CXX="$WORK/bin/cxx17" CC=gcc MAKEFLAGS=-j2 \
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 env "${GPU_ENV[@]}" \
    "$PY" -m pip wheel --no-deps --no-build-isolation --no-binary horovod -w "$WORK/wheel" \
    "horovod==$HOROVOD_VERSION" > "$WORK/build.log" 2>&1 \
    || { tail -40 "$WORK/build.log" >&2; fail "the compile failed (last lines above)"; }
  mkdir -p "$WHEEL_DIR"
  cp "$WORK"/wheel/horovod-*.whl "$WHEEL_DIR/"
  echo "build_horovod: built in $(( $(date +%s) - start )) s; cached in $WHEEL_DIR"
fi

"$PY" -m pip install -q --force-reinstall --no-deps "$WHEEL_DIR"/horovod-*.whl
"$PY" -m pip install -q cloudpickle psutil pyyaml packaging
verify || fail "the wheel installed but the 2-rank allreduce check failed"
