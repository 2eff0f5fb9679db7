"""One `fit` on the driver, whatever trains: check the input, split it in Spark, hand the rows to the ranks,
run the rank-side training through `Runner`, and record each epoch's metrics in MLflow."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkrunner.data.shards import row_split_steps
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml.driver import checks, mlflow_logging, training_data
from sparkrunner.observe.tracking import MlflowTracking, tracking_observer
from sparkrunner.placement.slots import session_slots


@dataclass(frozen=True)
class Fitted:
    """What the ranks returned (rank 0's value), and the MLflow run that recorded the fit."""

    result: Any
    mlflow_run_id: str | None
    tracking: MlflowTracking | None


def check_input(stage: Any, df: Any) -> None:
    """Everything about `df` and the stage's Params that can be wrong, before any rank starts."""
    get = stage.getOrDefault
    checks.check_training(get("epochs"), get("batch_size"), get("data"), get("max_failures"), get("verbose"))
    checks.check_columns(df, get("feature_cols"), get("label_cols"), get("sample_weight_col"))
    checks.check_validation(df, get("validation"))
    checks.check_not_empty(df)


def fit_on_ranks(
    stage: Any, df: Any, main: Callable[..., Any], *args: Any, check_data: Callable[[Any], None] | None = None
) -> Fitted:
    """``main(*args, training data, validation data or None)`` on the stage's ranks; returns rank 0's value.
    `check_data(training data)` checks what only the handed-over rows tell (their columns' shapes) before any
    rank starts."""
    from sparkrunner.runner import Runner

    get = stage.getOrDefault
    needed = [*get("feature_cols"), *get("label_cols"), *filter(None, [get("sample_weight_col")])]
    frames = training_data.split(df, list(dict.fromkeys(needed)), get("validation"), get("seed"))
    ranks = rank_count(stage, df)
    tracking = next((o for o in tracking_observer(get("tracking")) if isinstance(o, MlflowTracking)), None)
    runner = Runner(
        ranks,
        spark=df.sparkSession,
        launcher=get("launcher"),
        tracking=tracking if tracking is not None else False,
        max_failures=get("max_failures"),
        timeout=get("timeout"),
        checkpoint_dir=get("checkpoint_dir"),
        driver_log_verbosity="all" if get("verbose") >= 2 else "log_callback_only",
        progress=get("verbose") >= 1,
    )
    with training_data.handed_over(frames, get("data"), get("store"), get("seed"), get("shuffle")) as (
        train,
        val,
    ):
        _check_enough(train, val, abs(ranks), get("batch_size"))
        if check_data is not None:
            check_data(train)
        result = runner.run(main, *args, train, val)
    run_id = runner.last_run.mlflow_run_id if runner.last_run is not None else None
    if tracking is not None and run_id:
        mlflow_logging.log_fit(tracking.uri, run_id, getattr(result, "history", {}), get("run_id"))
    return Fitted(result, run_id or None, tracking)


def _check_enough(train: Any, val: Any, world: int, batch_size: int) -> None:
    """One batch per rank of training rows and one validation row per rank, or the ranks would fail on it."""
    row_split_steps(train.num_rows, world, batch_size, "drop")
    if val is not None:
        row_split_steps(val.num_rows, world, 1, "drop")


def rank_count(stage: Any, df: Any) -> int:
    """`np`, else Horovod's `num_proc`, else every task slot of the session (as Horovod's estimators do)."""
    np, num_proc = stage.getOrDefault("np"), stage.getOrDefault("num_proc")
    if np is not None and num_proc is not None and np != num_proc:
        raise InvalidArgumentError(f"np={np} and num_proc={num_proc} disagree: give one of them")
    chosen = np if np is not None else num_proc
    if chosen is None:
        chosen = session_slots(df.sparkSession)
    if chosen is None:
        raise InvalidArgumentError(
            "this Spark Connect session does not say how many task slots it has: set np"
        )
    return int(chosen)
