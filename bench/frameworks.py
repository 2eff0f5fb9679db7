"""Training steps/s of a tiny model under sparkrunner (np=-2, direct launcher) against each framework's own
launcher on the same machine: plain torch DDP and Lightning under `torchrun`, Accelerate and the Hugging Face
Trainer under `accelerate launch` (both as ``python -m``, from this interpreter's environment). The same script
(`bench/frameworks_train.py`) runs under both, each rank timing its own steps after a warm-up, so launch time
does not count; `--repeats` runs each, taking turns, the peer first; the medians, with the load average (one
run varies by up to ±20% on a shared 2-core machine).

    PYTHONPATH=$PWD .venv/bin/python -m bench.frameworks [--repeats 3] [--only ddp lightning accelerate hf_trainer]

``--launchers`` times what `mpirun` costs code that uses no MPI instead: each framework under sparkrunner's
``launcher="direct"`` and ``launcher="mpirun"``, np=2 on this machine (np=-2) and on a local[2] Spark session,
taking turns (direct-mpirun, then mpirun-direct, ...) to cancel drift. Per cell: the median and range (min-max)
of the ms per step (rank 0, after a warm-up) and of the whole run's seconds (launch included), and the
mpirun/direct ratios; the direct launcher's own range is the noise to read them against.

    PYTHONPATH=$PWD .venv/bin/python -m bench.frameworks --launchers [--repeats 5] [--only ddp ddp_large ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.spark_session import quiet_session
from sparkrunner import Runner

SCRIPT = Path(__file__).with_name("frameworks_train.py")
NP = 2
TORCHRUN = ["torch.distributed.run", "--standalone", f"--nproc-per-node={NP}"]
ACCELERATE = [
    "accelerate.commands.launch", "--multi_gpu", f"--num_processes={NP}", "--num_machines=1",
    "--mixed_precision=no", "--dynamo_backend=no",
]  # fmt: skip
PEERS = {
    "ddp": ("torchrun", TORCHRUN),
    "ddp_large": ("torchrun", TORCHRUN),
    "lightning": ("torchrun", TORCHRUN),
    "accelerate": ("accelerate launch", ACCELERATE),
    "hf_trainer": ("accelerate launch", ACCELERATE),
}


def steps_per_s(framework: str, launcher: str, out: Path) -> float:
    """Rank 0's steps/s for `framework` started by sparkrunner or by the peer's own launcher."""
    if launcher == "sparkrunner":
        Runner(np=-NP, launcher="direct", tracking=False, progress=False).run_script(SCRIPT, framework, out)
    else:
        module, *options = PEERS[framework][1]  # `python -m`: the launcher of this interpreter's environment
        subprocess.run([sys.executable, "-m", module, *options, str(SCRIPT), framework, str(out)], check=True)
    return float(json.loads(out.read_text().splitlines()[-1])["steps_per_s"])


def launcher_run(framework: str, launcher: str, spark: Any, out: Path) -> tuple[float, float]:
    """(ms per step of rank 0, seconds of the whole run) for `framework` under sparkrunner's `launcher`, on
    this machine (`spark` None) or in a barrier stage of `spark`."""
    np = NP if spark is not None else -NP
    runner = Runner(np=np, spark=spark, launcher=launcher, tracking=False, progress=False)  # type: ignore[arg-type]
    start = time.perf_counter()
    runner.run_script(SCRIPT, framework, out)
    seconds = time.perf_counter() - start
    return 1000 / float(json.loads(out.read_text().splitlines()[-1])["steps_per_s"]), seconds


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):7.2f} ({min(values):6.2f}-{max(values):6.2f})"


def launcher_cost(frameworks: list[str], repeats: int) -> None:
    """Prints, per framework and placement, direct against mpirun (see the module's docstring)."""
    spark = quiet_session("local[2]")
    runs: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    placements = {"np=-2": None, "local[2]": spark}
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "steps.jsonl"
        for repeat in range(repeats):
            order = ("direct", "mpirun") if repeat % 2 == 0 else ("mpirun", "direct")
            for framework in frameworks:
                for placement, session in placements.items():
                    for launcher in order:
                        result = launcher_run(framework, launcher, session, out)
                        runs.setdefault((framework, placement, launcher), []).append(result)
    print(f"{'framework':<11}{'placement':<10}{'launcher':<8} {'ms/step median (min-max)':>26} "
          f"{'run s median (min-max)':>26}  mpirun/direct step, run")  # fmt: skip
    for (framework, placement, launcher), results in runs.items():
        steps, seconds = [r[0] for r in results], [r[1] for r in results]
        ratio = ""
        if launcher == "mpirun":
            direct = runs[(framework, placement, "direct")]
            ratio = (
                f"  x{statistics.median(steps) / statistics.median([r[0] for r in direct]):.2f}, "
                f"x{statistics.median(seconds) / statistics.median([r[1] for r in direct]):.2f}"
            )
        print(f"{framework:<11}{placement:<10}{launcher:<8} {_cell(steps):>26} {_cell(seconds):>26}{ratio}")
    print(f"np=2, {repeats} runs per cell, taking turns; load average (1, 5, 15 min): "
          + ", ".join(f"{v:.1f}" for v in os.getloadavg()))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*", default=list(PEERS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--launchers", action="store_true", help="direct against mpirun (module docstring)")
    args = parser.parse_args()
    if args.launchers:
        launcher_cost(args.only, args.repeats)
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for framework in args.only:
            out = Path(folder) / f"{framework}.jsonl"
            peer = PEERS[framework][0]
            peer_runs, our_runs = [], []
            for _ in range(args.repeats):
                peer_runs.append(steps_per_s(framework, peer, out))
                our_runs.append(steps_per_s(framework, "sparkrunner", out))
            rows.append((framework, peer, statistics.median(our_runs), statistics.median(peer_runs)))
    for framework, peer, ours, theirs in rows:
        print(
            f"{framework:<11} sparkrunner {ours:7.1f} steps/s   {peer:<10} {theirs:7.1f} steps/s   x{ours / theirs:.2f}"
        )
    print(f"np={NP} on one machine, medians of {args.repeats} run(s) each; load average (1, 5, 15 min): "
          + ", ".join(f"{v:.1f}" for v in os.getloadavg()))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
