"""The TorchDistributor drop-in over a local Spark Connect server:
`connect_torch_distributor.py URL SCRIPT OUT_DIR` (URL: the server's).

Prints SESSION (the session's module), FUNCTION (rank 0's value of a gloo allreduce), SCRIPT (the script's
result: None) and GPU (the refusal of use_gpu=True without task GPUs)."""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from sparkrunner.compat import TorchDistributor


def allreduce(scale: float) -> tuple[int, float]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([scale * (dist.get_rank() + 1)])
    dist.all_reduce(value)
    return dist.get_world_size(), value.item()


def main(url: str, script: str, out_dir: str) -> None:
    spark = SparkSession.builder.remote(url).getOrCreate()
    print("SESSION", type(spark).__module__, flush=True)
    print("FUNCTION", TorchDistributor(2, local_mode=False, use_gpu=False).run(allreduce, 2.0), flush=True)
    print("SCRIPT", TorchDistributor(2, local_mode=False, use_gpu=False).run(script, out_dir), flush=True)
    try:
        TorchDistributor(2, local_mode=False, use_gpu=True)
    except RuntimeError as exc:
        print("GPU", exc, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
