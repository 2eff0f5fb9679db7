"""What a checkpoint costs a training epoch: a ~200 MB state saved every epoch to the S3-API server (moto, on
loopback) and to a local folder, in the foreground and in the background, against the same loop without
checkpoints. One rank on the driver (np=-1, launcher direct) runs every loop, so each contender pays the same
process and import costs.

    PYTHONPATH=$PWD .venv/bin/python -m bench.checkpoint [--mb 200] [--epochs 4] [--epoch-s 2]

Prints, per contender: the epoch's added seconds over the loop without checkpoints, the `save_checkpoint` call's
own seconds (medians over the epochs after the first), and the seconds `load_checkpoint` takes, in a later run on
the same `checkpoint_dir`, to read the last one back (which it checks equal to what was saved).
An epoch is the same number of single-threaded matrix products for every contender: as many as take `--epoch-s`
seconds in the loop without checkpoints (a background write that takes CPU from training shows as a longer epoch).
The state is updated in place right after each save, as an optimizer's step would.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

from sparkrunner import Runner


def initial_state(mb: int) -> dict[str, Any]:
    """Eight float32 tensors of `mb` MB in all, the same in every run (whole numbers: adding 1.0 stays exact)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    size = mb * 2**20 // 4 // 8
    return {f"layer{i}": torch.randint(0, 1000, (size,), generator=generator).float() for i in range(8)}


def train(mb: int, epochs: int, work: float | int, mode: str) -> dict[str, Any]:
    """`epochs` epochs of the same work, each followed by a save in `mode` ("none", "foreground",
    "background"); the epochs' wall times, the save calls' times and the work's number of matrix products.
    `work`: a float is the seconds the first epoch runs for (counting its products, which every later epoch
    then does), an int the products each epoch does."""
    import torch

    import sparkrunner

    torch.set_num_threads(1)
    state = initial_state(mb)
    a = torch.randn(256, 256)
    products = work if isinstance(work, int) else 0
    epoch_times, save_times = [], []
    for epoch in range(epochs):
        start = time.perf_counter()
        if products == 0:  # calibrating: as many products as fit in `work` seconds
            while time.perf_counter() - start < float(work):
                a, products = torch.tanh(a @ a), products + 1
        else:
            for _ in range(products):
                a = torch.tanh(a @ a)
        saved = time.perf_counter()
        if mode != "none":
            sparkrunner.save_checkpoint(state, step=epoch, background=mode == "background")
        ended = time.perf_counter()
        epoch_times.append(ended - start)
        save_times.append(ended - saved)
        for tensor in state.values():
            tensor.add_(1.0)  # the optimizer's update, at once: the save must hold the values of its call
    return {"epochs": epoch_times, "saves": save_times, "products": products}


def load_and_check(mb: int, epochs: int) -> float:
    """The seconds `load_checkpoint` takes; the state must be the last epoch's (the initial one + epochs - 1)."""
    import torch

    import sparkrunner

    start = time.perf_counter()
    loaded = sparkrunner.load_checkpoint()
    seconds = time.perf_counter() - start
    expected = initial_state(mb)
    assert all(torch.equal(loaded[k], expected[k] + float(epochs - 1)) for k in expected), (
        "not what was saved"
    )
    return seconds


def one_loop(target: str | None, mode: str, work: float | int, args: argparse.Namespace) -> dict[str, Any]:
    runner = Runner(np=-1, launcher="direct", checkpoint_dir=target, tracking=False, progress=False)
    result: dict[str, Any] = runner.run(train, args.mb, args.epochs, work, mode)
    result["load"] = runner.run(load_and_check, args.mb, args.epochs) if target else 0.0
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of the state saved each epoch (MB)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--epoch-s", type=float, default=2.0, help="seconds of work in each epoch")
    args = parser.parse_args()
    from tests.data.s3_server import s3_server

    with s3_server() as s3, tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as local:
        os.environ["AWS_ENDPOINT_URL"] = s3.endpoint
        results = {"no checkpoints": one_loop(None, "none", args.epoch_s, args)}
        products = int(results["no checkpoints"]["products"])
        for where, target in (("S3-API server", s3.new_prefix()), ("local folder", local)):
            for mode in ("foreground", "background"):
                results[f"{where}, {mode}"] = one_loop(f"{target}/{mode}", mode, products, args)
    report(results, args)


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    """Medians over the epochs after the first (which pays for the first imports and the state's first copy)."""
    base = statistics.median(results["no checkpoints"]["epochs"][1:])
    print(
        f"\n{args.mb} MB state, {args.epochs} epochs of {args.epoch_s:.1f} s; load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'contender':34s} {'epoch s':>8s} {'added s':>8s} {'added %':>8s} {'save call s':>12s} {'load s':>7s}"
    )
    for name, result in results.items():
        epoch = statistics.median(result["epochs"][1:])
        save = statistics.median(result["saves"][1:])
        added = epoch - base
        print(
            f"{name:34s} {epoch:8.2f} {added:8.2f} {100 * added / base:7.1f}% {save:12.3f} "
            f"{result['load']:7.2f}"
        )


if __name__ == "__main__":
    main()
