#!/usr/bin/env bash
# Sets up everything sparkrunner needs on a fresh Debian machine, idempotently:
#   Debian packages (Java, OpenMPI, iproute2), the main virtual environment, the Horovod wheel,
#   and the pinned Petastorm environment. Heavy artifacts live in a cache outside the clone
#   ($SPARKRUNNER_CACHE, default ~/.cache/sparkrunner) so reruns and fresh clones take seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${SPARKRUNNER_CACHE:-$HOME/.cache/sparkrunner}
PYTHON=${PYTHON:-python3}
mkdir -p "$CACHE"
say() { printf '\n== setup: %s\n' "$*"; }

apt_install_missing() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing Debian packages: ${missing[*]}"
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

java_pkg=""
command -v java >/dev/null 2>&1 || java_pkg="openjdk-17-jre-headless"
apt_install_missing $java_pkg openmpi-bin libopenmpi-dev iproute2 procps

# The main environment: rebuilt only when requirements/main.txt or the interpreter changes.
# shellcheck source=lib/venv.sh
source scripts/lib/venv.sh
MAIN_VENV="$CACHE/venv-main"
say "main environment: $MAIN_VENV"
PYTHON=$PYTHON ensure_venv "$MAIN_VENV" requirements/main.txt
ln -sfn "$MAIN_VENV" .venv

for extra in scripts/setup.d/*.sh; do
  [ -e "$extra" ] || continue
  say "running $extra"
  SPARKRUNNER_CACHE="$CACHE" MAIN_VENV="$MAIN_VENV" PYTHON="$PYTHON" bash "$extra"
done
say "ready: $(.venv/bin/python -c 'import sparkrunner, pyspark, torch; print("sparkrunner", sparkrunner.__version__, "pyspark", pyspark.__version__, "torch", torch.__version__)')"
