#!/usr/bin/env bash
# The pinned Petastorm environment (pyarrow < 15, numpy < 2) beside the main one: the Petastorm reader's
# tests and the Petastorm side of bench/data.py run in it. Rebuilt only when requirements/petastorm.txt or
# the interpreter changes; linked as .venv-petastorm. Needs SPARKRUNNER_CACHE and PYTHON (from setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib/venv.sh
source scripts/lib/venv.sh
VENV="$SPARKRUNNER_CACHE/venv-petastorm"
ensure_venv "$VENV" requirements/petastorm.txt --no-deps  # a complete pinned list: no resolver surprises
ln -sfn "$VENV" .venv-petastorm
"$VENV/bin/python" -c 'import petastorm, pyarrow, numpy, sparkrunner; print("petastorm env:", "petastorm", petastorm.__version__, "pyarrow", pyarrow.__version__, "numpy", numpy.__version__)'
