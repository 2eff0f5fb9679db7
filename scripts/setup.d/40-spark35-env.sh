#!/usr/bin/env bash
# The Spark 3.5 environment beside the main one (Databricks LTS runtimes still run 3.5): a second cached
# virtual environment where scripts/run_tests.sh runs the core, Spark-mode and data tests again. Rebuilt only
# when requirements/spark35.txt or the interpreter changes; linked as .venv-spark35. Needs SPARKRUNNER_CACHE
# and PYTHON (from setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib/venv.sh
source scripts/lib/venv.sh
VENV="$SPARKRUNNER_CACHE/venv-spark35"
ensure_venv "$VENV" requirements/spark35.txt
ln -sfn "$VENV" .venv-spark35
"$VENV/bin/python" -c 'import pyspark, pyarrow, numpy, torch, sparkrunner; print("spark35 env:", "pyspark", pyspark.__version__, "pyarrow", pyarrow.__version__, "numpy", numpy.__version__, "torch", torch.__version__)'
