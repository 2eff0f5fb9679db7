"""Training steps/s of a tiny model under sparkrunner (np=-2, direct launcher) against each framework's own
launcher on the same machine: plain torch DDP and Lightning under `torchrun`, Accelerate and the Hugging Face
Trainer under `accelerate launch` (both as ``python -m``, from this interpreter's environment). The same script
(`bench/frameworks_train.py`) runs under both, each rank timing its own steps after a warm-up, so launch time
does not count; `--repeats` runs each, taking turns, the peer first; the medians, with the load average (one
run varies by up to ±20% on a shared 2-core machine).

    PYTHONPATH=$PWD .venv/bin/python -m bench.frameworks [--repeats 3] [--only ddp lightning accelerate hf_trainer]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*", default=list(PEERS))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
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
