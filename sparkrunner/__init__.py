"""sparkrunner: run distributed deep-learning training functions inside Apache Spark."""

from sparkrunner.errors import (
    InvalidArgumentError,
    NotEnoughSlotsError,
    NotPicklableError,
    RankFailedError,
    SparkRunnerError,
    StartTimeoutError,
)
from sparkrunner.rank import RankContext, log_to_driver, rank_context
from sparkrunner.runner import HorovodRunner, Runner

__version__ = "0.1.0"

__all__ = [
    "HorovodRunner",
    "InvalidArgumentError",
    "NotEnoughSlotsError",
    "NotPicklableError",
    "RankContext",
    "RankFailedError",
    "Runner",
    "SparkRunnerError",
    "StartTimeoutError",
    "log_to_driver",
    "rank_context",
]
