"""Every run is recorded in a real MLflow store (sqlite in a tmp dir) and read back with MlflowClient."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from sparkrunner import MlflowTracking, Runner, report_progress
from sparkrunner.errors import InvalidArgumentError, RankFailedError, RunTimeoutError

mlflow = pytest.importorskip("mlflow")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One real sqlite store for the module (creating its tables takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"


def logs_from_rank_zero(steps: int) -> str:
    import mlflow

    from sparkrunner import rank_context

    run_id = os.environ["MLFLOW_RUN_ID"]  # mlflow removes it once it resumes the run
    for step in range(1, steps + 1):
        if rank_context().rank == 1:
            time.sleep(0.3)  # workload, not synchronisation: rank 1 is the slow rank the record must name
        report_progress(step, total=steps, loss=1.0 / step)
    if rank_context().rank == 0:
        mlflow.log_metric("accuracy", 0.75)
        mlflow.log_text("weights go here", "model/notes.txt")
    return run_id


def fails_on_rank_one() -> None:
    from sparkrunner import rank_context

    if rank_context().rank == 1:
        raise ValueError("bad batch on rank 1")


def read_back(store: str, run_id: str) -> Any:
    return mlflow.MlflowClient(store).get_run(run_id)


@pytest.mark.slow
def test_a_run_is_recorded_with_params_metrics_and_timings(store: str) -> None:
    runner = Runner(np=-2, launcher="direct", tracking=store)
    rank_run_id = runner.run(logs_from_rank_zero, 5)
    record = runner.last_run
    assert record is not None and record.mlflow_run_id == rank_run_id
    run = read_back(store, rank_run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "sparkrunner-logs_from_rank_zero"
    params = run.data.params
    assert params["np"] == "-2" and params["launcher"] == "direct"
    assert params["version.mlflow"] == mlflow.__version__ and "version.pyspark" in params
    metrics = run.data.metrics
    assert metrics["accuracy"] == 0.75  # logged by rank 0 itself
    assert metrics["duration_s"] > 0
    assert {"rank0.steps_per_s", "rank1.steps_per_s"} <= set(metrics)
    loss = mlflow.MlflowClient(store).get_metric_history(rank_run_id, "loss")
    assert [(m.step, m.value) for m in sorted(loss, key=lambda m: m.step)] == [
        (s, 1.0 / s) for s in range(1, 6)
    ]
    assert run.data.tags["sparkrunner.run_id"] == record.run_id
    assert run.data.tags["sparkrunner.slowest_rank"] == "1"  # it alone spends 0.3 s per step
    artifacts = {a.path for a in mlflow.MlflowClient(store).list_artifacts(rank_run_id, "sparkrunner")}
    assert record.report_path is not None  # the run's HTML report goes along with its tables
    report = f"sparkrunner/{os.path.basename(record.report_path)}"
    assert artifacts == {"sparkrunner/timings.csv", "sparkrunner/rank_throughput.csv", report}
    assert [a.path for a in mlflow.MlflowClient(store).list_artifacts(rank_run_id, "model")] == [
        "model/notes.txt"
    ]


def test_a_failed_run_records_the_failure(store: str) -> None:
    runner = Runner(np=-2, tracking=MlflowTracking(store, experiment="failures"))
    with pytest.raises(RankFailedError, match="bad batch on rank 1"):
        runner.run(fails_on_rank_one)
    assert runner.last_run is not None and isinstance(runner.last_run.error, RankFailedError)
    run = read_back(store, str(runner.last_run.mlflow_run_id))
    assert run.info.status == "FAILED"
    assert "ValueError: bad batch on rank 1" in run.data.tags["sparkrunner.error"]
    experiment = mlflow.MlflowClient(store).get_experiment(run.info.experiment_id)
    assert experiment.name == "failures"


@pytest.mark.slow
def test_runs_in_a_warm_session_are_recorded_in_the_background(store: str) -> None:
    """np<0, launcher direct: a session's runs return before MLflow has their end; `close()` waits for it."""
    runner = Runner(np=-2, launcher="direct", tracking=MlflowTracking(store, experiment="session"))
    with runner.session() as session:
        first = session.run(logs_from_rank_zero, 3)
        with pytest.raises(RankFailedError, match="bad batch on rank 1"):
            session.run(fails_on_rank_one)
        failed = str(session.last_run.mlflow_run_id)  # type: ignore[union-attr]
    done, bad = read_back(store, first), read_back(store, failed)
    assert (done.info.status, bad.info.status) == ("FINISHED", "FAILED")
    assert done.data.params["np"] == "-2" and done.data.metrics["accuracy"] == 0.75
    assert done.data.metrics["duration_s"] > 0 and "rank0.steps_per_s" in done.data.metrics
    loss = mlflow.MlflowClient(store).get_metric_history(first, "loss")
    assert sorted((m.step, m.value) for m in loss) == [(s, 1.0 / s) for s in range(1, 4)]
    assert "ValueError: bad batch on rank 1" in bad.data.tags["sparkrunner.error"]


def test_nested_under_the_callers_active_run(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    with mlflow.start_run(run_name="notebook") as parent:
        runner = Runner(np=-1)  # default tracking: MLflow's own tracking URI
        runner.run(lambda: None)
    assert runner.last_run is not None
    run = read_back(store, str(runner.last_run.mlflow_run_id))
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert run.info.experiment_id == parent.info.experiment_id
    assert run.info.status == "FINISHED"


def all_run_ids(store: str) -> set[str]:
    """Every run in every experiment of the store, read with MLflow's own client."""
    client = mlflow.MlflowClient(store)
    experiments = [e.experiment_id for e in client.search_experiments(view_type=3)]  # ViewType.ALL
    return {r.info.run_id for r in client.search_runs(experiments, run_view_type=3)}


def test_tracking_off_records_nothing(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)  # where tracking would go if it were on
    before = all_run_ids(store)
    runner = Runner(np=-1, launcher="direct", tracking=False)
    assert runner.run(lambda: os.environ.get("MLFLOW_RUN_ID")) is None
    assert runner.last_run is not None and runner.last_run.mlflow_run_id is None
    assert all_run_ids(store) == before


@pytest.mark.parametrize("tracking", [0, "", 3.5, object()])
def test_bad_tracking_argument_is_refused(tracking: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="tracking must be"):
        Runner(np=-1, tracking=tracking)


@pytest.mark.slow
def test_a_timed_out_run_keeps_every_ranks_stacks_as_an_artifact(store: str) -> None:
    from tests.driver.functions import rank_one_stuck_here

    runner = Runner(np=-2, launcher="direct", timeout=10, tracking=store)
    with pytest.raises(RunTimeoutError):
        runner.run(rank_one_stuck_here)
    run_id = str(runner.last_run.mlflow_run_id) if runner.last_run else ""
    client = mlflow.MlflowClient(store)
    artifacts = {a.path for a in client.list_artifacts(run_id, "sparkrunner")}
    assert "sparkrunner/stacks.txt" in artifacts
    stacks = client.download_artifacts(run_id, "sparkrunner/stacks.txt")
    with open(stacks) as f:
        assert "in stuck_here" in f.read()


def params_seen_while_running(timeout_s: float) -> dict[str, str]:
    """Rank 0: the run's parameters as the store has them, once they are there (or at `timeout_s`)."""
    import mlflow

    client, run_id = mlflow.MlflowClient(), os.environ["MLFLOW_RUN_ID"]
    deadline = time.monotonic() + timeout_s
    while not (params := client.get_run(run_id).data.params) and time.monotonic() < deadline:
        time.sleep(0.1)
    return dict(params)


def test_a_long_run_s_parameters_are_in_the_store_while_it_runs_and_a_short_run_s_at_its_end(
    store: str,
) -> None:
    """np=-1, launcher direct. The parameters are written a moment into the run (not while its ranks start): a
    rank reads them from the store while the run is still going; a run that ends sooner has them too."""
    seen = Runner(np=-1, launcher="direct", tracking=store).run(params_seen_while_running, 30)
    assert seen.get("np") == "-1" and seen.get("launcher") == "direct", seen
    runner = Runner(np=-1, launcher="direct", tracking=store)
    runner.run(time.sleep, 0)
    assert runner.last_run is not None
    params = read_back(store, runner.last_run.mlflow_run_id).data.params
    assert params["np"] == "-1" and params["launcher"] == "direct", params
