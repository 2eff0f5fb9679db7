#!/usr/bin/env bash
# The pinned Petastorm environment (pyarrow < 15, numpy < 2) beside the main one: the Petastorm reader's
# tests and the Petastorm side of bench/data.py run in it. Rebuilt only when requirements/petastorm.txt or
# the interpreter changes; linked as .venv-petastorm. Needs SPARKRUNNER_CACHE and PYTHON (from setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
STAMP=$(cat requirements/petastorm.txt <("$PYTHON" -VV) | sha256sum | cut -c1-16)
VENV="$SPARKRUNNER_CACHE/venv-petastorm"
if [ "$(cat "$VENV/.stamp" 2>/dev/null)" != "$STAMP" ]; then
  echo "creating the pinned Petastorm environment in $VENV"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q --no-deps -r requirements/petastorm.txt
  echo "$STAMP" > "$VENV/.stamp"
fi
"$VENV/bin/pip" install -q --no-deps --no-build-isolation -e .
ln -sfn "$VENV" .venv-petastorm
"$VENV/bin/python" -c 'import petastorm, pyarrow, numpy, sparkrunner; print("petastorm env:", "petastorm", petastorm.__version__, "pyarrow", pyarrow.__version__, "numpy", numpy.__version__)'
