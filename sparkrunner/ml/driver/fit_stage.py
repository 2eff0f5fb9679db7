"""One `fit` on the driver, whatever trains: check the input, split it in Spark, hand the rows to the ranks,
run the rank-side training through `Runner`, and record each epoch's metrics in MLflow."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sparkrunner.data.shards import row_split_steps
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml.driver import checks, mlflow_logging, training_data
from sparkrunner.ml.spec import FitSettings
from sparkrunner.observe.tracking import MlflowTracking, tracking_observer
from sparkrunner.options import check_tracking
from sparkrunner.placement.slots import session_slots

S = TypeVar("S", bound=FitSettings)


@dataclass(frozen=True)
class Fitted:
    """What the ranks returned (rank 0's value), and the MLflow run that recorded the fit."""

    result: Any
    mlflow_run_id: str | None
    tracking: MlflowTracking | None


def check_input(stage: Any, df: Any) -> None:
    """Everything about `df` and the stage's Params that can be wrong, before any rank starts (the options
    `Runner` takes, such as `max_failures` and `timeout`, are checked by `Runner` itself, in `fit_on_ranks`)."""
    get = stage.getOrDefault
    checks.check_training(get("epochs"), get("batch_size"), get("data"), get("verbose"))
    checks.check_columns(df, get("feature_cols"), get("label_cols"), get("sample_weight_col"))
    checks.check_validation(df, get("validation"))
    check_tracking(get("tracking"))
    checks.check_not_empty(df)


def spec(stage: Any, kind: type[S], **fields: Any) -> S:
    """The `kind` of spec (`FitSettings`, `TrainSpec`, `KerasSpec`) for the ranks: the columns and loop settings
    from the stage's Params (read here, once, for every estimator), and the estimator's own `fields`."""
    get = stage.getOrDefault
    return kind(
        feature_cols=tuple(get("feature_cols")), label_cols=tuple(get("label_cols")),
        sample_weight_col=get("sample_weight_col"), batch_size=get("batch_size"), epochs=get("epochs"),
        seed=get("seed"), shuffle=get("shuffle"), verbose=get("verbose"), **fields,
    )  # fmt: skip


def loop_fields(stage: Any) -> dict[str, int | None]:
    """The `FitSettings` of Horovod's loop settings (`val_batch_size`, `train_steps_per_epoch`,
    `validation_steps_per_epoch`) of an estimator with `LoopParams`, each None or an int >= 1."""
    names = ("val_batch_size", "train_steps_per_epoch", "validation_steps_per_epoch")
    return {name: checks.optional_size(name, stage.getOrDefault(name)) for name in names}


def fit_on_ranks(
    stage: Any,
    df: Any,
    settings: FitSettings,
    main: Callable[..., Any],
    *args: Any,
    check_data: Callable[[Any], None] | None = None,
    env: dict[str, str] | None = None,
) -> Fitted:
    """``main(*args, training data, validation data or None)`` on the stage's ranks, which read the columns of
    `settings`; returns rank 0's value. `check_data(training data)` checks what only the handed-over rows tell
    (their columns' shapes) before any rank starts. `env`: variables the stage sets for its ranks."""
    get = stage.getOrDefault
    tracking = next((o for o in tracking_observer(get("tracking")) if isinstance(o, MlflowTracking)), None)
    ranks = rank_count(stage, df)
    runner = _runner(stage, df, ranks, tracking, env or {})
    frames = training_data.split(df, settings.columns, get("validation"), get("seed"))
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


def _runner(stage: Any, df: Any, ranks: int, tracking: MlflowTracking | None, env: dict[str, str]) -> Any:
    """The `Runner` of the fit, which checks its options (`max_failures`, `timeout`, ...) before any rank starts.
    `tracking` is the fit's one MLflow observer (`fit_on_ranks` logs the epochs and the model in its run), given
    to `Runner` as it is, so the run is recorded by that same observer."""
    from sparkrunner.runner import Runner

    get = stage.getOrDefault
    return Runner(
        ranks,
        spark=df.sparkSession,
        launcher=get("launcher"),
        tracking=tracking if tracking is not None else False,
        max_failures=get("max_failures"),
        timeout=get("timeout"),
        checkpoint_dir=get("checkpoint_dir"),
        driver_log_verbosity="all" if get("verbose") >= 2 else "log_callback_only",
        progress=get("verbose") >= 1,
        env=env,
    )


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
