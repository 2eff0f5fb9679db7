"""Warm sessions: ``with Runner(np=4).session() as s: s.run(f); s.run(g)`` keeps the ranks between runs.

The first run starts the ranks (local processes, or a barrier stage that stays up); later runs reuse those
processes, so their imports (and CUDA contexts) are paid once. Each run goes through `Runner.run`'s own path
(its own driver channel, typed errors, stacks, output, MLflow, retries); only where the ranks run differs
(`sparkrunner.driver.warm.live_ranks`), and MLflow records the run from a thread of its own
(`MlflowTracking.in_background`): the run is created before the ranks start, the rest is written after the
run returns. Policy for failures: after any failed run every rank of the session is stopped, and the next run
starts fresh ones, so a dirty process (its function raised, it died, it was told to stop) never runs another
function.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sparkrunner.common.checks import check_number
from sparkrunner.driver.in_flight import InFlightWatch
from sparkrunner.driver.run import CodeDir, RunPipeline
from sparkrunner.driver.warm.live_ranks import WarmRanks
from sparkrunner.errors import SparkRunnerError
from sparkrunner.observe.tracking import MlflowTracking
from sparkrunner.options import RunOptions
from sparkrunner.placement.factory import PlacementFactory

if TYPE_CHECKING:
    from sparkrunner.observe.observers import RunObserver, RunRecord


class WarmSession:
    """Runs of one `Runner` on ranks kept alive between them; one run at a time (other threads wait).

    Use it in a ``with`` block, or keep it across notebook cells and call `close()` when done. An idle
    session stops its ranks (freeing their Spark slots) after `idle_timeout` seconds, and the next run starts
    new ones; the ranks are also stopped when the session is garbage-collected or the interpreter exits.
    """

    def __init__(
        self,
        options: RunOptions,
        observers: Sequence[RunObserver],
        cold: PlacementFactory,
        idle_timeout: float,
    ) -> None:
        check_number("idle_timeout", idle_timeout, 0, integer=False, above=True)
        # a run returns without waiting for MLflow (each session writes through its own tracking observer)
        own = [o.in_background() if isinstance(o, MlflowTracking) else o for o in observers]
        self._tracking = [o for o in own if isinstance(o, MlflowTracking)]
        in_flight = InFlightWatch()
        self._ranks = WarmRanks(cold, lambda: in_flight.channel, idle_timeout)
        # its ranks outlive the run that started them: started cold, not children of a zygote another run may close
        self._pipeline = RunPipeline(replace(options, cold_start=True), own, self._ranks, in_flight)
        self._lock = threading.Lock()
        self._close = weakref.finalize(self, self._ranks.close)  # also at interpreter exit

    def run(self, main: Callable[..., Any] | str | os.PathLike[str], *args: Any, **kwargs: Any) -> Any:
        """`Runner.run` on the session's ranks: rank 0's value, or the first failure raised."""
        return self._serialized(self._pipeline.run, main, args, kwargs)

    def run_all(self, main: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """`Runner.run_all` on the session's ranks: every rank's value, in rank order."""
        return self._serialized(self._pipeline.run_all, main, args, kwargs)

    def run_script(self, path: str | os.PathLike[str], *argv: Any, code_dir: CodeDir = None) -> None:
        """`Runner.run_script` on the session's ranks."""
        self._serialized(self._pipeline.run_script, path, argv, code_dir)

    def run_module(self, module: str, *argv: Any, code_dir: CodeDir = None) -> None:
        """`Runner.run_module` on the session's ranks."""
        self._serialized(self._pipeline.run_module, module, argv, code_dir)

    def _serialized(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if not self._close.alive:
                raise SparkRunnerError(
                    "this warm session is closed; start another with runner.session(), or use runner.run()"
                )
            return call(*args, **kwargs)

    def ask_to_stop(self, reason: str = "stop") -> bool:
        """`Runner.ask_to_stop` for the session's run in flight (its ranks are replaced before the next run)."""
        return self._pipeline.ask_to_stop(reason)

    @property
    def last_run(self) -> RunRecord | None:
        """The `RunRecord` of the session's latest run."""
        return self._pipeline.last_run

    @property
    def launches(self) -> int:
        """How many times the session started its ranks: 1 while every run reused them."""
        return self._ranks.launches

    @property
    def warm(self) -> bool:
        """Whether ranks are up now, waiting for the next run."""
        return self._ranks.is_live()

    def close(self) -> None:
        """Stop the session's ranks now (waits for a run in flight to end) and for its MLflow writes; idempotent."""
        with self._lock:
            self._close()
            for tracking in self._tracking:
                tracking.flush()

    def __enter__(self) -> WarmSession:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
