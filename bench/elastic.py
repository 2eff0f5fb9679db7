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

    PYTHONPATH=$PWD .venv/bin/python bench/elastic.py [--repeats 1] [--launcher direct]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkrunner.options import LauncherName

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
MASTER = "local-cluster[2,2,1024]"


def one_run(spark: Any, launcher: LauncherName) -> dict[str, float]:
    from sparkrunner import Runner
    from sparkrunner.placement.slots import task_slots
    from tests.helpers import driver_url
    from tests.recovery.elastic_scenario import ExecutorHolder, elastic_fit, make_data
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
        try:
            runner.run(elastic_fit, data, str(folder))
        finally:
            holder.join()
            slots.join()
        attempts = runner.last_run.attempts  # type: ignore[union-attr]
        sizes = [a.world_size for a in attempts]
        killed, released = holder.killed_at, holder.released_at
        if sizes != [4, 2, 4] or killed is None or released is None or slots.at is None:
            raise SystemExit(f"the scenario did not run as planned: attempt sizes {sizes}")
        first = {n: float((folder / f"first-step-{n}").read_text()) for n in (1, 2)}
        return {
            "kill_to_step_at_2_s": first[1] - killed,
            "  kill_to_attempt_0_ended_s": (attempts[0].ended_at or 0) - killed,
            "return_to_step_at_4_s": first[2] - released,
            "  return_to_4_slots_s": slots.at - released,
            "  4_slots_to_attempt_1_ended_s": (attempts[1].ended_at or 0) - slots.at,
            "  attempt_1_ended_to_step_at_4_s": first[2] - (attempts[1].ended_at or 0),
        }


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
    args = parser.parse_args()
    os.environ.setdefault("SPARKRUNNER_TEST_SESSION", uuid.uuid4().hex)  # how the holder finds ranks
    from bench.launch import bench_session

    spark = bench_session(MASTER)
    try:
        rows = [one_run(spark, args.launcher) for _ in range(args.repeats)]
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
