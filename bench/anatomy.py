"""Cost of the step anatomy, and how fast it names an injected straggler.

1. Overhead: the same torch DDP training (Gloo, a 256x256 linear layer, ~ms steps, so the per-step cost of
   the anatomy weighs as much as it ever will) on ``np=-2`` ranks, direct launcher, with the anatomy on and
   with ``SPARKRUNNER_ANATOMY=0``, runs taking turns; steps/s is rank 0's own count over its loop (start-up
   excluded). Target: on / off >= 0.99.
2. Detection delay: ``np=-4`` DDP ranks with 30 ms steps; from step `--inject-at` on, rank 3 computes 10 ms
   longer (+33%). Delay = from rank 3's first slowed step to the driver's `StragglerWarning`, in seconds and
   in rank 3's steps (the ranks run on this machine, so their monotonic clock is the driver's).

Run: ``PYTHONPATH=$PWD .venv/bin/python -m bench.anatomy [--repeats 3] [--steps 600]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from typing import Any

from sparkrunner import Runner, StragglerWarning

_ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # ranks share this machine's cores: no oversubscribed torch threads


def ddp_loop(steps: int, width: int, slow_from: int | None, slow_s: float, step_s: float) -> dict[str, Any]:
    """DDP steps over `sparkrunner.timed` batches; rank 3 sleeps `slow_s` more from step `slow_from` on."""
    import time

    import torch
    import torch.distributed as dist

    import sparkrunner

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(width, width))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    x = torch.randn(32, width)
    stamps = []
    for step, batch in enumerate(sparkrunner.timed([x] * steps)):
        slow = slow_from is not None and rank == 3 and step >= slow_from
        time.sleep(step_s + (slow_s if slow else 0.0))
        optimizer.zero_grad()
        model(batch).square().mean().backward()
        optimizer.step()
        stamps.append(time.monotonic())
    dist.destroy_process_group()
    warm = steps // 10
    return {"steps_per_s": (steps - warm) / (stamps[-1] - stamps[warm]), "stamps": stamps}


def overhead(repeats: int, steps: int) -> tuple[list[float], list[float]]:
    """Rank 0's steps/s with the anatomy on and off, `repeats` runs each, taking turns."""
    rates: dict[str, list[float]] = {"1": [], "0": []}
    for _ in range(repeats):
        for switch, found in rates.items():
            runner = Runner(
                np=-2, launcher="direct", tracking=False, progress=False, env={"SPARKRUNNER_ANATOMY": switch}
            )
            found.append(runner.run(ddp_loop, steps, 256, None, 0.0, 0.0)["steps_per_s"])  # fmt: skip
    return rates["1"], rates["0"]


def detection(inject_at: int, steps: int) -> tuple[float, int] | None:
    """Seconds and rank 3's steps from its first slowed step to the warning; None if no warning came."""
    warned: list[float] = []
    show = warnings.showwarning

    def note(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if issubclass(category, StragglerWarning):
            warned.append(time.monotonic())
        show(message, category, *args, **kwargs)

    warnings.showwarning = note
    try:
        runner = Runner(np=-4, launcher="direct", tracking=False, progress=False, env=_ONE_THREAD)
        stamps = runner.run_all(ddp_loop, steps, 8, inject_at, 0.01, 0.03)[3]["stamps"]
    finally:
        warnings.showwarning = show
    if not warned:
        return None
    started = stamps[inject_at - 1]  # the end of the last normal step: the first slow one begins
    return warned[0] - started, sum(1 for t in stamps[inject_at:] if t <= warned[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--inject-at", type=int, default=60)
    args = parser.parse_args()
    os.environ.setdefault("SPARKRUNNER_REPORT_DIR", tempfile.mkdtemp(prefix="bench-anatomy-"))
    on, off = overhead(args.repeats, args.steps)
    ratio = statistics.median(on) / statistics.median(off)
    print(
        f"anatomy on : median {statistics.median(on):7.1f} steps/s   runs: {', '.join(f'{r:.1f}' for r in on)}"
    )
    print(
        f"anatomy off: median {statistics.median(off):7.1f} steps/s   runs: {', '.join(f'{r:.1f}' for r in off)}"
    )
    print(f"on / off = {ratio:.3f} (target >= 0.99)")
    found = detection(args.inject_at, args.inject_at + 200)
    if found is None:
        print("detection: no StragglerWarning within 200 slowed steps")
    else:
        print(f"detection delay: {found[0]:.1f} s, {found[1]} steps of the slowed rank (+33% compute)")
    print(f"load average (1, 5, 15 min): {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
