#!/usr/bin/env bash
# Sets up what sparkrunner needs on a fresh Debian machine, idempotently:
#   bash scripts/setup.sh --main   Java and the main virtual environment: what the demo (`make demo`) runs on
#   bash scripts/setup.sh          that, then the test toolchain (scripts/setup.d: OpenMPI and the Horovod wheel,
#                                  the Petastorm and Spark 3.5 environments, buildah, Chromium, the DeepSpeed op)
# Heavy artifacts live in a cache outside the clone ($SPARKRUNNER_CACHE, default ~/.cache/sparkrunner) so reruns
# and fresh clones take seconds.
set -euo pipefail
MAIN_ONLY=0
[ "${1:-}" = --main ] && MAIN_ONLY=1
cd "$(dirname "$0")/.."
CACHE=${SPARKRUNNER_CACHE:-$HOME/.cache/sparkrunner}
PYTHON=${PYTHON:-python3}
mkdir -p "$CACHE"
say() { printf '\n== setup: %s\n' "$*"; }

# shellcheck source=lib/apt.sh
source scripts/lib/apt.sh
java_pkg=""
command -v java >/dev/null 2>&1 || java_pkg="openjdk-17-jre-headless"
apt_install_missing $java_pkg iproute2 procps

# The main environment: rebuilt only when requirements/main.txt or the interpreter changes.
# shellcheck source=lib/venv.sh
source scripts/lib/venv.sh
MAIN_VENV="$CACHE/venv-main"
say "main environment: $MAIN_VENV"
PYTHON=$PYTHON ensure_venv "$MAIN_VENV" requirements/main.txt
ln -sfn "$MAIN_VENV" .venv
ready() {
  say "ready: $(.venv/bin/python -c 'import sparkrunner, pyspark, torch; print("sparkrunner", sparkrunner.__version__, "pyspark", pyspark.__version__, "torch", torch.__version__)')"
}
if [ "$MAIN_ONLY" = 1 ]; then
  ready
  exit 0
fi

# The other steps are independent of each other: they run at the same time (the Horovod build is CPU-bound,
# the environments mostly download), each logging to a file shown when it ends.
LOGS="$CACHE/setup-logs"
mkdir -p "$LOGS"
steps=() pids=()
for extra in scripts/setup.d/*.sh; do
  [ -e "$extra" ] || continue
  SPARKRUNNER_CACHE="$CACHE" MAIN_VENV="$MAIN_VENV" PYTHON="$PYTHON" bash "$extra" > "$LOGS/$(basename "$extra").log" 2>&1 &
  steps+=("$extra") pids+=($!)
done
failed=0
for i in "${!steps[@]}"; do
  log="$LOGS/$(basename "${steps[$i]}").log"
  if wait "${pids[$i]}"; then
    say "${steps[$i]}: $(tail -n 1 "$log")"
  else
    say "${steps[$i]}: FAILED; the end of its log ($log):"
    tail -n 40 "$log"
    failed=1
  fi
done
[ "$failed" = 0 ] || exit 1
ready
