"""sparkrunner: run distributed deep-learning training functions inside Apache Spark."""

from sparkrunner.errors import (
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
from sparkrunner.runner import HorovodRunner, Runner
from sparkrunner.tracking import MlflowTracking

__version__ = "0.1.0"

__all__ = [
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
    "log_to_driver",
    "rank_context",
    "report_progress",
]
