"""Shared fixtures: one real SparkSession per master, reused across test modules, and a process-table check."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.data.s3_server import S3Server, s3_server
from tests.group_order import STARTS_OUTPUT, assign_groups, starts_line
from tests.helpers import TEST_SESSION_ENV, leftover_rank_processes, stop_forgetting
from tests.jvm_flags import jvm_options
from tests.matrix import LAUNCHERS, PLACEMENTS, Placement
from tests.scenarios.connect.server import ConnectServer

# Executors must run this interpreter, or they cannot import sparkrunner (set before any SparkContext).
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
# Every JVM the tests start (Spark drivers and executors, the namespace hosts' master and workers, Connect servers,
# spark-submit): C1 alone and the serial collector, which halve a short-lived session's CPU time, and Spark's
# classes from a class-data-sharing archive where scripts/run_tests.sh built one.
os.environ.setdefault("JDK_JAVA_OPTIONS", jvm_options())
# Tag every process this session starts, so process-table checks ignore other sessions on this machine. The
# suite runs on several pytest-xdist workers (scripts/run_tests.sh): a worker's tag extends the one it inherited,
# so the workers of one run ignore each other's processes too.
os.environ[TEST_SESSION_ENV] = "-".join(
    filter(
        None, [os.environ.get(TEST_SESSION_ENV) or uuid.uuid4().hex, os.environ.get("PYTEST_XDIST_WORKER")]
    )
)

import cloudpickle

import tests

# Ranks and executors cannot import this test package: ship its functions by value, as a notebook's would be,
# both in sparkrunner's payloads (cloudpickle) and in the RDD closures tests run themselves (pyspark's own copy;
# the Petastorm environment runs its tests without pyspark).
cloudpickle.register_pickle_by_value(tests)
with contextlib.suppress(ImportError):
    from pyspark import cloudpickle as pyspark_cloudpickle

    pyspark_cloudpickle.register_pickle_by_value(tests)

# Runs are tracked in MLflow by default: keep the session's runs in a throwaway store of its own (one per worker:
# SQLite and two writers make a locked database), not ./mlflow.db, unless whoever started pytest named a store.
_MLFLOW_DIR = tempfile.mkdtemp(prefix="sparkrunner-mlflow-")
_OWN_STORE_ENV = "SPARKRUNNER_TEST_OWN_STORE"
if os.environ.get(_OWN_STORE_ENV) or "MLFLOW_TRACKING_URI" not in os.environ:
    os.environ[_OWN_STORE_ENV] = "1"
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{_MLFLOW_DIR}/mlflow.db"
    os.environ["SPARKRUNNER_REPORT_DIR"] = os.path.join(_MLFLOW_DIR, "reports")  # runs' HTML reports

_session: dict[str, Any] = {}
_starts: Counter[str] = Counter()
"""Spark sessions this process started, by master (printed at the end of the run: tests/group_order.py)."""

pytest_plugins = ["tests.scenarios.cluster.fixtures", "tests.group_order"]

LOCAL_MASTER = "local[2]"
CLUSTER_MASTER = "local-cluster[2,1,1024]"


def spark_session(master: str, **conf: str) -> Any:
    """A SparkSession on `master` with `conf`; the previous one is stopped first when either differs."""
    from pyspark.sql import SparkSession

    key = (master, tuple(sorted(conf.items())))
    current = _session.get("spark")
    if (
        current is not None and current.sparkContext._jsc is None
    ):  # stopped by code under test (e.g. an example)
        _session.clear()
        current = None
    if current is not None and _session["key"] == key:
        return current
    if current is not None:  # the settings this call sets again stay
        stop_forgetting(current, [name for name, _ in _session["key"][1] if name not in conf])
    builder = (
        SparkSession.builder.master(master)
        .appName("sparkrunner-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.executor.memory", "768m")
        .config("spark.python.worker.reuse", "true")
    )
    # explicit, because a stopped session's settings stay in the JVM for the next one (the multi-host tests
    # bind the driver elsewhere; tests/scenarios/cluster/test_ranks_per_task_two_hosts.py sets spark.task.cpus=2)
    defaults = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.task.cpus": "1",
        # executors honour SIGPWR (graceful decommissioning), as on clusters with spot or preemptible nodes
        "spark.decommission.enabled": "true",
    }
    for name, value in {**defaults, **conf}.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    _session.update(spark=spark, key=key)
    _starts[master if master.startswith("local") else master.split(":", 1)[0]] += 1
    return spark


def stop_spark_session(master: str | None = None) -> None:
    """Stop the shared SparkSession (only if it runs on `master`, when given)."""
    current = _session.get("spark")
    if current is not None and (master is None or _session["key"][0] == master):
        current.stop()
        _session.clear()


@pytest.fixture(scope="module")
def spark_local() -> Any:
    """A real `local[2]` SparkSession (2 task slots), shared with every module that asks for it."""
    return spark_session(LOCAL_MASTER)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The materialize cache of the module's estimator fits (Parquet cached by query plan)."""
    return tmp_path_factory.mktemp("ml-store")


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """A real S3-API server (moto in server mode on 127.0.0.1 and a free port) with a bucket for the tests, for
    the whole test run: the data path's and the checkpoints' tests share it."""
    with s3_server() as server:
        yield server


@pytest.fixture(scope="module")
def spark_cluster() -> Any:
    """A real `local-cluster[2,1,1024]` session: two executor JVMs with one slot each."""
    return spark_session(CLUSTER_MASTER)


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> ConnectServer:
    """The Spark Connect server (`local[2]`, in a driver program of its own) that every Connect test's client
    program shares: started by the first test that asks for its URL, ended after the last of the tests in a row
    that take it (pytest_runtest_teardown), so it runs one JVM for all of them, not one each."""
    return ConnectServer(tmp_path_factory.mktemp("connect-server") / "server.log")


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """End the Connect server when the next test does not take it (an idle JVM would hold its memory)."""
    server = getattr(item, "funcargs", {}).get("connect_server")
    if server is not None and (
        nextitem is None or "connect_server" not in getattr(nextitem, "fixturenames", ())
    ):
        server.stop()


@pytest.fixture(autouse=True)
def no_rank_left_behind() -> Iterator[None]:
    """Every test must leave no rank process of any run on this machine."""
    yield
    leftover = leftover_rank_processes(grace_s=5.0)
    assert not leftover, f"rank processes left behind: {leftover}"


_INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
_INDUCTOR_CACHE_GIVEN = os.environ.get(_INDUCTOR_CACHE_ENV)
"""Set by whoever started pytest, or None. Importing torch._dynamo (collecting the suite does, and so may a test)
writes torch's default into os.environ. The first Spark JVM of a process (pyspark keeps it for every later
session) and every executor and rank under it would inherit that, as no user's would."""


def _give_back_inductor_cache_dir() -> None:
    if _INDUCTOR_CACHE_GIVEN is None:
        os.environ.pop(_INDUCTOR_CACHE_ENV, None)
    else:
        os.environ[_INDUCTOR_CACHE_ENV] = _INDUCTOR_CACHE_GIVEN


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before any fixture: a module-scoped Spark session is set up before a test's own fixtures run."""
    _give_back_inductor_cache_dir()


@pytest.fixture(autouse=True)
def inductor_cache_dir_not_inherited() -> Iterator[None]:
    """Each test starts and ends with the TORCHINDUCTOR_CACHE_DIR its user gave (none, normally), not the one an
    import of torch._dynamo in this process wrote: the next module's Spark session starts before the next test."""
    _give_back_inductor_cache_dir()
    yield
    _give_back_inductor_cache_dir()


@pytest.fixture(autouse=True)
def tracking_store_kept() -> Iterator[None]:
    """No test may change the MLflow store the tests after it use (MLflow's `_use_tracking_uri` unsets
    MLFLOW_TRACKING_URI on the way out: a test that called it sent a later test's runs to ./mlflow.db)."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    assert os.environ.get("MLFLOW_TRACKING_URI") == before, (
        "the test changed MLFLOW_TRACKING_URI for later tests"
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    stop_spark_session()
    shutil.rmtree(_MLFLOW_DIR, ignore_errors=True)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the controller prints the run's sum
        workeroutput[STARTS_OUTPUT] = dict(_starts)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if _starts:  # a run in this process (under pytest-xdist, the controller starts none)
        terminalreporter.write_line(starts_line(_starts))


@pytest.fixture(params=LAUNCHERS)
def launcher(request: pytest.FixtureRequest) -> str:
    """Each launcher in turn ("direct", "mpirun"; mpirun skipped where it cannot run)."""
    return str(request.param)


@pytest.fixture(scope="module", params=PLACEMENTS)
def placement(request: pytest.FixtureRequest) -> Placement:
    """Each placement in turn: np < 0 (the driver), then np > 0 on `local-cluster[2,1,1024]`."""
    if request.param == "spark":
        return Placement("spark", spark_session(CLUSTER_MASTER))
    return Placement("np<0")


_STARTS_SPARK = {"spark", "spark_local", "spark_cluster", "netns_cluster", "two_hosts"}
"""Fixtures that start a SparkSession (or a network-namespace cluster): tens of seconds cold."""
_SLOW_FOLDERS = {"cluster", "connect", "image", "notebooks", "examples"}
"""Subjects whose every test starts Spark, a Spark Connect server, a container or a notebook kernel."""


def _is_slow(item: pytest.Item) -> bool:
    """Starts Spark, runs mpirun or Petastorm, or lives in a folder whose tests all take more than a few seconds
    (the others that do are marked `slow` where they are defined)."""
    callspec = getattr(item, "callspec", None)
    params = getattr(callspec, "params", {})
    fixtures = set(getattr(item, "fixturenames", ()))
    return (
        item.get_closest_marker("spark") is not None
        or bool(_STARTS_SPARK & fixtures)
        or any(name.startswith("spark_") for name in fixtures)  # a module's own Spark fixture
        or "spark" in getattr(callspec, "id", "").split("-")  # e.g. parametrize(np, ids=["local", "spark"])
        or "mpirun" in params.values()
        or "spark" in params.values()
        or "petastorm" in params.values()  # starts Petastorm's own environment in a subprocess
        or item.path.parent.name in _SLOW_FOLDERS
    )


_SHARED_SESSIONS = {
    "spark_local": LOCAL_MASTER,
    "spark_cluster": CLUSTER_MASTER,
    "placement": CLUSTER_MASTER,
    "netns_cluster": "namespace hosts",
    "connect_server": "a Spark Connect server",
}
"""Fixtures whose Spark session (or cluster) every module that asks for them shares."""
_STARTERS = {"spark_session", "session_on", "NetnsCluster"}
"""What a fixture or test calls to start a session or cluster of its own."""


def _fetched(code: Any) -> set[str]:
    """The shared sessions a function takes by name (`request.getfixturevalue("spark_cluster")`)."""
    names = {"spark_local", "spark_cluster"} & {c for c in code.co_consts if isinstance(c, str)}
    return {_SHARED_SESSIONS[name] for name in names}


def _sessions(item: pytest.Item) -> set[str]:
    """The Spark sessions and namespace-host clusters a test uses, read from its fixtures and its own code: a
    shared fixture's master, or a fixture that starts one with settings of its own (named by where it is
    defined: tests/ml/conftest.py's is every ml module's)."""
    found = set()
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for name in getattr(item, "fixturenames", ()):
        if name in _SHARED_SESSIONS:
            found.add(_SHARED_SESSIONS[name])
            continue
        for definition in definitions.get(name, ()):
            code = getattr(definition.func, "__code__", None)
            if code is None:
                continue
            found |= _fetched(code)
            if _STARTERS & set(code.co_names) and not set(definition.argnames) & set(_SHARED_SESSIONS):
                found.add(f"{definition.baseid or 'tests'}::{name}")
    code = getattr(getattr(item, "function", None), "__code__", None)
    if code is not None:
        found |= _fetched(code)
        if "spark_session" in code.co_names:
            found.add(str(item.path.relative_to(item.config.rootpath)))
    return found


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Apply the `slow` marker honestly, so that `make test-fast` (-m "not slow") stays under 3 minutes, and the
    group each test runs in under `--dist loadgroup`: its module's, by the sessions the module uses
    (tests/group_order.py forms and orders the groups)."""
    units = {}
    sessions: dict[str, set[str]] = defaultdict(set)
    for item in items:
        if _is_slow(item) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
        units[item] = str(item.path.relative_to(item.config.rootpath))
        sessions[units[item]] |= _sessions(item)
    assign_groups(items, units, {unit: frozenset(found) for unit, found in sessions.items()})
