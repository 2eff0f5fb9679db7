"""The public entry point: validate, serialize, place the ranks, supervise them, return rank 0's value."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sparkrunner.driver.in_flight import InFlight
from sparkrunner.driver.retry_policy import RecoveryOptions, RetryPredicate
from sparkrunner.driver.run import RunPipeline
from sparkrunner.driver.warm.pool import SessionPool
from sparkrunner.driver.warm.session import WarmSession
from sparkrunner.log_handler import install_default_handler
from sparkrunner.observe.anatomy import AnatomyObserver
from sparkrunner.observe.observers import RunObserver, RunRecord
from sparkrunner.observe.progress import ProgressObserver
from sparkrunner.observe.tracking import tracking_observer
from sparkrunner.options import LauncherName, OnStall, RunOptions, Verbosity, options_docstring, parse_np
from sparkrunner.placement.factory import ColdPlacements
from sparkrunner.stack_report import StackReport
from sparkrunner.timeouts import SESSION_IDLE_S, START_TIMEOUT_S, STOP_GRACE_S

log = logging.getLogger(__name__)


class Runner:
    """Runs a Python function (or a script, or a module) on `np` ranks and returns rank 0's return value.

    After each call, `last_run` is the `RunRecord` of that run (duration, error, attempts, per-rank timings,
    MLflow id). Every option is declared, documented and checked once, in `sparkrunner.options.RunOptions`;
    the list below is made from it.
    """

    def __init__(
        self,
        np: int | tuple[int, int],
        *,
        spark: Any = None,
        launcher: LauncherName = "auto",
        driver_log_verbosity: Verbosity = "all",
        start_timeout: float = START_TIMEOUT_S,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        tracking: Any = None,
        progress: bool = True,
        observers: Sequence[RunObserver] = (),
        max_failures: int = 0,
        checkpoint_dir: str | None = None,
        stop_grace_s: float = STOP_GRACE_S,
        retry_if: RetryPredicate | None = None,
        stall_timeout: float | None = None,
        on_stall: OnStall = "warn",
        horovod: bool | None = None,
        use_gpu: bool | None = None,
        ranks_per_task: int | None = None,
        port_range: tuple[int, int] | None = None,
        cold_start: bool = False,
    ) -> None:
        install_default_handler()
        np, np_range = parse_np(np)
        self.options = RunOptions(
            np=np, np_range=np_range, spark=spark, launcher=launcher, driver_log_verbosity=driver_log_verbosity,
            start_timeout=start_timeout, timeout=timeout, env=env or {}, tracking=tracking,
            progress=progress, observers=observers, max_failures=max_failures,
            checkpoint_dir=checkpoint_dir, stop_grace_s=stop_grace_s, retry_if=retry_if,
            stall_timeout=stall_timeout, on_stall=on_stall, horovod=horovod, use_gpu=use_gpu,
            ranks_per_task=ranks_per_task, port_range=port_range, cold_start=cold_start,
        )  # fmt: skip
        live = [ProgressObserver(show=bool(progress)), AnatomyObserver(show=bool(progress))]
        self._observers = [*live, *tracking_observer(tracking), *observers]
        self._placements = ColdPlacements(self.options.np, self.options.start_timeout, self.options.use_gpu)
        self._pipeline = RunPipeline(self.options, self._observers, self._placements)

    @property
    def last_run(self) -> RunRecord | None:
        """The `RunRecord` of the latest run (duration, error, attempts, per-rank timings, MLflow id)."""
        return self._pipeline.last_run

    @property
    def received_files(self) -> dict[str, str]:
        """After `run`: files the ranks sent (e.g. a Horovod timeline), "rank N/name" -> path on the driver."""
        return self._pipeline.received_files

    @property
    def recovery(self) -> RecoveryOptions:
        """The recovery part of the options (retry policy, checkpoint folder, stop grace)."""
        return self._pipeline.recovery

    def run(self, main: Callable[..., Any] | str | os.PathLike[str], *args: Any, **kwargs: Any) -> Any:
        """Run ``main(*args, **kwargs)`` on every rank; return rank 0's value or raise the first failure.

        ``main`` may also be the path of a script: ``run("train.py", "--lr", "0.1")`` is `run_script`.
        """
        return self._pipeline.run(main, args, kwargs)

    def session(self, idle_timeout: float = SESSION_IDLE_S) -> WarmSession:
        """Keep the ranks alive between runs: ``with runner.session() as s: s.run(f); s.run(g)``; from the second
        run on, no process starts. See `sparkrunner.driver.warm.session.WarmSession`."""
        return WarmSession(self.options, self._observers, self._placements, idle_timeout)

    def session_pool(self, size: int, idle_timeout: float = SESSION_IDLE_S) -> SessionPool:
        """`size` warm sessions that concurrent trials share: ``pool.run(f)`` borrows a free one (a warm one
        first). See `sparkrunner.driver.warm.pool.SessionPool`."""
        return SessionPool(self.options, self._observers, self._placements, size, idle_timeout)

    def run_all(self, main: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """Like `run`, but return every rank's return value, in rank order (as ``horovod.spark.run`` does)."""
        return self._pipeline.run_all(main, args, kwargs)

    def run_script(
        self, path: str | os.PathLike[str], *argv: Any, code_dir: str | os.PathLike[str] | None = None
    ) -> None:
        """Run the script at `path` as ``__main__`` on every rank, with ``sys.argv = [path, *argv]``.

        The script is sent from the driver; `code_dir`, a folder of helper modules, is sent with it and put
        first on ``sys.path``. A non-zero ``sys.exit`` fails the run with `RankFailedError` (``exit_code``).
        """
        self._pipeline.run_script(path, argv, code_dir)

    def run_module(self, module: str, *argv: Any, code_dir: str | os.PathLike[str] | None = None) -> None:
        """Run `module` as ``python -m module argv...`` on every rank; `code_dir` ships its package along."""
        self._pipeline.run_module(module, argv, code_dir)

    def dump_stacks(self) -> StackReport:
        """Every live rank's Python stacks (all threads) and last output lines, while `run` is in flight.

        Call it from another thread or notebook cell; ``print(report)`` shows the full dumps,
        ``report.summary()`` one line per rank.
        """
        return self._pipeline.dump_stacks()

    def ask_to_stop(self, reason: str = "stop") -> bool:
        """From another thread or an observer's hook: ask the ranks of the run in flight to stop gracefully
        (`sparkrunner.stopping()` turns true, `rank_context().stop_reason == reason`; e.g. ``"prune"``). The
        ranks end their run as they choose, within `stop_grace_s`. False when no run is in flight."""
        return self._pipeline.ask_to_stop(reason)

    @property
    def in_flight(self) -> InFlight | None:
        """The ranks of the run in flight that have connected so far (rank, pid, host, barrier task), or None
        when no run of this Runner is running; see `sparkrunner.driver.in_flight`."""
        return self._pipeline.in_flight_view()

    def wait_in_flight(self, timeout: float, ranks: int | None = None) -> InFlight:
        """From another thread: wait until a run of this Runner has `ranks` (default: every) rank connected,
        and return `in_flight` then; raises TimeoutError after `timeout` seconds."""
        return self._pipeline.in_flight.wait(ranks, timeout)


Runner.__doc__ = (Runner.__doc__ or "") + options_docstring()


class HorovodRunner(Runner):
    """Drop-in for Databricks' HorovodRunner: ``HorovodRunner(np=...).run(main, **kwargs)`` (the direct launcher
    hosts Horovod's rendezvous wherever Horovod is installed, as for every `Runner`)."""

    def __init__(
        self, np: int, driver_log_verbosity: Verbosity = "log_callback_only", **options: Any
    ) -> None:
        super().__init__(np, driver_log_verbosity=driver_log_verbosity, **options)

    def run(self, main: Callable[..., Any] | str | os.PathLike[str], **kwargs: Any) -> Any:
        return super().run(main, **kwargs)
