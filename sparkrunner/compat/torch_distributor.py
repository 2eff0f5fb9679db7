"""Drop-ins for pyspark's `TorchDistributor` and `DeepspeedTorchDistributor`, built on `sparkrunner.Runner`.

Only the import changes: ``from sparkrunner.compat import TorchDistributor``. A function returns rank 0's
value, a script returns None; ``local_mode=True`` runs the processes on the driver, ``False`` in one Spark
barrier stage (classic Spark or Spark Connect). See docs/migrating.md for every difference.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sparkrunner.compat.runners import barrier_runner, local_runner
from sparkrunner.compat.spark_facts import (
    driver_gpus,
    optional_session,
    positive_int,
    task_gpu_amount,
)
from sparkrunner.errors import DriverGpuError, InvalidArgumentError, SparkRunnerWarning
from sparkrunner.script import script_call
from sparkrunner.system.gpus import CUDA_VISIBLE

log = logging.getLogger(__name__)

TORCH_SSL_CONF = "pytorch.spark.distributor.ignoreSsl"
DEEPSPEED_SSL_CONF = "deepspeed.spark.distributor.ignoreSsl"


class TorchDistributor:
    """``TorchDistributor(num_processes, local_mode, use_gpu).run(train, *args)``, on sparkrunner.

    Args:
        num_processes: ranks to start (torch processes, one GPU each when ``use_gpu``).
        local_mode: True: the ranks run on the driver; False: in a Spark barrier stage.
        use_gpu: True: each rank gets GPUs (the driver's in local mode, its task's on Spark); False: CPU.
        ssl_conf: the Spark setting that lets a TLS-enabled cluster run anyway
            (default ``pytorch.spark.distributor.ignoreSsl``).
    """

    def __init__(
        self,
        num_processes: int = 1,
        local_mode: bool = True,
        use_gpu: bool = True,
        ssl_conf: str | None = None,
    ) -> None:
        self.num_processes = positive_int("num_processes", num_processes)
        self.local_mode = bool(local_mode)
        self.use_gpu = bool(use_gpu)
        self.ssl_conf = ssl_conf or TORCH_SSL_CONF
        self.spark = optional_session()
        self.num_tasks = self._gpu_plan()
        self.input_params = {
            "num_processes": self.num_processes,
            "local_mode": self.local_mode,
            "use_gpu": self.use_gpu,
            "num_tasks": self.num_tasks,
        }

    def _gpu_plan(self) -> int:
        """Spark tasks to start; checks the GPU configuration before anything runs."""
        if not self.use_gpu:
            return self.num_processes
        if self.local_mode:
            owned = driver_gpus(self.spark, os.environ.get(CUDA_VISIBLE))
            if self.num_processes > len(owned):
                warnings.warn(
                    f"num_processes={self.num_processes} is more than the {len(owned)} GPU(s) on the driver: "
                    f"running {len(owned)} processes",
                    SparkRunnerWarning,
                    stacklevel=2,
                )
                self.num_processes = len(owned)
            return self.num_processes
        if self.spark is None:
            raise DriverGpuError(
                "local_mode=False runs in a Spark barrier stage, but this process has no SparkSession"
            )
        amount = task_gpu_amount(self.spark)
        if self.num_processes % amount:
            raise DriverGpuError(
                f"num_processes ({self.num_processes}) must be a multiple of spark.task.resource.gpu.amount "
                f"({amount}): each task starts one process per GPU"
            )
        return self.num_processes // amount

    def run(self, train_object: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
        """Run `train_object` (a function: returns rank 0's value; a script path: returns None) on every rank."""
        if isinstance(train_object, str):
            if kwargs:
                raise InvalidArgumentError(
                    "a script takes command-line arguments, not keyword arguments "
                    f"({', '.join(kwargs)}): run('train.py', '--lr', '0.1')"
                )
            if self.local_mode:
                self._runner().run_script(train_object, *map(str, args))
            else:
                self._runner().run(TaskProcess(self._per_task(), script_call(train_object, args, None)))
            return None
        if self.local_mode:
            return self._runner().run(train_object, *args, **kwargs)
        return self._runner().run(TaskProcess(self._per_task(), train_object), *args, **kwargs)

    def _per_task(self) -> int:
        return self.num_processes // self.num_tasks

    def _runner(self) -> Any:
        """A `Runner` that places the ranks as the original does."""
        if self.local_mode:
            return local_runner(self.num_processes, env=self._local_gpu_env())
        name = type(self).__name__
        return barrier_runner(
            self.spark, self.num_processes, self.use_gpu, self._per_task(), self.ssl_conf, name
        )

    def _local_gpu_env(self) -> dict[str, str]:
        """Local mode with GPUs: every rank sees the first `num_processes` of the driver's GPUs."""
        if not self.use_gpu:
            return {}
        owned = driver_gpus(self.spark, os.environ.get(CUDA_VISIBLE))
        return {CUDA_VISIBLE: ",".join(owned[: self.num_processes])}


@dataclass(frozen=True)
class TaskProcess:
    """On a rank of a ``local_mode=False`` run: `call` in the environment pyspark's torchrun gives the process,
    one torchrun per Spark task (`processes` per task): the rank numbered within its task, not its host."""

    processes: int
    call: Callable[..., Any]

    @property
    def __name__(self) -> str:  # the run's name: the user's function's or script's
        return str(getattr(self.call, "name", None) or getattr(self.call, "__qualname__", "train"))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        os.environ.update(torchrun_task_environment(os.environ, self.processes))
        return self.call(*args, **kwargs)


def torchrun_task_environment(env: Mapping[str, str], processes: int) -> dict[str, str]:
    """What torchrun (``--nnodes=<tasks> --node_rank=<task> --nproc_per_node=<processes>``) gives the rank in
    `env` beyond sparkrunner's host-wide variables: its place in its task, its task as the node, and the task's
    own GPUs in CUDA_VISIBLE_DEVICES (sparkrunner lists the host's with each rank's own at LOCAL_RANK, task by
    task)."""
    rank, host_local = int(env["RANK"]), int(env["LOCAL_RANK"])
    local, node = rank % processes, rank // processes
    tasks = int(env["WORLD_SIZE"]) // processes
    task = {
        "LOCAL_RANK": str(local),
        "LOCAL_WORLD_SIZE": str(processes),
        "GROUP_RANK": str(node),
        "NODE_RANK": str(node),
        "GROUP_WORLD_SIZE": str(tasks),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": env["WORLD_SIZE"],
        "ROLE_NAME": "default",
    }
    visible = [device for device in env.get(CUDA_VISIBLE, "").split(",") if device]
    if visible:
        first = host_local - local
        task[CUDA_VISIBLE] = ",".join(visible[first : first + processes])
    return task


class DeepspeedTorchDistributor(TorchDistributor):
    """``DeepspeedTorchDistributor(numGpus, nnodes, localMode, useGpu, deepspeedConfig)``, on sparkrunner.

    ``numGpus * nnodes`` ranks; a script also gets ``--deepspeed`` (and ``--deepspeed_config PATH`` when
    `deepspeedConfig` is given: a path, or a dict written to a JSON file for the run).
    """

    def __init__(
        self,
        numGpus: int = 1,
        nnodes: int = 1,
        localMode: bool = True,
        useGpu: bool = True,
        deepspeedConfig: str | dict[str, Any] | None = None,
    ) -> None:
        self.deepspeed_config = deepspeedConfig
        super().__init__(int(numGpus) * int(nnodes), localMode, useGpu, DEEPSPEED_SSL_CONF)

    def run(self, train_object: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
        """As `TorchDistributor.run`; a script is told ``--deepspeed [--deepspeed_config PATH]``."""
        if not isinstance(train_object, str):
            return super().run(train_object, *args, **kwargs)
        with _config_path(self.deepspeed_config) as path:
            flags = ["--deepspeed"] + (["--deepspeed_config", path] if path else [])
            return super().run(train_object, *args, *flags, **kwargs)


@contextmanager
def _config_path(config: str | dict[str, Any] | None) -> Iterator[str]:
    """The DeepSpeed configuration as a file path ("" for none); a dict lives in a JSON file for the run."""
    if not isinstance(config, dict):
        yield config or ""
        return
    handle, path = tempfile.mkstemp(prefix="sparkrunner-deepspeed-", suffix=".json")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(config, file)
        yield path
    finally:
        os.unlink(path)
