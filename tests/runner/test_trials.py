"""Many runs on one cluster: eight np=2 trials from eight threads on a 4-slot `local[4]` session all finish,
are admitted in order of arrival (the driver's gate, `sparkrunner.placement.admission`), and one trial's error
reaches that trial only; an Optuna search prunes through `report_progress` (docs/trials.md). Spark placement,
each launcher named (tests/matrix.py)."""

from __future__ import annotations

import importlib.util
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import RankFailedError
from sparkrunner.placement.admission import gate_for
from tests.conftest import spark_session
from tests.waiting import wait_until

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "optuna_search.py"
TRIALS = 8
FAILING = 5


@pytest.fixture(scope="module")
def spark_four_slots() -> Any:
    return spark_session("local[4]")


def square_unless(trial: int, failing: int) -> int:
    if trial == failing:
        raise ValueError(f"trial {trial} was told to fail")
    return trial * trial


def test_eight_trials_share_four_slots_in_order_of_arrival(spark_four_slots: Any, launcher: str) -> None:
    gate = gate_for(spark_four_slots.sparkContext)
    runners = [
        Runner(
            np=2, spark=spark_four_slots, launcher=launcher, tracking=False, progress=False, start_timeout=300
        )
        for _ in range(TRIALS)
    ]
    seen_before = len(gate.admitted)
    futures: list[Future[int]] = []
    with ThreadPoolExecutor(TRIALS) as pool:
        for trial, runner in enumerate(runners):
            arrived = gate.queued() + len(gate.admitted)
            futures.append(pool.submit(runner.run, square_unless, trial, FAILING))
            wait_until(
                lambda seen=arrived: gate.queued() + len(gate.admitted) > seen, 120, f"trial {trial} arriving"
            )
        outcomes = [future.exception(timeout=600) or future.result() for future in futures]
    for trial, outcome in enumerate(outcomes):
        if trial == FAILING:
            assert isinstance(outcome, RankFailedError) and f"trial {FAILING} was told to fail" in str(
                outcome
            )
        else:
            assert outcome == trial * trial, f"trial {trial} got {outcome!r}"
    run_ids = [runner.last_run.run_id for runner in runners if runner.last_run is not None]
    assert list(gate.admitted)[seen_before:] == run_ids, "trials must be admitted in order of arrival"


def pid_and_square_unless(trial: int, failing: int) -> tuple[int, int]:
    """Rank 0's process and the trial's value (raises on the failing trial)."""
    import os

    return os.getpid(), square_unless(trial, failing)


def test_concurrent_trials_share_a_pool_of_warm_sessions(spark_four_slots: Any) -> None:
    """Launcher direct (the pool only lends sessions; tests/driver/warm/test_warm_sessions.py runs warm ranks on
    both launchers): eight np=2 trials from eight threads on a pool of 2 sessions. Each gets its own value, the
    failing one its own error, and the runs took place in as many rank processes as the pool launched: 2,
    plus the one launch that replaced the failed trial's ranks."""
    runner = Runner(np=2, spark=spark_four_slots, launcher="direct", tracking=False, progress=False)
    with runner.session_pool(2) as sessions, ThreadPoolExecutor(TRIALS) as pool:
        futures = [pool.submit(sessions.run, pid_and_square_unless, t, FAILING) for t in range(TRIALS)]
        outcomes = [future.exception(timeout=600) or future.result() for future in futures]
        launches = sessions.launches
    failed = outcomes.pop(FAILING)
    assert isinstance(failed, RankFailedError) and f"trial {FAILING} was told to fail" in str(failed)
    assert [value for _, value in outcomes] == [t * t for t in range(TRIALS) if t != FAILING]
    pids = {pid for pid, _ in outcomes}
    assert launches <= 3 and len(pids) <= launches, f"{TRIALS} trials ran in {len(pids)} processes"


def test_an_optuna_search_prunes_through_report_progress(spark_four_slots: Any) -> None:
    """examples/optuna_search.py, launcher direct, its trials sharing one warm session: the pruned trial's
    ranks stop mid-run (the pruner decides at its first step; it trains fewer than STEPS steps)."""
    import optuna

    spec = importlib.util.spec_from_file_location("optuna_search", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    study = example.search(spark_four_slots, learning_rates=[0.3, 0.32, 0.9, 0.31])
    states = [trial.state for trial in study.trials]
    done, pruned = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED
    assert states == [done, done, pruned, done]  # 0.9's first step is worse than the median of the first two
    assert study.best_params == {"lr": 0.3}
    steps = [trial.user_attrs["steps"] for trial in study.trials]
    assert steps[2] < example.STEPS == steps[0] == steps[1] == steps[3], f"steps trained: {steps}"
