"""sparkrunner: run distributed deep-learning training functions inside Apache Spark."""

from sparkrunner.errors import (
    AttemptsFailedError,
    DoNotRetry,
    InvalidArgumentError,
    NotEnoughSlotsError,
    NotPicklableError,
    RankFailedError,
    SparkRunnerError,
    StartTimeoutError,
)
from sparkrunner.observers import RunObserver, RunRecord
from sparkrunner.progress import TorchProgress, keras_callback, report_progress
from sparkrunner.rank import RankContext, log_to_driver, rank_context
from sparkrunner.recovery import AttemptRecord, load_checkpoint, on_stop, save_checkpoint, stopping
from sparkrunner.runner import HorovodRunner, Runner
from sparkrunner.tracking import MlflowTracking

__version__ = "0.1.0"

__all__ = [
    "AttemptRecord",
    "AttemptsFailedError",
    "DoNotRetry",
    "HorovodRunner",
    "InvalidArgumentError",
    "MlflowTracking",
    "NotEnoughSlotsError",
    "NotPicklableError",
    "RankContext",
    "RankFailedError",
    "RunObserver",
    "RunRecord",
    "Runner",
    "SparkRunnerError",
    "StartTimeoutError",
    "TorchProgress",
    "keras_callback",
    "load_checkpoint",
    "log_to_driver",
    "on_stop",
    "rank_context",
    "report_progress",
    "save_checkpoint",
    "stopping",
]
