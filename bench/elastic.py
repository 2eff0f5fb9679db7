"""Elastic world size: time from an executor's loss to the first step at the smaller size, and from the
slots' return to the first step at the larger size.

The scenario of tests/recovery/test_elastic.py (`tests/recovery/elastic_scenario.py`): `Runner(np=(2, 4))` on
local-cluster[2,2,1024], launcher direct or mpirun; at step 8 the bench kills the executor JVM hosting rank 1
and holds its replacement back (SIGSTOP), so attempt 1 runs 2 ranks; at step 16 it lets the replacement go,
and the run grows back to 4 at its next checkpoint. Prints, per repeat and as medians, with the load average:

    kill -> first step at 2:  the failure noticed, attempt 0 shut down, 2 ranks started, resumed, one step
    return -> first step at 4: the executor registers, the driver notices (ELASTIC_POLL_S), the ranks save and
                               leave, 4 ranks start, resume, one step

and where that time goes: kill -> attempt 0 ended; return -> 4 slots registered (the executor JVM, held
before it registered, starts) -> attempt 1 ended (the rescale stop, the ranks' save) -> first step at 4.
With --timeline, each recovery's phases in order, in seconds since the kill (or the return) and since the phase
before: the driver's debug log (a rank lost, the failure attributed, the ranks stopped, the stage ended, the
next stage submitted, its tasks joined the address exchange, its ranks connected), Spark's task launch times
(its REST API) and the ranks' own marks (`elastic_scenario.Timeline`: process start, function entered,
process group, loader and model, checkpoint, first batch, first step; the last rank to reach each).

    PYTHONPATH=$PWD .venv/bin/python bench/elastic.py [--repeats 1] [--launcher direct] [--timeline]
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkrunner.options import LauncherName

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
MASTER = "local-cluster[2,2,1024]"


def one_run(spark: Any, launcher: LauncherName, timeline: bool = False) -> dict[str, float]:
    from sparkrunner import Runner
    from sparkrunner.placement.slots import task_slots
    from tests.helpers import driver_url
    from tests.recovery.elastic_scenario import ExecutorHolder, elastic_fit, make_data, read_timeline
    from tests.waiting import wait_until

    wait_until(lambda: task_slots(spark.sparkContext) >= 4, 300, "4 task slots")
    with tempfile.TemporaryDirectory(prefix="sparkrunner-bench-elastic-") as tmp:
        folder = Path(tmp)
        data = make_data(folder / "data")
        runner = Runner(
            np=(2, 4), launcher=launcher, max_failures=1, checkpoint_dir=str(folder / "checkpoints"),
            start_timeout=300, stop_grace_s=30, tracking=False, progress=False,
        )  # fmt: skip
        holder = ExecutorHolder(folder, driver_url(spark))
        slots = SlotsBack(spark, holder)
        log = DriverLog()
        try:
            runner.run(elastic_fit, data, str(folder))
        finally:
            holder.join()
            slots.join()
            log.close()
        attempts = runner.last_run.attempts  # type: ignore[union-attr]
        sizes = [a.world_size for a in attempts]
        killed, released = holder.killed_at, holder.released_at
        if sizes != [4, 2, 4] or killed is None or released is None or slots.at is None:
            raise SystemExit(f"the scenario did not run as planned: attempt sizes {sizes}")
        first = {n: read_timeline(folder, n, 0)["first step"] for n in (1, 2)}
        if timeline:
            run_id = runner.last_run.run_id  # type: ignore[union-attr]
            events = log.events + spark_task_events(spark, run_id)
            print_timeline("kill -> first step at 2", killed, events, folder, run_id, 1, sizes[1])
            print_timeline("return -> first step at 4", released, events, folder, run_id, 2, sizes[2])
        return {
            "kill_to_step_at_2_s": first[1] - killed,
            "  kill_to_attempt_0_ended_s": (attempts[0].ended_at or 0) - killed,
            "return_to_step_at_4_s": first[2] - released,
            "  return_to_4_slots_s": slots.at - released,
            "  4_slots_to_attempt_1_ended_s": (attempts[1].ended_at or 0) - slots.at,
            "  attempt_1_ended_to_step_at_4_s": first[2] - (attempts[1].ended_at or 0),
        }


Event = tuple[float, str]
"""(wall-clock time, what happened) on the driver or in Spark."""

RANK_PHASES = (
    "process started",
    "function entered",
    "process group formed",
    "loader and model made",
    "checkpoint loaded",
    "first batch read",
    "first step",
)

NOISE = ("a channel connection ended",)
"""Debug lines left out of the timeline: every connection's end (the ranks' own lines say more)."""


class DriverLog(logging.Handler):
    """sparkrunner's driver log at DEBUG while the run goes, each record with its time; INFO and above still
    shown."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[Event] = []
        self._logger = logging.getLogger("sparkrunner")
        self._level = self._logger.level
        self._logger.setLevel(logging.DEBUG)
        self._logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.events.append((record.created, record.getMessage()))
        if record.levelno >= logging.INFO:  # (sparkrunner's own handler keeps quiet beside this one)
            print(f"[sparkrunner] {record.getMessage()}", file=sys.stderr)

    def close(self) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._level)
        super().close()


def spark_task_events(spark: Any, run_id: str) -> list[Event]:
    """When Spark launched each barrier task of the run's attempts (its REST API), as driver events."""
    sc = spark.sparkContext
    base = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"
    events: list[Event] = []
    for job in _get(f"{base}/jobs"):
        described = job.get("description", "")
        if f"run={run_id}" not in described:
            continue
        which = described.rsplit("run=", 1)[1]
        for stage in job["stageIds"]:
            for task in _get(f"{base}/stages/{stage}/0/taskList?length=100"):
                at = datetime.datetime.strptime(task["launchTime"], "%Y-%m-%dT%H:%M:%S.%f%Z")
                stamp = at.replace(tzinfo=datetime.timezone.utc).timestamp()
                events.append((stamp, f"Spark launched task {task['index']} of run {which}"))
    return events


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def print_timeline(
    title: str, start: float, events: list[Event], folder: Path, run_id: str, attempt: int, size: int
) -> None:
    """The phases from `start` to attempt `attempt`'s first step: the driver's events up to its first rank's
    connection, then each rank phase when its last rank reached it (``first step``: rank 0's)."""
    from tests.recovery.elastic_scenario import read_timeline

    ranks = [read_timeline(folder, attempt, r) for r in range(size)]
    until = ranks[0]["first step"]
    rows = [(at, text) for at, text in sorted(events) if start <= at <= until and not text.startswith(NOISE)]
    rows += [(max(r[phase] for r in ranks), f"rank phase: {phase} (last rank)") for phase in RANK_PHASES[:-1]]
    rows.append((until, "rank phase: first step (rank 0)"))
    print(f"{title} (attempt {attempt}, run {run_id}): seconds since the start, since the line before")
    before = start
    for at, text in sorted(rows):
        print(f"  {at - start:6.2f} {at - before:+6.2f}  {text[:110]}")
        before = at


class SlotsBack:
    """In the background: when the session has 4 task slots again after the holder let the executor go."""

    def __init__(self, spark: Any, holder: Any) -> None:
        self.at: float | None = None
        self._spark, self._holder, self._done = spark, holder, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        from sparkrunner.placement.slots import task_slots

        while not self._done.wait(0.1):
            if self._holder.released_at is not None and task_slots(self._spark.sparkContext) >= 4:
                self.at = time.time()
                return

    def join(self) -> None:
        self._done.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--launcher", choices=("direct", "mpirun"), default="direct")
    parser.add_argument("--timeline", action="store_true", help="print each recovery's phases")
    args = parser.parse_args()
    os.environ.setdefault("SPARKRUNNER_TEST_SESSION", uuid.uuid4().hex)  # how the holder finds ranks
    from bench.launch import bench_session

    spark = bench_session(MASTER)
    try:
        rows = [one_run(spark, args.launcher, args.timeline) for _ in range(args.repeats)]
    finally:
        spark.stop()
    for i, row in enumerate(rows):
        print(f"repeat {i}:\n" + "\n".join(f"  {k} = {v:.1f}" for k, v in row.items()))
    medians = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{args.launcher}, median of {len(rows)}: "
        + ", ".join(f"{k.strip()}={v:.1f}" for k, v in medians.items())
        + f" (load average {load})"
    )


if __name__ == "__main__":
    main()
