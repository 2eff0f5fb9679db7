"""Cost of the step anatomy, and how fast it names an injected straggler.

1. Overhead: torch DDP training (Gloo, a 256x256 linear layer, ~ms steps, so the per-step cost of the
   anatomy weighs as much as it ever will) on ``np=-2`` ranks, direct launcher. Whole runs with the anatomy on
   and off differ by up to 15% from one run to the next on this shared machine, which hides a 1% effect, so
   both ranks alternate blocks of steps in ONE run: an "on" block iterates ``sparkrunner.timed(...)`` and
   trains a DDP whose reduction the anatomy times (its comm hook), an "off" block trains a twin DDP left on
   DDP's own C++ reduction (`collective_timing.leave_untimed`) over a plain list, with no clock. Blocks take
   turns (on-off, off-on, ...); the ratio is the median over pairs of off-time / on-time (steps/s on / off).
   Target: >= 0.99. The driver's CPU over the run (it takes in the windows, checks for stragglers) is printed
   as a share of one core: with the ranks on every core, that share is taken from them.
2. Detection delay: ``np=-4`` DDP ranks with 30 ms steps; from step `--inject-at` on, rank 3 computes 10 ms
   longer (+33%). Delay = from rank 3's first slowed step to the driver's `StragglerWarning`, in seconds and
   in rank 3's steps (the ranks run on this machine, so their monotonic clock is the driver's).

Run: ``PYTHONPATH=$PWD .venv/bin/python -m bench.anatomy [--pairs 200] [--block 50]``.
"""

from __future__ import annotations

import argparse
import math
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


def paired_loop(pairs: int, block: int, width: int) -> list[tuple[float, float]]:
    """Per pair of blocks, (seconds per step with the anatomy on, off): twin DDPs, blocks taking turns."""
    import time

    import torch
    import torch.distributed as dist

    import sparkrunner
    from sparkrunner.ranks import collective_timing

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    models = {
        part: torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(width, width))
        for part in ("on", "off")
    }
    collective_timing.leave_untimed(models["off"])
    optimizers = {part: torch.optim.SGD(model.parameters(), lr=0.001) for part, model in models.items()}
    x = torch.randn(32, width)
    found = []
    for pair in range(pairs + 1):  # the first pair warms up
        per_step = {}
        for part in ("on", "off") if pair % 2 else ("off", "on"):
            batches = sparkrunner.timed([x] * block) if part == "on" else [x] * block
            model, optimizer = models[part], optimizers[part]
            started = time.monotonic()
            for batch in batches:
                optimizer.zero_grad()
                model(batch).square().mean().backward()
                optimizer.step()
            per_step[part] = (time.monotonic() - started) / block
        if pair:
            found.append((per_step["on"], per_step["off"]))
    dist.destroy_process_group()
    return found


def overhead(pairs: int, block: int) -> tuple[list[tuple[float, float]], float]:
    """Rank 0's (on, off) seconds per step for each pair of blocks, and the driver's CPU as a share of a core."""
    runner = Runner(np=-2, launcher="direct", tracking=False, progress=False, env=_ONE_THREAD)
    cpu, wall = time.process_time(), time.monotonic()
    found = runner.run(paired_loop, pairs, block, 256)
    return found, (time.process_time() - cpu) / (time.monotonic() - wall)


def median_interval(ordered: list[float]) -> tuple[float, float]:
    """A distribution-free 95% confidence interval of the median of the sorted `ordered` (binomial ranks)."""
    n = len(ordered)
    half = 0.98 * math.sqrt(n)  # 1.96 * sqrt(n) / 2 ranks either side of the middle
    return ordered[max(int(n / 2 - half), 0)], ordered[min(math.ceil(n / 2 + half), n - 1)]


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
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--block", type=int, default=50, help="steps per block")
    parser.add_argument("--inject-at", type=int, default=60)
    args = parser.parse_args()
    os.environ.setdefault("SPARKRUNNER_REPORT_DIR", tempfile.mkdtemp(prefix="bench-anatomy-"))
    pairs, driver_share = overhead(args.pairs, args.block)
    on = [1 / on_s for on_s, _ in pairs]
    off = [1 / off_s for _, off_s in pairs]
    ratios = sorted(off_s / on_s for on_s, off_s in pairs)
    low, high = median_interval(ratios)
    print(
        f"anatomy on : median {statistics.median(on):7.1f} steps/s over {len(on)} blocks of {args.block} steps"
    )
    print(
        f"anatomy off: median {statistics.median(off):7.1f} steps/s over {len(off)} blocks of {args.block} steps"
    )
    print(
        f"on / off = {statistics.median(ratios):.3f} (median over pairs of blocks; 95% interval of the median "
        f"{low:.3f}-{high:.3f}; target >= 0.99)"
    )
    print(f"driver CPU during the run (report included): {driver_share:.1%} of one core")
    found = detection(args.inject_at, args.inject_at + 200)
    if found is None:
        print("detection: no StragglerWarning within 200 slowed steps")
    else:
        print(f"detection delay: {found[0]:.1f} s, {found[1]} steps of the slowed rank (+33% compute)")
    print(f"load average (1, 5, 15 min): {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
