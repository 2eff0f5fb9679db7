#!/usr/bin/env bash
# Runs one phase of the CI run (`make test`) and prints how long it took:  bash scripts/phase.sh NAME COMMAND...
# so that a slow run says where its time went.
set -uo pipefail
name=$1
shift
start=$(date +%s)
"$@"
status=$?
echo "== phase ${name}: $(($(date +%s) - start)) s (exit ${status})"
exit $status
