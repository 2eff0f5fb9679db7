"""Typed errors raised by sparkrunner, written for the person reading them in a notebook."""

from __future__ import annotations


class SparkRunnerError(Exception):
    """Base class of every error sparkrunner raises on purpose."""


class InvalidArgumentError(SparkRunnerError, ValueError):
    """An argument to sparkrunner was wrong; nothing was started."""


class NotPicklableError(SparkRunnerError, TypeError):
    """The training function, or something it captures or receives, cannot be sent to the ranks."""


class NotEnoughSlotsError(SparkRunnerError):
    """The Spark cluster has fewer free task slots than the requested number of ranks."""


class BarrierModeUnsupportedError(SparkRunnerError):
    """The Spark configuration cannot run a barrier stage (for example dynamic allocation is on)."""


class LauncherUnavailableError(SparkRunnerError):
    """The requested launcher cannot run here (for example `mpirun` or Horovod is missing)."""


class GpuUnavailableError(SparkRunnerError):
    """GPUs were asked for (`use_gpu=True`) but the ranks would get none, or Spark's GPU addresses do not fit
    the executor's CUDA_VISIBLE_DEVICES."""


class SparkRunnerWarning(UserWarning):
    """Something in a run the person should know, that does not stop it (e.g. a host's GPUs left unused)."""


class StartTimeoutError(SparkRunnerError, TimeoutError):
    """Not every rank started within `start_timeout` seconds."""


class RunTimeoutError(SparkRunnerError, TimeoutError):
    """The run did not finish within `timeout` seconds."""


class ChannelError(SparkRunnerError, ConnectionError):
    """The driver channel failed: a peer did not authenticate, or a connection broke."""


class RankFailedError(SparkRunnerError):
    """A rank raised an exception, or its process died; carries what happened on that rank.

    Attributes:
        rank: the rank that failed first.
        exc_type: the qualified name of the original exception type (e.g. ``"ValueError"``).
        exc_message: the original exception's message.
        remote_traceback: the traceback as printed on the rank, or ``""`` if the process died without one.
        original: the original exception object when it could be unpickled on the driver, else ``None``.
    """

    def __init__(
        self,
        rank: int,
        exc_type: str,
        exc_message: str,
        remote_traceback: str = "",
        original: BaseException | None = None,
    ) -> None:
        self.rank = rank
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.remote_traceback = remote_traceback
        self.original = original
        text = f"rank {rank} failed with {exc_type}: {exc_message}"
        if remote_traceback:
            text += f"\n\n--- traceback on rank {rank} ---\n{remote_traceback.rstrip()}"
        super().__init__(text)

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.rank, self.exc_type, self.exc_message, self.remote_traceback, None))

    @property
    def exit_code(self) -> int | None:
        """The exit code when the rank ran a script that exited non-zero (`ScriptExitError`); else None."""
        return self.original.exit_code if isinstance(self.original, ScriptExitError) else None


class ScriptExitError(SparkRunnerError):
    """Raised on a rank when its script (script mode) exits with a non-zero code."""

    def __init__(self, script: str, exit_code: int, detail: str = "") -> None:
        self.script = script
        self.exit_code = exit_code
        self.detail = detail
        super().__init__(f"{script} exited with code {exit_code}" + (f": {detail}" if detail else ""))

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.script, self.exit_code, self.detail))


class UnsupportedColumnError(SparkRunnerError, TypeError):
    """A column cannot be fed to a framework: its type, its nulls, or arrays of varying length."""


class NotEnoughDataError(SparkRunnerError, ValueError):
    """The dataset cannot give every rank at least one batch per epoch."""


class ReaderUnavailableError(SparkRunnerError, ImportError):
    """The requested data reader cannot run in this environment (for example Petastorm with pyarrow >= 15)."""
