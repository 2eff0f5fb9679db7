#!/usr/bin/env bash
# Setup step: Horovod (MPI + Gloo) in the main environment, from the cached wheel when there is one.
set -euo pipefail
cd "$(dirname "$0")/../.."
missing=()
for pkg in cmake g++; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
bash docker/build_horovod.sh "$MAIN_VENV"
