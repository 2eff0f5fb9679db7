#!/usr/bin/env bash
# Runs the test suite (after scripts/setup.sh).
#   bash scripts/run_tests.sh                 the whole suite in the main environment, then the Spark 3.5 subset and,
#                                             beside it, the cluster image: built (cached by its inputs' hash) and tested
#   bash scripts/run_tests.sh ARGS...         pytest ARGS in the main environment
#   SPARKRUNNER_ENV=spark35 bash scripts/run_tests.sh ARGS...   pytest ARGS in the Spark 3.5 environment
#   SPARKRUNNER_SKIP_IMAGE=1 bash scripts/run_tests.sh          the whole suite without the image part
#   SPARKRUNNER_TEST_WORKERS=1 bash scripts/run_tests.sh        the whole suite in one pytest process
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
# Spark's Python workers and every subprocess import this checkout's sparkrunner, not whichever checkout the shared
# (cached) environment's editable install points at
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# The environments by their own (cached) paths, not through this checkout's .venv links, so that what is built
# from their paths is built once, not again for every fresh clone: the DeepSpeed op setup compiles
# (scripts/setup.d/50-deepspeed-ops.sh: ~80 CPU s) and the JVMs' class-data archives (tests/jvm_flags.py: ~30 s each)
PYTHON_MAIN="$(cd .venv && pwd -P)/bin/python"
# Byte-compiled once here: every rank, Spark Python worker and driver program imports this checkout afresh, and
# where PYTHONDONTWRITEBYTECODE is set (this machine sets it) each would compile it again (~0.1 s a rank process)
env -u PYTHONDONTWRITEBYTECODE "$PYTHON_MAIN" -m compileall -q sparkrunner tests examples bench > /dev/null
# The test JVMs' class-data-sharing archive of Spark's classes (tests/jvm_flags.py): built once per Java and pyspark,
# then kept in $SPARKRUNNER_CACHE; a session start costs ~28% less CPU with it (bench/jvm_flags.py)
"$PYTHON_MAIN" -m tests.jvm_flags

# What the Spark 3.5 environment (requirements/spark35.txt: pyspark 3.5 with numpy 1.26, pandas 2.2 and
# cloudpickle 3.1) runs again: the tests whose code path goes through pyspark's API or those libraries. It has no
# Horovod (so no mpirun launcher), TensorFlow or Petastorm: those cases run in the main one only. What touches
# none of them (the rank processes' lifecycle, script mode on the driver) runs in the main environment only.
SPARK35_TESTS=(
  # np < 0: the function, its arguments and results through this cloudpickle; numpy results; log streaming
  tests/placement/test_local_runner.py
  # barrier stages, errors, slot counts, the captured session, cancelling jobs, dynamic allocation: pyspark 3.5
  tests/placement/test_spark_runner.py
  # a script run as __main__ in a Spark 3.5 barrier stage
  tests/toplevel/test_script_mode.py::test_script_in_a_spark_barrier_stage
  # every rank's value back (cloudpickle), on the driver and in a barrier stage
  tests/runner/test_run_all.py
  # the process's Spark 3.5 session found from worker threads, two runs sharing its slots
  tests/runner/test_threads.py
  # typed errors before any process starts: a function cloudpickle cannot pickle, np > 0 without a session
  tests/runner/test_validation.py
  # materialize: Spark 3.5 plans, Arrow from pyspark, pandas and numpy columns
  tests/data/driver/test_materialize.py
  # the loaders' shards, batches and shuffles in numpy 1.26 and torch tensors from it
  tests/data/ranks/test_guarantees.py
  # a DataFrame from Spark 3.5 materialized and read by ranks in a barrier stage
  tests/scenarios/data/test_end_to_end.py
  # Spark 3.5 names a failed task in its error and tags jobs as 4 does: the stream's counting, cancelling, naming
  tests/data/driver/test_stream.py
  # BarrierTaskContext.get() in the ranks sets pyspark's private task-context fields, which 3.5 and 4 name alike
  tests/ranks/test_barrier_context.py
  # ranks forked from Spark 3.5's Python workers: its worker loop, task context and (shorter) command line
  tests/tasks/test_rank_seeds.py
  # reads the scheduler's decommission state, whose Scala types differ between Spark 3.5 and 4
  tests/recovery/test_resume_spark.py::test_a_decommissioned_executor_stops_ranks_gracefully_and_the_run_resumes_from_their_save)
# (and the test that asserts the main environment's numpy 2 / pyarrow >= 18)
SPARK35_DESELECT="not mpirun and not petastorm and not runs_on_current_pyarrow_and_numpy"

# The whole suite runs on pytest-xdist workers, each taking whole modules (their Spark session starts once) and
# the network-namespace hosts as one group (tests/conftest.py): most tests wait (for Spark, a timeout, a rank)
# far more than they compute, so two workers share the two cores well (a third does no better:
# docs/development.md). Each worker tags its processes and keeps its own MLflow store, so the process-table
# checks and the stores never see the other worker's runs.
WORKERS=${SPARKRUNNER_TEST_WORKERS:-2}
PARALLEL=(-n "$WORKERS" --dist loadgroup)
[ "$WORKERS" -gt 1 ] || PARALLEL=()

spark35() {
  if [ ! -x .venv-spark35/bin/python ]; then
    echo "run_tests: .venv-spark35 is missing; run scripts/setup.sh first" >&2
    return 1
  fi
  local python
  python="$(cd .venv-spark35 && pwd -P)/bin/python"
  "$python" -m tests.jvm_flags
  "$python" -m pytest -ra --durations=10 "$@"
}

# The cluster image of this tree (docker/build_image.sh: seconds when its inputs did not change) is built in the
# background, at the lowest CPU priority, while the suites run (on a fresh machine that hides its ~7 minutes),
# then tested inside.
IMAGE_LOG=${TMPDIR:-/tmp}/sparkrunner-image-build.$$.log
start_image_build() {
  setsid nice -n 19 bash docker/build_image.sh > "$IMAGE_LOG" 2>&1 &
  IMAGE_BUILD=$!
  # an interrupted run takes the build (its own session: buildah and pip included) down with it
  trap 'kill -- -"$IMAGE_BUILD" 2>/dev/null || true' EXIT
}
# The Spark 3.5 subset, timed (a command, not a function: run under setsid in the background, its pid is then its
# session's); the group times a whole-suite run records are the main suite's: this subset would write over them
SPARK35_SUBSET_COMMAND=(env SPARKRUNNER_ENV=spark35 SPARKRUNNER_TEST_GROUP_TIMES= bash scripts/phase.sh "Spark 3.5 subset"
  bash scripts/run_tests.sh -k "$SPARK35_DESELECT" "${PARALLEL[@]}" "${SPARK35_TESTS[@]}")
image_tests() {
  if ! wait "$IMAGE_BUILD"; then
    echo "run_tests: the image build failed; its log:" >&2
    tail -n 60 "$IMAGE_LOG" >&2
    return 1
  fi
  tail -n 3 "$IMAGE_LOG"
  SPARKRUNNER_IMAGE_TESTS=1 "$PYTHON_MAIN" -m pytest -ra --durations=5 tests/scenarios/image
}

if [ "${SPARKRUNNER_ENV:-main}" = spark35 ]; then
  spark35 "$@"
elif [ $# -gt 0 ]; then
  exec "$PYTHON_MAIN" -m pytest -ra --durations=15 "$@"
else
  status=0
  [ "${SPARKRUNNER_SKIP_IMAGE:-0}" = 1 ] || start_image_build
  bash scripts/phase.sh "main suite" "$PYTHON_MAIN" -m pytest -ra --durations=60 "${PARALLEL[@]}" || status=$?
  if [ "${SPARKRUNNER_SKIP_IMAGE:-0}" = 1 ]; then
    "${SPARK35_SUBSET_COMMAND[@]}" || status=$?
    echo "== run_tests: the cluster image skipped (SPARKRUNNER_SKIP_IMAGE=1)"
  else
    # The Spark 3.5 subset runs beside the image's tests (its output kept in a file, shown when it ends): each
    # leaves a core idle part of the time (a test waiting on a JVM or a container, a worker's last group)
    SPARK35_LOG=${TMPDIR:-/tmp}/sparkrunner-spark35.$$.log
    # (in its own session, so that an interrupted run takes it down with the image build)
    setsid "${SPARK35_SUBSET_COMMAND[@]}" > "$SPARK35_LOG" 2>&1 &
    SPARK35_SUBSET=$!
    trap 'kill -- -"$IMAGE_BUILD" -"$SPARK35_SUBSET" 2>/dev/null || true' EXIT
    echo "== run_tests: the cluster image (docker/build_image.sh, tests/scenarios/image), beside the Spark 3.5 subset"
    SECONDS=0
    image_tests || status=$?
    echo "== phase image (waiting for its build, then its tests): ${SECONDS} s"
    SECONDS=0
    wait "$SPARK35_SUBSET" || status=$?
    cat "$SPARK35_LOG"
    echo "== the Spark 3.5 subset ended ${SECONDS} s after the image's tests"
    rm -f "$IMAGE_LOG" "$SPARK35_LOG"
  fi
  exit $status
fi
