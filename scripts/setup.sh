#!/usr/bin/env bash
# Sets up everything sparkrunner needs on a fresh Debian machine, idempotently:
#   Debian packages (Java, OpenMPI, iproute2), the main virtual environment, the Horovod wheel,
#   and the pinned Petastorm environment. Heavy artifacts live in a cache outside the clone
#   ($SPARKRUNNER_CACHE, default ~/.cache/sparkrunner) so reruns and fresh clones take seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
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
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }
MAIN_STAMP=$(stamp_of requirements/main.txt <("$PYTHON" -VV))
MAIN_VENV="$CACHE/venv-main"
if [ "$(cat "$MAIN_VENV/.stamp" 2>/dev/null)" != "$MAIN_STAMP" ]; then
  say "creating the main environment in $MAIN_VENV"
  rm -rf "$MAIN_VENV"
  "$PYTHON" -m venv "$MAIN_VENV"
  "$MAIN_VENV/bin/pip" install -q --upgrade pip
  "$MAIN_VENV/bin/pip" install -q -r requirements/main.txt
  echo "$MAIN_STAMP" > "$MAIN_VENV/.stamp"
fi
"$MAIN_VENV/bin/pip" install -q --no-deps --no-build-isolation -e "$ROOT"
ln -sfn "$MAIN_VENV" .venv

for extra in scripts/setup.d/*.sh; do
  [ -e "$extra" ] || continue
  say "running $extra"
  SPARKRUNNER_CACHE="$CACHE" MAIN_VENV="$MAIN_VENV" PYTHON="$PYTHON" bash "$extra"
done
say "ready: $(.venv/bin/python -c 'import sparkrunner, pyspark, torch; print("sparkrunner", sparkrunner.__version__, "pyspark", pyspark.__version__, "torch", torch.__version__)')"
