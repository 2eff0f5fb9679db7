"""Warm sessions shared by concurrent trials: ``with runner.session_pool(2) as pool: pool.run(f, ...)``.

A `WarmSession` runs one function at a time. A search running trials from threads (Optuna's ``n_jobs``, a
thread pool) takes a pool of `size` sessions instead: each run borrows a free session, a warm one first, and
gives it back when it ends; a run finding none free waits for one. So at most `size` sets of ranks live,
trials reuse their processes, and a trial's failure replaces only the ranks of the session it ran in (as in
a lone session). Each session holds its Spark slots while its ranks are up: size the pool so that
``size * np`` fits the cluster, or the extra sessions wait for slots that idle ones keep until their
`idle_timeout`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sparkrunner.common.checks import check_number
from sparkrunner.driver.warm.session import WarmSession
from sparkrunner.errors import SparkRunnerError
from sparkrunner.options import RunOptions

if TYPE_CHECKING:
    from sparkrunner.observe.observers import RunObserver
    from sparkrunner.placement.factory import PlacementFactory

T = TypeVar("T")


class SessionPool:
    """`size` warm sessions of one `Runner`, lent to one run at a time each; safe to call from many threads."""

    def __init__(
        self,
        options: RunOptions,
        observers: Sequence[RunObserver],
        cold: PlacementFactory,
        size: int,
        idle_timeout: float,
    ) -> None:
        check_number("size", size, 1, note=" (the number of warm sessions the trials share)")
        self.sessions = [WarmSession(options, observers, cold, idle_timeout) for _ in range(size)]
        """The pool's sessions (their `launches`, `last_run`, `warm`)."""
        self._free = list(self.sessions)
        self._changed = threading.Condition()
        self._closed = False

    def run(self, main: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`WarmSession.run` on a free session of the pool (waits for one): rank 0's value."""
        return self._lend(lambda session: session.run(main, *args, **kwargs))

    def run_all(self, main: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """`WarmSession.run_all` on a free session of the pool: every rank's value, in rank order."""
        return self._lend(lambda session: session.run_all(main, *args, **kwargs))

    def _lend(self, call: Callable[[WarmSession], T]) -> T:
        session = self._take()
        try:
            return call(session)
        finally:
            with self._changed:
                self._free.append(session)
                self._changed.notify()

    def _take(self) -> WarmSession:
        """A free session, one whose ranks are up if there is one; waits while every session runs."""
        with self._changed:
            while not self._free and not self._closed:
                self._changed.wait()
            if self._closed:
                raise SparkRunnerError(
                    "this session pool is closed; start another with runner.session_pool()"
                )
            session = next((s for s in self._free if s.warm), self._free[0])
            self._free.remove(session)
            return session

    @property
    def launches(self) -> int:
        """How many times the pool's sessions started ranks (at most `size` while no run failed)."""
        return sum(session.launches for session in self.sessions)

    def close(self) -> None:
        """Stop every session's ranks (each waits for its run in flight); later runs are refused."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        for session in self.sessions:
            session.close()

    def __enter__(self) -> SessionPool:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
