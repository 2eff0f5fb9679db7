#!/usr/bin/env bash
# Runs the whole test suite in the main environment (after scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
exec .venv/bin/python -m pytest -ra --durations=15 "$@"
