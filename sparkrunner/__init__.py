"""sparkrunner: run distributed deep-learning training functions inside Apache Spark."""

from typing import TYPE_CHECKING

from sparkrunner.common import import_began as _import_began  # noqa: F401  (first: its clock starts here)
from sparkrunner.common.lazy_exports import lazy_exports
from sparkrunner.common.version import __version__ as __version__

# Every error is also importable from here; sparkrunner.errors is where the docs import them from.
from sparkrunner.errors import (
    AttemptsFailedError,
    BarrierModeUnsupportedError,
    BarrierSyncTimeoutError,
    ChannelError,
    CheckpointDirError,
    DataNotSharedError,
    DistributorRuntimeError,
    DoNotRetry,
    DriverGpuError,
    ExecutorDecommissionedError,
    GpuUnavailableError,
    HangError,
    InvalidArgumentError,
    KerasStrategyError,
    LauncherUnavailableError,
    MissingExtraError,
    NotEnoughDataError,
    NotEnoughSlotsError,
    NotPicklableError,
    RankFailedError,
    RankProcessDiedError,
    RanksVanishedError,
    ReaderUnavailableError,
    ResultNotPicklableError,
    ResultNotUnpicklableError,
    RunCancelledError,
    RunTimeoutError,
    ScriptExitError,
    SparkRunnerError,
    SparkRunnerWarning,
    StallError,
    StartTimeoutError,
    StragglerWarning,
    StreamFeedError,
    UnsupportedColumnError,
)
from sparkrunner.ranks.api import RankContext, log_to_driver, rank_context
from sparkrunner.ranks.checkpoints import load_checkpoint, save_checkpoint
from sparkrunner.ranks.graceful_stop import on_stop, stopping
from sparkrunner.ranks.sharded_checkpoint import latest_sharded_checkpoint, sharded_checkpoint

if TYPE_CHECKING:
    from sparkrunner.observe.observers import AttemptRecord, RunObserver, RunRecord
    from sparkrunner.observe.tracking import MlflowTracking
    from sparkrunner.ranks.anatomy import timed
    from sparkrunner.ranks.keras_data_parallel import keras_data_parallel, keras_metric_average
    from sparkrunner.ranks.progress import TorchProgress, keras_callback, report_progress
    from sparkrunner.runner import HorovodRunner, Runner


# Imported on first use: every rank imports this package, and the driver side (Runner, MLflow tracking)
# costs a rank's start ~0.5 s it does not need.
_LAZY = {
    "AttemptRecord": "sparkrunner.observe.observers",
    "AnatomyEvent": "sparkrunner.observe.events",
    "LaunchEvent": "sparkrunner.observe.events",
    "ProgressEvent": "sparkrunner.observe.events",
    "RunObserver": "sparkrunner.observe.observers",
    "RunRecord": "sparkrunner.observe.observers",
    "TorchProgress": "sparkrunner.ranks.progress",
    "keras_callback": "sparkrunner.ranks.progress",
    "keras_data_parallel": "sparkrunner.ranks.keras_data_parallel",
    "keras_metric_average": "sparkrunner.ranks.keras_data_parallel",
    "report_progress": "sparkrunner.ranks.progress",
    "timed": "sparkrunner.ranks.anatomy",
    "HorovodRunner": "sparkrunner.runner",
    "Runner": "sparkrunner.runner",
    "MlflowTracking": "sparkrunner.observe.tracking",
}


__getattr__ = lazy_exports("sparkrunner", _LAZY)


__all__ = [
    "AnatomyEvent",
    "AttemptRecord",
    "AttemptsFailedError",
    "BarrierModeUnsupportedError",
    "BarrierSyncTimeoutError",
    "ChannelError",
    "CheckpointDirError",
    "DataNotSharedError",
    "DistributorRuntimeError",
    "DoNotRetry",
    "DriverGpuError",
    "ExecutorDecommissionedError",
    "GpuUnavailableError",
    "HangError",
    "HorovodRunner",
    "InvalidArgumentError",
    "KerasStrategyError",
    "LaunchEvent",
    "LauncherUnavailableError",
    "MissingExtraError",
    "MlflowTracking",
    "NotEnoughDataError",
    "NotEnoughSlotsError",
    "NotPicklableError",
    "ProgressEvent",
    "RankContext",
    "RankFailedError",
    "RankProcessDiedError",
    "RanksVanishedError",
    "ReaderUnavailableError",
    "ResultNotPicklableError",
    "ResultNotUnpicklableError",
    "RunCancelledError",
    "RunObserver",
    "RunRecord",
    "RunTimeoutError",
    "Runner",
    "ScriptExitError",
    "SparkRunnerError",
    "SparkRunnerWarning",
    "StallError",
    "StartTimeoutError",
    "StragglerWarning",
    "StreamFeedError",
    "TorchProgress",
    "UnsupportedColumnError",
    "keras_callback",
    "keras_data_parallel",
    "keras_metric_average",
    "latest_sharded_checkpoint",
    "load_checkpoint",
    "log_to_driver",
    "on_stop",
    "rank_context",
    "report_progress",
    "save_checkpoint",
    "sharded_checkpoint",
    "stopping",
    "timed",
]
