#!/usr/bin/env bash
# Setup step: Open MPI (mpirun, the mpirun launcher's tests and mpi4py's) and Horovod (MPI + Gloo) in the main
# environment, from the cached wheel when there is one.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/apt.sh
apt_install_missing openmpi-bin libopenmpi-dev cmake g++
bash docker/build_horovod.sh "$MAIN_VENV"
