"""What one driver process and everything it started hold, read by the bench itself from /proc, the temp dir and
/dev/shm (never through sparkrunner's own bookkeeping): the driver's RSS, threads and open descriptors; the RSS of
its JVM, of the executors' JVMs and of Spark's Python workers and daemons; the zygotes; the temp dir's entries and
the /dev/shm entries this driver's processes made. Every process this driver started inherits the session tag
(tests/helpers.py's `TEST_SESSION_ENV`), which is how a process is told to be this driver's and not another's on
the same machine. `verdicts` says, per quantity, whether it stayed within its bound of the warm-up's figure."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from tests.helpers import session_processes
from tests.scenarios.faults.leftovers import TORCH_CACHE, shm_entries, shm_in_use, temp_entries
from tests.scenarios.faults.soak import proc_status

EXECUTOR_JVM = "CoarseGrainedExecutorBackend"
PYTHON_WORKER = "pyspark.daemon"
"""Spark's Python daemon's module; the workers it forks keep its command line."""
ZYGOTE = "sparkrunner.ranks.zygote"


@dataclass(frozen=True)
class Bound:
    """How far a quantity may rise over its warm-up maximum: `share` of it or `count` units, whichever is more."""

    share: float
    count: float

    def allows(self, warm: float, late: float) -> bool:
        return late <= warm + max(self.share * warm, self.count)

    def __str__(self) -> str:
        parts = ([f"+{self.share:.0%}"] if self.share else []) + ([f"+{self.count:g}"] if self.count else [])
        return " or ".join(parts) or "+0"


RSS = Bound(0.05, 50)
"""RSS (MB): 5 %, or 50 MB (a run's allocator arenas and a CrossValidator's data come and go) when that is more."""
BOUNDS: dict[str, Bound] = {
    "driver MB": RSS,
    "driver JVM MB": RSS,
    "executor JVMs MB": RSS,
    "py workers MB": RSS,
    "py workers": Bound(0, 0),
    "threads": Bound(0, 4),
    "fds": Bound(0, 8),
    "zygotes": Bound(0, 0),
    "temp entries": Bound(0, 0),
    "temp files": Bound(0, 0),
    "/dev/shm": Bound(0, 0),
}
"""Each quantity sampled and its bound over the warm-up's maximum."""


def _rss_mb(pid: int | str) -> float:
    try:
        return proc_status("VmRSS", pid) / 1024
    except (OSError, KeyError):
        return 0.0  # it ended meanwhile


def sample(shm_before: set[str]) -> dict[str, float]:
    """Each quantity of `BOUNDS` now; /dev/shm counts the entries new since `shm_before` and held by no process
    but this driver's (another user of the machine's entries left out)."""
    processes = {pid: cmd for pid, _, cmd in session_processes()}
    kinds = {
        "driver JVM MB": lambda cmd: "org.apache.spark.deploy.SparkSubmit" in cmd,
        "executor JVMs MB": lambda cmd: EXECUTOR_JVM in cmd,
        "py workers MB": lambda cmd: PYTHON_WORKER in cmd,
    }
    figures = {name: sum(_rss_mb(p) for p, cmd in processes.items() if of(cmd)) for name, of in kinds.items()}
    figures["py workers"] = sum(PYTHON_WORKER in cmd for cmd in processes.values())
    figures["zygotes"] = sum(ZYGOTE in cmd for cmd in processes.values())
    figures["driver MB"] = _rss_mb("self")
    figures["threads"] = proc_status("Threads")
    figures["fds"] = len(os.listdir("/proc/self/fd"))
    figures["temp entries"] = len(temp_entries())
    figures["temp files"] = _files_under(tempfile.gettempdir())
    new = shm_entries() - shm_before
    held_elsewhere = shm_in_use(exclude=set(processes) | {os.getpid()}) if new else set()
    figures["/dev/shm"] = len(new - held_elsewhere)
    return {name: figures[name] for name in BOUNDS}


def _files_under(folder: str) -> int:
    """Files anywhere under `folder` but in torch's own cache (tests/scenarios/faults/leftovers.py says why)."""
    count = 0
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not (top == folder and d == TORCH_CACHE)]
        count += len(files)
    return count


def slope_per_100(points: list[tuple[int, float]]) -> float:
    """The least-squares slope of (operation count, value), per 100 operations."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return 100 * sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def verdicts(rows: list[tuple[int, dict[str, float]]], warm_up: int) -> list[str]:
    """Per quantity: the warm-up's maximum (samples at or before operation `warm_up`), the last third's maximum,
    the slope per 100 operations after the warm-up, the bound, and "bounded" when the last third's maximum is
    within it, else "GROWS"."""
    after = [(n, s) for n, s in rows if n >= warm_up]
    last = after[len(after) - max(1, len(after) // 3) :]
    lines = [
        f"{'quantity':<18}{'warm-up max':>12}{'last third max':>16}{'per 100 ops':>13}  {'bound':<14}verdict"
    ]
    for name, bound in BOUNDS.items():
        warm = max(s[name] for n, s in rows if n <= warm_up)
        late = max(s[name] for _, s in last)
        slope = slope_per_100([(n, s[name]) for n, s in after])
        verdict = "bounded" if bound.allows(warm, late) else "GROWS"
        lines.append(f"{name:<18}{warm:>12.0f}{late:>16.0f}{slope:>+13.1f}  {bound!s:<14}{verdict}")
    return lines


def table(rows: list[tuple[int, dict[str, float]]]) -> list[str]:
    """One line per sample: the operation count, then each quantity."""
    names = list(BOUNDS)
    lines = ["ops " + "".join(f"{name:>17}" for name in names)]
    lines += [f"{n:>3} " + "".join(f"{s[name]:>17.0f}" for name in names) for n, s in rows]
    return lines
