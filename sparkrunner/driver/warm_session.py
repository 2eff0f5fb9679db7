"""Warm sessions: ``with Runner(np=4).session() as s: s.run(f); s.run(g)`` keeps the ranks between runs.

The first run starts the ranks (local processes, or a barrier stage that stays up); later runs reuse those
processes, so their imports (and CUDA contexts) are paid once. Each run goes through `Runner.run`'s own path
(its own driver channel, typed errors, stacks, output, MLflow, retries); only where the ranks run differs
(`sparkrunner.placement.warm`), and MLflow records the run from a thread of its own
(`MlflowTracking.in_background`): the run is created before the ranks start, the rest is written after the
run returns. Policy for failures: after any failed run every rank of the session is stopped, and the next run
starts fresh ones, so a dirty process (its function raised, it died, it was told to stop) never runs another
function.
"""

from __future__ import annotations

import copy
import os
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparkrunner.driver.in_flight import InFlightWatch
from sparkrunner.errors import SparkRunnerError
from sparkrunner.observe.tracking import MlflowTracking
from sparkrunner.options import check_number
from sparkrunner.placement.warm import WarmRanks

if TYPE_CHECKING:
    from sparkrunner.observe.observers import RunRecord
    from sparkrunner.runner import Runner


class WarmSession:
    """Runs of one `Runner` on ranks kept alive between them; one run at a time (other threads wait).

    Use it in a ``with`` block, or keep it across notebook cells and call `close()` when done. An idle
    session stops its ranks (freeing their Spark slots) after `idle_timeout` seconds, and the next run starts
    new ones; the ranks are also stopped when the session is garbage-collected or the interpreter exits.
    """

    def __init__(self, runner: Runner, idle_timeout: float) -> None:
        check_number("idle_timeout", idle_timeout, 0, integer=False, above=True)
        self._runner = copy.copy(runner)
        self._runner._in_flight = InFlightWatch()
        self._runner.last_run = None
        # a run returns without waiting for MLflow (each session writes through its own tracking observer)
        self._runner._observers = [
            o.in_background() if isinstance(o, MlflowTracking) else o for o in runner._observers
        ]
        self._tracking = [o for o in self._runner._observers if isinstance(o, MlflowTracking)]
        in_flight = self._runner._in_flight
        self._ranks = WarmRanks(runner.placement, lambda: in_flight.session, idle_timeout)
        self._runner._warm_ranks = self._ranks
        self._lock = threading.Lock()
        self._close = weakref.finalize(self, self._ranks.close)  # also at interpreter exit

    def run(self, main: Callable[..., Any] | str | os.PathLike[str], *args: Any, **kwargs: Any) -> Any:
        """`Runner.run` on the session's ranks: rank 0's value, or the first failure raised."""
        return self._serialized(self._runner.run, main, *args, **kwargs)

    def run_all(self, main: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """`Runner.run_all` on the session's ranks: every rank's value, in rank order."""
        return self._serialized(self._runner.run_all, main, *args, **kwargs)

    def run_script(self, path: str | os.PathLike[str], *argv: Any, **options: Any) -> None:
        """`Runner.run_script` on the session's ranks."""
        self._serialized(self._runner.run_script, path, *argv, **options)

    def run_module(self, module: str, *argv: Any, **options: Any) -> None:
        """`Runner.run_module` on the session's ranks."""
        self._serialized(self._runner.run_module, module, *argv, **options)

    def _serialized(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if not self._close.alive:
                raise SparkRunnerError(
                    "this warm session is closed; start another with runner.session(), or use runner.run()"
                )
            return call(*args, **kwargs)

    def ask_to_stop(self, reason: str = "stop") -> bool:
        """`Runner.ask_to_stop` for the session's run in flight (its ranks are replaced before the next run)."""
        return self._runner.ask_to_stop(reason)

    @property
    def last_run(self) -> RunRecord | None:
        """The `RunRecord` of the session's latest run."""
        return self._runner.last_run

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
