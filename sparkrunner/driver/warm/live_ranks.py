"""A warm session's placement: its ranks outlive each run, so later runs skip the start-up and the imports.

`WarmRanks` owns the session's long-lived ranks: launched (through the ordinary placement, local processes
or a barrier stage that stays up) on the first run that needs them, served run after run through a
`WarmHome`, and torn down after any failed run (the next run launches fresh ones: a dirty rank is never
reused), after `idle_timeout` without a run (freeing the Spark slots), or on close. Each run's placement is a
`sparkrunner.placement.warm.WarmPlacement` that asks these ranks.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkrunner.common.environment import Env
from sparkrunner.common.rank_job import RankJob
from sparkrunner.driver.attempt import teardown
from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.driver.warm.home import WarmHome
from sparkrunner.launch import Launcher
from sparkrunner.observe.observers import AttemptRecord
from sparkrunner.placement import Placement
from sparkrunner.placement.factory import PlacementFactory
from sparkrunner.placement.warm import Shape, WarmPlacement
from sparkrunner.system.network import server_port

log = logging.getLogger(__name__)


@dataclass
class _Launch:
    """One launch of live ranks: what `WarmPlacement` sees of it is a `ServedRun`."""

    shape: Shape
    placement: Placement
    home: WarmHome
    attempt_id: str
    """The id the launched ranks carry as their attempt's (`Env.ATTEMPT_ID`, derived from the launch's id as any
    attempt's is from its run's): how their leftovers are found."""

    def lost(self) -> list[int]:
        return self.home.lost()

    def spark_task_ids(self) -> dict[int, int]:
        return self.home.addresses.spark_task_ids()


class WarmRanks:
    """The long-lived ranks of one warm session (one run at a time: the session serializes its runs)."""

    def __init__(
        self, cold: PlacementFactory, run_channel: Callable[[], AttemptChannel | None], idle_timeout: float
    ) -> None:
        self._cold = cold
        self.run_channel = run_channel
        """The `AttemptChannel` of the run in flight (None between runs)."""
        self._idle_timeout = idle_timeout
        self._lock = threading.RLock()
        self._live: _Launch | None = None
        self._idle: threading.Timer | None = None
        self.launches = 0
        """How many times ranks were started: 1 while every run reused them."""

    def __call__(self, launcher: Launcher, spark: Any, tasks: int) -> WarmPlacement:
        """The session's placement factory: one run's placement on the live ranks."""
        return WarmPlacement(self, lambda: self._cold(launcher, spark, tasks), (launcher.name, tasks))

    def check(self, launcher: Launcher, spark: Any, tasks: int) -> None:
        """Live ranks for this launcher and number of tasks hold their slots; else new ones must be placeable."""
        if self.live_placement((launcher.name, tasks)) is None:
            self._cold.check(launcher, spark, tasks)

    def is_live(self) -> bool:
        with self._lock:
            return self._live is not None

    def live_placement(self, launcher_tasks: tuple[str, int]) -> Placement | None:
        """Where the live ranks run, when they were launched for this launcher and number of tasks."""
        with self._lock:
            live = self._live
        return live.placement if live is not None and live.shape[:2] == launcher_tasks else None

    def serve(self, cold: Callable[[], Placement], job: RankJob, shape: Shape, description: str) -> _Launch:
        """Serve `job` on the live ranks; first launch them in `cold()` when none of this `shape` are live."""
        with self._lock:
            self._cancel_idle_timer()
            if self._live is not None and (self._live.shape != shape or self._live.home.lost()):
                self._tear_down()
            if self._live is None:
                self._live = self._launch(cold(), shape, job, description)
            self._live.home.serve(
                job.driver,
                job.secret,
                {**job.user_env, Env.RUN_ID: job.run_id, Env.ATTEMPT_ID: job.attempt_id},
            )
            return self._live

    def _launch(self, cold: Placement, shape: Shape, job: RankJob, description: str) -> _Launch:
        home = WarmHome(cold.bind_host, server_port(cold.bind_host, job.port_range))
        launch_id = f"warm-{uuid.uuid4().hex}"
        launch_job = dataclasses.replace(
            job, attempt_id=AttemptRecord.id_for(launch_id, 0), run_id=launch_id, driver=(cold.driver_host, home.server.port), secret=home.secret,
            user_env={Env.WARM: "1"},
        )  # fmt: skip
        try:
            cold.start(launch_job, f"{description} (warm session)")
        except BaseException:
            home.close()
            raise
        self.launches += 1
        log.debug("warm session: started %d task(s) of ranks (launch %s)", shape[1], launch_id)
        return _Launch(shape, cold, home, launch_job.attempt_id)

    def end_run(self, clean: bool) -> None:
        """The run is over: keep the ranks for the next one when it ended cleanly, else tear them down."""
        with self._lock:
            if self._live is None:
                return
            self._live.home.end_run()
            if clean and not self._live.home.lost():
                self._arm_idle_timer()
            else:
                self._tear_down()

    def _arm_idle_timer(self) -> None:
        self._idle = threading.Timer(self._idle_timeout, self._release_idle)
        self._idle.daemon = True
        self._idle.start()

    def _cancel_idle_timer(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _release_idle(self) -> None:
        with self._lock:
            if self._idle is None or self._live is None:
                return  # a run took the ranks meanwhile, or they are gone already
            log.info(
                "warm session idle for %g s: its ranks were stopped (and their slots freed); the next run "
                "starts new ones",
                self._idle_timeout,
            )
            self._tear_down()

    def _tear_down(self) -> None:
        """End every rank of the live launch and everything it started."""
        live, self._live = self._live, None
        self._cancel_idle_timer()
        if live is None:
            return
        live.home.close()
        live.placement.stop()
        teardown.sweep_leftovers(live.attempt_id, f"warm session {live.attempt_id}")

    def run_over(self) -> bool:
        """Every rank of the run in flight reported success and hung up (its output relay too): it is back,
        waiting."""
        channel = self.run_channel()
        if channel is None:
            return False
        with channel.changed:
            report = channel.report
            ended = report.all_done() and report.all_gone() and len(report.output_ended) == report.num_ranks
            return ended and not report.errors and not report.vanished

    def close(self) -> None:
        """Stop the ranks now; a later run would start new ones."""
        with self._lock:
            self._tear_down()
