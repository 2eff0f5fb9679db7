"""MLflow tracking: every run() becomes an MLflow run on the driver, which the ranks can log into as well.

The driver creates the run (nested under the caller's active run, if any), records parameters, duration,
status and the failure, rank 0's progress metrics and the per-rank step timings. Ranks get
``MLFLOW_TRACKING_URI`` and ``MLFLOW_RUN_ID``, so ``mlflow.log_metric(...)`` / ``mlflow.log_artifact(...)``
inside `main` (on rank 0, usually) land in the same run.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import logging
import os
import platform
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sparkrunner.errors import MissingExtraError, RunCancelledError
from sparkrunner.observe.events import ProgressEvent
from sparkrunner.observe.observers import RunObserver, RunRecord
from sparkrunner.timeouts import MLFLOW_PARAMS_AFTER_S

log = logging.getLogger(__name__)

_VERSIONED = ("sparkrunner", "pyspark", "torch", "tensorflow", "tf-keras", "horovod", "mlflow", "numpy")
_FLUSH_EVERY = 100
_ARTIFACTS = "sparkrunner"


class MlflowTracking(RunObserver):
    """Records each run in MLflow.

    Args:
        tracking_uri: where to record; default: MLflow's own choice (``MLFLOW_TRACKING_URI``,
            ``mlflow.set_tracking_uri``, else a local ``mlflow.db`` in the working directory).
        experiment: experiment name; default: the caller's active run's or MLflow's current experiment.
        log_progress: log rank 0's `report_progress` metrics as MLflow metrics (by step).
    """

    def __init__(
        self, tracking_uri: str | None = None, experiment: str | None = None, log_progress: bool = True
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.log_progress = log_progress
        self._client: Any = None
        self._run_id = ""
        self._uri = self._where = ""
        self._pending: list[Any] = []
        self._writer: ThreadPoolExecutor | None = None
        self._params_timer: threading.Timer | None = None
        self._unwritten_params: list[Any] = []
        self._params_lock = threading.Lock()

    def in_background(self) -> MlflowTracking:
        """A copy that creates each run at its start (its ranks need the id) and writes everything else from
        a thread of its own, in order, so the run returns without waiting for the store: warm sessions use it.
        `flush()` waits for what is queued; the interpreter's exit does too."""
        twin = MlflowTracking(self.tracking_uri, self.experiment, self.log_progress)
        twin._writer = ThreadPoolExecutor(1, thread_name_prefix="sparkrunner-mlflow")
        return twin

    def flush(self) -> None:
        """Wait until every queued write reached the store (a no-op when writing in the foreground)."""
        if self._writer is not None:
            self._writer.submit(lambda: None).result()

    def _write(self, call: Callable[..., None], *args: Any) -> None:
        """`call(*args)` now, or queued behind the earlier writes (a failure there is logged, not raised)."""
        if self._writer is None:
            call(*args)
        else:
            self._writer.submit(_logged, call, *args)

    def _params_soon(self, params: list[Any]) -> None:
        """The run's parameters: queued behind the earlier writes when writing in the background; else written
        `MLFLOW_PARAMS_AFTER_S` into the run by a timer (a run that ends sooner writes them with its end, in the
        same store write): the ranks' start shares the driver with no store write."""
        if self._writer is not None:
            self._write(self._client.log_batch, self._run_id, [], params)
            return
        self._unwritten_params = params
        self._params_timer = threading.Timer(MLFLOW_PARAMS_AFTER_S, self._write_unwritten_params)
        self._params_timer.daemon = True
        self._params_timer.start()

    def _take_unwritten_params(self) -> list[Any]:
        with self._params_lock:
            params, self._unwritten_params = self._unwritten_params, []
        return params

    def _write_unwritten_params(self) -> None:
        params = self._take_unwritten_params()
        if params:
            _logged(self._client.log_batch, self._run_id, [], params)

    def _params_left_for_the_end(self) -> list[Any]:
        """The parameters the timer has not written (it writes no more); once it took them, after its write."""
        timer, self._params_timer = self._params_timer, None
        if timer is None:
            return []
        timer.cancel()
        params = self._take_unwritten_params()
        if not params:
            timer.join()
        return params

    def on_start(self, record: RunRecord) -> None:
        with (
            warnings.catch_warnings()
        ):  # mlflow imports tqdm.auto, which warns in notebooks without ipywidgets
            warnings.filterwarnings("ignore", message="IProgress not found")
            import mlflow

        self._uri = absolute_tracking_uri(self.tracking_uri or mlflow.get_tracking_uri())
        self._client = mlflow.MlflowClient(self._uri)
        parent = (
            mlflow.active_run() if self._uri == absolute_tracking_uri(mlflow.get_tracking_uri()) else None
        )
        tags = {"sparkrunner.run_id": record.run_id, "sparkrunner.function": record.function}
        if parent is not None:
            tags["mlflow.parentRunId"] = parent.info.run_id
        experiment_id = parent.info.experiment_id if parent is not None else self._experiment_id()
        run = self._client.create_run(experiment_id, tags=tags, run_name=f"sparkrunner-{record.function}")
        self._run_id = record.mlflow_run_id = run.info.run_id
        self._pending = []
        params = {"np": record.np, "launcher": record.launcher, "python": platform.python_version()}
        params.update({f"version.{name}": version for name, version in library_versions().items()})
        self._params_soon([_param(k, v) for k, v in params.items()])
        self._where = where_is_run(self._uri, experiment_id, self._run_id)
        log.info("MLflow run %s: %s", self._run_id, self._where)

    def _experiment_id(self) -> str:
        if self.experiment is None:
            from mlflow.tracking import fluent

            # MLflow's current experiment: set_experiment(), MLFLOW_EXPERIMENT_*, or the notebook's own
            return str(fluent._get_experiment_id() or "0")
        found = self._client.get_experiment_by_name(self.experiment)
        return str(found.experiment_id if found else self._client.create_experiment(self.experiment))

    @property
    def uri(self) -> str:
        """The tracking URI of the latest run ("" before the first)."""
        return self._uri

    def rank_env(self) -> dict[str, str]:
        return {"MLFLOW_TRACKING_URI": self._uri, "MLFLOW_RUN_ID": self._run_id}

    def on_progress(self, rank: int, progress: ProgressEvent) -> None:
        if rank != 0 or not self.log_progress:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._pending += [Metric(k, v, now, progress.step) for k, v in progress.metrics.items()]
        if len(self._pending) >= _FLUSH_EVERY:
            self._flush()

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        for i in range(0, len(pending), 1000):  # MLflow's per-batch metric limit
            self._write(self._client.log_batch, self._run_id, pending[i : i + 1000])

    def on_end(self, record: RunRecord) -> None:
        params = self._params_left_for_the_end()
        self._flush()
        self._write(_record_end, self._client, self._run_id, record, params)
        log.info("%s", _where_text(record, self._run_id, self._where))


def _logged(call: Callable[..., None], *args: Any) -> None:
    """A background write: its failure is logged (the run it records has returned already)."""
    try:
        call(*args)
    except Exception as exc:
        log.warning("MLflow: a background write failed: %s: %s", type(exc).__name__, exc)


def _record_end(client: Any, run_id: str, record: RunRecord, params: list[Any]) -> None:
    """The run's duration, timings, attempts, report, error and status (and `params`, those not written yet), in as
    few writes as possible."""
    now = int(time.time() * 1000)
    metrics = [_metric("duration_s", record.duration_s or 0.0, now)]
    tags: dict[str, str] = {}
    if record.timings is not None:
        _log_timings(client, run_id, record, now, metrics, tags)
    _attempts(record, now, metrics, tags)
    metrics += anatomy_metrics(record, now)
    if record.report_path is not None:
        client.log_artifact(run_id, record.report_path, _ARTIFACTS)
    if record.error is not None:
        tags["sparkrunner.error"] = f"{type(record.error).__name__}: {record.error}"[:5000]
        client.log_text(run_id, f"{type(record.error).__name__}: {record.error}\n", f"{_ARTIFACTS}/error.txt")
        for name, text in getattr(record.error, "artifacts", {}).items():
            client.log_text(run_id, text, f"{_ARTIFACTS}/{name}")
    from mlflow.entities import RunTag

    # one write for every metric and tag: each call is a transaction of the tracking store
    client.log_batch(run_id, metrics=metrics, params=params, tags=[RunTag(k, v) for k, v in tags.items()])
    client.set_terminated(run_id, _status(record.error))


def _where_text(record: RunRecord, run_id: str, where: str) -> str:
    """The end of a tracked run: where its MLflow run is, and its report (on disk and among the artifacts)."""
    text = f"MLflow run {run_id} ({_status(record.error)}): {where}"
    if record.report_path is not None:
        name = os.path.basename(record.report_path)
        text += f"; report: {record.report_path} (artifact {_ARTIFACTS}/{name})"
    return text


def _log_timings(
    client: Any, run_id: str, record: RunRecord, now: int, metrics: list[Any], tags: dict[str, str]
) -> None:
    """Log the timing tables as artifacts; add the per-rank speed metrics and the slowest rank's tag."""
    assert record.timings is not None
    client.log_text(run_id, record.timings.to_csv(index=False), f"{_ARTIFACTS}/timings.csv")
    table = record.rank_throughput()
    if table is None or table.empty:
        return
    client.log_text(run_id, table.to_csv(), f"{_ARTIFACTS}/rank_throughput.csv")
    for rank, row in table.iterrows():
        if row["steps_per_s"] == row["steps_per_s"]:  # not NaN
            metrics.append(_metric(f"rank{rank}.steps_per_s", float(row["steps_per_s"]), now))
    tags["sparkrunner.slowest_rank"] = str(record.slowest_rank)


def _attempts(record: RunRecord, now: int, metrics: list[Any], tags: dict[str, str]) -> None:
    """Attempts as metrics by attempt number (duration, failed 0/1, world size) and each failed attempt's error as a tag."""
    tags["sparkrunner.attempts"] = str(len(record.attempts))
    for attempt in record.attempts:
        metrics.append(_metric("attempt.duration_s", attempt.duration_s or 0.0, now, attempt.number))
        metrics.append(_metric("attempt.failed", float(attempt.error is not None), now, attempt.number))
        if attempt.world_size is not None:
            metrics.append(_metric("attempt.world_size", float(attempt.world_size), now, attempt.number))
        if attempt.error is not None:
            text = f"{type(attempt.error).__name__}: {attempt.error}"[:5000]
            tags[f"sparkrunner.attempt.{attempt.number}.error"] = text


def anatomy_metrics(record: RunRecord, now: int) -> list[Any]:
    """``rank{N}.{part}_median_s`` and ``..._p95_s`` for every rank and part of `record.step_anatomy`."""
    table = record.step_anatomy
    if table is None:
        return []
    columns = [c for c in table.columns if c.endswith(("_median_s", "_p95_s"))]
    return [_metric(f"rank{rank}.{c}", float(row[c]), now) for rank, row in table.iterrows() for c in columns]


def _metric(key: str, value: float, timestamp_ms: int, step: int = 0) -> Any:
    from mlflow.entities import Metric

    return Metric(key, value, timestamp_ms, step)


def _status(error: BaseException | None) -> str:
    if error is None:
        return "FINISHED"
    return "KILLED" if isinstance(error, (KeyboardInterrupt, RunCancelledError)) else "FAILED"


def _param(key: str, value: object) -> Any:
    from mlflow.entities import Param

    return Param(key, str(value))


@functools.cache
def library_versions() -> dict[str, str]:
    """Installed versions of the libraries a run depends on (missing ones are left out); read once per
    process: each lookup scans the environment's metadata, and a newly installed version needs a restart
    of this Python process to be used anyway."""
    found = {}
    for name in _VERSIONED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def where_is_run(uri: str, experiment_id: str, run_id: str) -> str:
    """Where to see an MLflow run: its page on a tracking server, else how to open the local store's UI."""
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
    if uri.startswith("databricks"):
        return f"experiment {experiment_id} in the workspace of {uri}"
    return f"tracking URI {uri} (to see it: mlflow ui --backend-store-uri '{uri}')"


def absolute_tracking_uri(uri: str) -> str:
    """The same store named so that ranks with another working directory find it too."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + os.path.abspath(uri[len("sqlite:///") :])
    if uri.startswith("file:") and not uri.startswith("file:/"):
        return "file://" + os.path.abspath(uri[len("file:") :])
    if "://" not in uri and not uri.startswith(("databricks", "file:")):
        return "file://" + os.path.abspath(uri)
    return uri


def tracking_observer(tracking: Any) -> list[RunObserver]:
    """The observers for Runner's `tracking` argument (see `Runner`)."""
    if isinstance(tracking, MlflowTracking):
        return [tracking]
    if tracking is None:
        return [MlflowTracking()] if _mlflow_installed() else []
    if tracking is False:
        return []
    if not _mlflow_installed():
        raise MissingExtraError(
            f"tracking={tracking!r} needs MLflow, which is not installed here: pip install 'sparkrunner[mlflow]', "
            f"or pass tracking=False"
        )
    if tracking is True:
        return [MlflowTracking()]
    return [MlflowTracking(tracking_uri=tracking)]  # a tracking URI (`RunOptions` checked the kinds)


def _mlflow_installed() -> bool:
    return importlib.util.find_spec("mlflow") is not None
