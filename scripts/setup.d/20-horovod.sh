#!/usr/bin/env bash
# Setup step: Horovod (MPI + Gloo) in the main environment, from the cached wheel when there is one.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/apt.sh
apt_install_missing cmake g++
bash docker/build_horovod.sh "$MAIN_VENV"
