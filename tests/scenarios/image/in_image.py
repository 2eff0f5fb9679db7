"""Checks that run INSIDE the sparkrunner image (mounted at /checks by tests/scenarios/image/test_image.py).

Usage: python /checks/in_image.py CHECK [ARGS]. Prints one line `RESULT <json>` that the host-side test asserts
on; the functions given to Runner are defined here, so cloudpickle ships them by value to the ranks.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any


def versions() -> dict[str, Any]:
    """Imports every framework the image promises and reports versions and where sparkrunner comes from."""
    import cloudpickle
    import horovod
    import horovod.torch as hvd
    import mlflow
    import numpy
    import pandas
    import pyarrow
    import pyspark
    import sklearn
    import tensorflow as tf
    import tf_keras
    import torch

    import sparkrunner

    package = Path(sparkrunner.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    mpirun = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "tensorflow": tf.__version__,
        "tf_keras": tf_keras.__version__,
        "horovod": horovod.__version__,
        "horovod_mpi": hvd.mpi_built(),
        "horovod_gloo": hvd.gloo_built(),
        "pyspark": pyspark.__version__,
        "mlflow": mlflow.__version__,
        "pyarrow": pyarrow.__version__,
        "numpy": numpy.__version__,
        "pandas": pandas.__version__,
        "sklearn": sklearn.__version__,
        "cloudpickle": cloudpickle.__version__,
        "java": java,
        "mpirun": mpirun,
        "spark_home": os.path.realpath(os.environ["SPARK_HOME"]),
        "sparkrunner_dir": str(package),
        "sparkrunner_sha256": digest.hexdigest(),
    }


def horovod_train(steps: int = 8) -> dict[str, Any]:
    """A few Horovod steps of linear regression; each rank its own data, weights kept equal by allreduce."""
    import horovod.torch as hvd
    import torch

    hvd.init()
    torch.manual_seed(hvd.rank())  # different initial weights: broadcast_parameters must equalize them
    model = torch.nn.Linear(4, 1)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.05), named_parameters=model.named_parameters()
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(10 + hvd.rank()))
    y = x.sum(1, keepdim=True)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(hvd.allreduce(loss.detach(), name="loss").item())
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).unsqueeze(0)
    return {
        "size": hvd.size(),
        "sum_of_ranks": hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item(),
        "controller": "mpi" if hvd.mpi_enabled() else "gloo",
        "losses": losses,
        "weights": hvd.allgather(weights).tolist(),
        "ranks": hvd.allgather_object({"rank": hvd.rank(), "host": socket.gethostname(), "ips": _ips()}),
    }


def torch_ddp_train(steps: int = 8) -> dict[str, Any]:
    """torch.distributed (Gloo) with DDP: the environment the direct launcher sets must be enough."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(10 + rank))
    y = x.sum(1, keepdim=True)
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(weights) for _ in range(size)]
    dist.all_gather(gathered, weights)
    dist.destroy_process_group()
    return {
        "size": size,
        "sum_of_ranks": total.item(),
        "weights": [w.tolist() for w in gathered],
        "pid": os.getpid(),
    }


def _ips() -> list[str]:
    import psutil

    return sorted(a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family == 2)


def _spark(master: str, **conf: str) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("sparkrunner-image-test")
    for name, value in {"spark.ui.enabled": "false", "spark.executor.memory": "768m", **conf}.items():
        builder = builder.config(name, value)
    return builder.getOrCreate()


def horovod_local() -> dict[str, Any]:
    from sparkrunner import Runner

    return Runner(np=-2, launcher="mpirun", timeout=300).run(horovod_train)


def direct_local_cluster() -> dict[str, Any]:
    from sparkrunner import Runner

    spark = _spark("local-cluster[2,1,1024]", **{"spark.driver.host": "127.0.0.1"})
    try:
        return Runner(np=2, spark=spark, launcher="direct", start_timeout=180, timeout=300).run(
            torch_ddp_train
        )
    finally:
        spark.stop()


def across_hosts(master_url: str, driver_host: str) -> dict[str, Any]:
    from sparkrunner import Runner

    conf = {"spark.driver.host": driver_host, "spark.driver.bindAddress": driver_host}
    spark = _spark(master_url, **conf)
    try:
        return Runner(np=2, spark=spark, launcher="mpirun", start_timeout=180, timeout=300).run(horovod_train)
    finally:
        spark.stop()


CHECKS = {
    "versions": versions,
    "horovod-local": horovod_local,
    "direct-local-cluster": direct_local_cluster,
    "across-hosts": across_hosts,
}

if __name__ == "__main__":
    result = CHECKS[sys.argv[1]](*sys.argv[2:])
    print("RESULT " + json.dumps(result), flush=True)
