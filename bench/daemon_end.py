"""How long after its ranks return a run ends when each rank leaves a daemon behind (rank 0: a program started
with the rank's output; rank 1: a bare ``os.fork()``, which also holds barrier task 0's mpirun output pipe).

np=2 Spark barrier stages on ``local-cluster[2,1,1024]``, each launcher; the daemons live longer than
``EXIT_WAIT_S``, so a run that waited for them would end that late. The ranks write the time they return
(``time.monotonic()``, one clock for every process of the machine).

Run: ``PYTHONPATH=$PWD .venv/bin/python -m bench.daemon_end [direct] [mpirun]``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from bench.spark_session import quiet_session
from sparkrunner import Runner
from sparkrunner.timeouts import EXIT_WAIT_S
from tests.scenarios.faults.daemons import ranks_leave_daemons

DAEMON_LIFE_S = EXIT_WAIT_S + 30.0


def end_delay(launcher: Literal["direct", "mpirun"]) -> float:
    """Seconds from the last rank's return to `Runner.run`'s return."""
    with tempfile.TemporaryDirectory() as folder:
        Runner(np=2, launcher=launcher, tracking=False, progress=False).run(
            ranks_leave_daemons, folder, DAEMON_LIFE_S
        )
        ended = time.monotonic()
        return ended - max(float(Path(folder, f"returned-{rank}").read_text()) for rank in range(2))


def main() -> None:
    quiet_session("local-cluster[2,1,1024]")
    Runner(np=2, launcher="direct", tracking=False, progress=False).run(time.time)  # start the Python workers
    launchers: list[Literal["direct", "mpirun"]] = ["direct", "mpirun"]
    for launcher in [name for name in launchers if name in sys.argv[1:]] or launchers:
        print(f"{launcher}: the run ended {end_delay(launcher):.1f} s after its ranks returned", flush=True)


if __name__ == "__main__":
    main()
