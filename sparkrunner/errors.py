"""Typed errors raised by sparkrunner, written for the person reading them in a notebook. Every error a user may
catch is importable from here (docs/errors.md; `sparkrunner` re-exports each).

Only errors (and warnings) live here: every public name of this module is an exception class.
"""

import signal as _signal
import typing as _typing

if _typing.TYPE_CHECKING:
    from sparkrunner.stack_report import StackReport


class SparkRunnerError(Exception):
    """Base class of every error sparkrunner raises on purpose.

    Attributes:
        artifacts: long diagnostics kept out of the message (file name -> text: every rank's stacks, full
            output tails); MLflow tracking saves each as an artifact of the run.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.artifacts: dict[str, str] = {}


class InvalidArgumentError(SparkRunnerError, ValueError):
    """An argument to sparkrunner was wrong; nothing was started."""


class MissingExtraError(SparkRunnerError, ImportError):
    """A feature needs an optional dependency that is not installed; the message names the extra to install."""


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


class StragglerWarning(SparkRunnerWarning):
    """One rank's own step time (its step less its wait in collectives) stayed well above the ranks' median:
    the message names the rank, where it runs, and whether data or compute explains the gap."""


class HangError(SparkRunnerError, TimeoutError):
    """Ranks did not get on in time. `stack_report` (a `StackReport`) holds every live
    rank's Python stacks (all threads) and its last output lines; the message names where each rank was."""

    stack_report: "StackReport | None" = None


class StartTimeoutError(HangError):
    """Not every rank started within `start_timeout` seconds."""


class RunTimeoutError(HangError):
    """The run did not finish within `timeout` seconds."""


class StallError(HangError):
    """No rank printed or reported progress for `stall_timeout` seconds (with ``on_stall="fail"``)."""


class BarrierSyncTimeoutError(SparkRunnerError, TimeoutError):
    """In a rank, `BarrierTaskContext.get().barrier()` or `allGather()` waited `BARRIER_SYNC_TIMEOUT_S` for the
    other ranks to make the same call (every rank must make the same number of them)."""


class ExecutorDecommissionedError(SparkRunnerError):
    """Spark began decommissioning an executor that runs ranks of this run (a spot node being reclaimed, a worker
    drained): the ranks were stopped gracefully, so that they could save a checkpoint. Retried with
    ``max_failures`` like any failed attempt."""


class RunCancelledError(SparkRunnerError):
    """The run's Spark job was cancelled (its job group, its job from the UI's kill link, its job tag): the run
    stopped as on Ctrl-C, every rank stopped, and the executors kept. Never retried."""


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
        location: where the rank ran: barrier task, host and pid (``""`` when unknown).
        output_tail: the last lines the rank printed (shown in the message whatever the log verbosity).
        other_failures: failures of other ranks seen at the same time, usually consequences of this one.
    """

    def __init__(
        self,
        rank: int,
        exc_type: str,
        exc_message: str,
        remote_traceback: str = "",
        original: BaseException | None = None,
        location: str = "",
        output_tail: tuple[str, ...] = (),
    ) -> None:
        self.rank = rank
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.remote_traceback = remote_traceback
        self.original = original
        self.location = location
        self.output_tail = tuple(output_tail)
        self.other_failures: list[RankFailedError] = []
        text = f"rank {rank} failed with {exc_type}: {exc_message}"
        if location:
            text += f"\n(rank {rank} ran in {location})"
        if remote_traceback:
            text += f"\n\n--- traceback on rank {rank} ---\n{remote_traceback.rstrip()}"
        if output_tail:
            text += f"\n\n--- last output of rank {rank} ---\n" + "\n".join(output_tail)
        super().__init__(text)

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        args = (self.exc_type, self.exc_message, self.remote_traceback, None, self.location, self.output_tail)
        return (type(self), (self.rank, *args))

    @property
    def exit_code(self) -> int | None:
        """The exit code when the rank ran a script that exited non-zero (`ScriptExitError`); else None."""
        return self.original.exit_code if isinstance(self.original, ScriptExitError) else None


class RankProcessDiedError(RankFailedError):
    """A rank's process ended without reporting a result (killed, crashed, `os._exit`).

    Attributes (besides `RankFailedError`'s; `exc_type` stays ``"RankProcessDied"``):
        exit_code: the process's exit code when known (negative: killed by that signal), else None.
        signal: the name of the signal that killed it (``"SIGKILL"``), else None.
    """

    def __init__(
        self,
        rank: int,
        exc_message: str,
        location: str = "",
        output_tail: tuple[str, ...] = (),
        exit_code: int | None = None,
    ) -> None:
        self._exit_code = exit_code
        super().__init__(rank, "RankProcessDied", exc_message, "", None, location, output_tail)

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.rank, self.exc_message, self.location, self.output_tail, self._exit_code))

    @property
    def exit_code(self) -> int | None:
        """The process's exit code when known (negative: killed by signal -exit_code)."""
        return self._exit_code

    @property
    def signal(self) -> str | None:
        """The name of the signal that killed the process (``"SIGKILL"``), else None."""
        if self._exit_code is None or self._exit_code >= 0:
            return None
        try:
            return _signal.Signals(-self._exit_code).name
        except ValueError:
            return None


class ResultNotPicklableError(NotPicklableError):
    """Raised on a rank whose training function returned a value that cannot be pickled back to the driver;
    the driver's `RankFailedError` carries it as `.original`."""


class ResultNotUnpicklableError(NotPicklableError):
    """Every rank succeeded, but a return value the driver was sent cannot be unpickled there (its class cannot
    be imported on the driver, or rebuilding it failed). Another attempt would end the same way: not retried."""

    def __init__(self, rank: int, type_name: str, reason: BaseException) -> None:
        super().__init__(
            f"rank {rank}'s return value could not be unpickled on the driver: {type(reason).__name__}: {reason}. "
            f"It is a {type_name}; return plain Python, numpy or torch objects whose classes the driver can "
            f"import (a dict of numbers, arrays or tensors; the state_dict of a model rather than the model; "
            f"or write the object to a file and return its path, or send it with send_file_to_driver)."
        )
        self.rank = rank
        self.type_name = type_name


class RanksVanishedError(SparkRunnerError):
    """Ranks ended (or their Spark stage did) without any of them reporting a result or a failure.

    Attributes:
        missing: how many ranks never reported.
        detail: what the barrier tasks and Spark said about how they ended.
    """

    def __init__(self, missing: int, detail: str) -> None:
        self.missing = missing
        self.detail = detail
        super().__init__(f"{missing} rank(s) never reported a result: {detail}")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.missing, self.detail))


class DoNotRetry(SparkRunnerError):
    """Raise it (or wrap an exception in it) inside `main` to fail the run at once, whatever `max_failures`.

    ``raise DoNotRetry(ValueError("bad learning rate"))`` or ``raise DoNotRetry("bad learning rate")``.
    """

    def __init__(self, error: BaseException | str) -> None:
        self.error = error
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        super().__init__(text)

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.error,))


class AttemptsFailedError(SparkRunnerError):
    """Every attempt of a run failed (or one failed with an error that is not retried); carries them all.

    Attributes:
        errors: each attempt's error, first attempt first.
    """

    def __init__(self, message: str, errors: list[BaseException]) -> None:
        self.errors = errors
        super().__init__(message)


class KerasStrategyError(SparkRunnerError, TypeError):
    """Raised on a rank where Keras 3's fit failed under a tf.distribute strategy (keras-team/keras#20585):
    names the two ways out; TensorFlow's own error is its cause."""


class CheckpointDirError(InvalidArgumentError):
    """`checkpoint_dir` is missing, not writable, or not shared by the driver and every rank."""


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


class DataNotSharedError(SparkRunnerError):
    """A dataset's files are on one machine's own disk, so other hosts of the run cannot read them."""


class StreamFeedError(SparkRunnerError):
    """A streamed DataFrame could not feed a pass: a feeder task failed for good (the message names its
    partition and Spark's reason) or a partition gave other rows than when it was counted."""


class DistributorRuntimeError(SparkRunnerError, RuntimeError):
    """A drop-in (`sparkrunner.compat`) refused where its original raises RuntimeError (so ``except RuntimeError``
    keeps working)."""


class DriverGpuError(GpuUnavailableError, RuntimeError):
    """A drop-in was asked for GPUs but Spark's configuration gives none (RuntimeError, as in the originals)."""
