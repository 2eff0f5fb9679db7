"""The chaos soak: many runs, each with a fault drawn at random (tests/scenarios/faults/chaos.py), on both
launchers; each must end with its expected outcome within its bound and leave nothing (leftovers.py), and at the
end the driver's threads are back where they started and its RSS grew less than `RSS_GROWTH_MB`. Shared by
`bench/soak.py` (200 runs, local-cluster and the two-host fixture) and test_soak.py (CI-sized)."""

from __future__ import annotations

import random
import tempfile
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.scenarios.faults.chaos import judge, run_with_fault
from tests.scenarios.faults.leftovers import Leftovers
from tests.waiting import poll_until

SOAK_FAULTS = ("none", "raise", "sigkill", "sigstop", "executor", "cancel", "slow", "checkpointed")
"""The faults drawn on every cluster ("checkpointed": max_failures=1, rank 1 SIGKILLed after a checkpoint)."""
TWO_HOST_FAULTS = (*SOAK_FAULTS, "cut")
"""On the two-host fixture, also: rank 1's host cut off from the other for a few seconds."""
LAUNCHER_NAMES = ("direct", "mpirun")
RSS_GROWTH_MB = 50.0
THREADS_BACK_S = 30.0
"""How long the driver's threads get to end after the last run (idle pools, py4j's callback connections)."""


def proc_status(field_name: str, pid: int | str = "self") -> int:
    """A number from /proc/PID/status (`Threads`, `VmRSS` in kB): the kernel's count, not Python's."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1])
    raise KeyError(field_name)


@dataclass
class Cell:
    """One row of the outcome table: a fault on a launcher."""

    runs: int = 0
    met: int = 0
    max_s: float = 0.0
    wrong: list[str] = field(default_factory=list)


@dataclass
class Soak:
    """`runs` runs of `np` ranks (2: in `spark`, the two-host fixture's `NetnsCluster` as `cluster` if there; -2:
    on the driver's machine), faults (`plan`) and launchers drawn with `seed`. Call after one warm-up run, so the baseline counts the pools a first
    run starts (py4j's, Spark's Python workers)."""

    spark: Any
    runs: int
    seed: int
    faults: tuple[str, ...] = SOAK_FAULTS
    launchers: tuple[str, ...] = LAUNCHER_NAMES
    cluster: Any = None
    np: int = 2
    table: dict[tuple[str, str], Cell] = field(default_factory=lambda: defaultdict(Cell))
    leftovers: list[str] = field(default_factory=list)

    def run(self) -> None:
        threads, rss_kb = proc_status("Threads"), proc_status("VmRSS")
        draw = random.Random(self.seed)
        for number, fault in enumerate(self.plan(draw)):
            self.one(fault, draw.choice(self.launchers), number)
        if not poll_until(lambda: proc_status("Threads") <= threads, THREADS_BACK_S):
            names = sorted(t.name for t in threading.enumerate())
            self.leftovers.append(
                f"driver threads {proc_status('Threads')} > {threads} at the start: {names}"
            )
        growth = (proc_status("VmRSS") - rss_kb) / 1024
        if growth >= RSS_GROWTH_MB:
            self.leftovers.append(f"the driver's RSS grew {growth:.0f} MB")

    def plan(self, draw: random.Random) -> list[str]:
        """`runs` faults in rounds of every fault once, each round shuffled: every fault is met as soon as
        there are as many runs as faults, and no fault twice as often as another."""
        rounds = -(-self.runs // len(self.faults))
        return [f for _ in range(rounds) for f in draw.sample(self.faults, len(self.faults))][: self.runs]

    def one(self, fault: str, launcher: str, number: int) -> None:
        with tempfile.TemporaryDirectory(prefix="soak-run-") as scratch:
            folder, checkpoints = Path(scratch, "run"), Path(scratch, "checkpoints")
            folder.mkdir()
            before = Leftovers()
            outcome = run_with_fault(
                fault, launcher, self.np, folder, self.spark, str(checkpoints), self.cluster
            )
            wrong = judge(fault, outcome, in_spark=self.np > 0)
            left = before.after(folder)
        cell = self.table[fault, launcher]
        cell.runs += 1
        cell.met += not wrong
        cell.max_s = max(cell.max_s, outcome.seconds)
        cell.wrong += [f"run {number}: {w}" for w in wrong]
        self.leftovers += [f"run {number} ({fault}, {launcher}): {item}" for item in left]

    def report(self, title: str) -> str:
        """The outcome table (fault x launcher: runs, expected outcome met, max seconds), then what went wrong."""
        lines = [title, f"{'fault':<13}{'launcher':<9}{'runs':>5}{'met':>5}{'max s':>8}"]
        for (fault, launcher), cell in sorted(self.table.items()):
            lines.append(f"{fault:<13}{launcher:<9}{cell.runs:>5}{cell.met:>5}{cell.max_s:>8.1f}")
        lines += [w for cell in self.table.values() for w in cell.wrong] + self.leftovers
        return "\n".join(lines)

    @property
    def passed(self) -> bool:
        return not self.leftovers and all(c.met == c.runs for c in self.table.values())
