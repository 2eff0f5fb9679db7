"""Which GPUs a rank may use, and no silent CPU training.

Spark's task GPU addresses are indices into the executor's own CUDA_VISIBLE_DEVICES when it has one (YARN,
some Kubernetes and Slurm set it), so they are mapped onto it, never written over it. The model is torchrun's,
whatever the launcher: every rank of a Spark run sees the GPUs of all of the run's tasks on its host, listed so
that entry LOCAL_RANK is the rank's own GPU; `set_device(LOCAL_RANK)`, `set_device(hvd.local_rank())` and
Lightning's `parallel_devices[local_rank]` then agree (docs/frameworks.md). A rank on a host that has GPUs,
whose task Spark gave none, warns the person (it would otherwise train on CPU without a word);
`use_gpu=False` hides the GPUs on purpose and `use_gpu=True` refuses to start without them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import MutableMapping, Sequence

from sparkrunner.common.environment import CUDA_VISIBLE, Env
from sparkrunner.errors import GpuUnavailableError
from sparkrunner.timeouts import NVIDIA_SMI_TIMEOUT_S
from sparkrunner.topology import Topology

NVIDIA_PROC_GPUS = "/proc/driver/nvidia/gpus"  # one entry per GPU the NVIDIA driver knows


def host_gpu_count() -> int:
    """GPUs on this host, cheaply: the NVIDIA driver's /proc entries, else `nvidia-smi -L` when it is on PATH."""
    try:
        return len(os.listdir(NVIDIA_PROC_GPUS))
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        listed = subprocess.run(
            [smi, "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listed.splitlines() if line.startswith("GPU "))


def device_ids(addresses: Sequence[str], inherited: str | None) -> tuple[str, ...]:
    """Spark's GPU addresses for a task as CUDA device ids, mapped through the executor's CUDA_VISIBLE_DEVICES.

    An address that is an index into that list becomes the entry it points at; one that is already an entry
    (a discovery script that reports the listed ids) stays; anything else is an error, not a guess.
    """
    if inherited is None:
        return tuple(addresses)
    visible = [d.strip() for d in inherited.split(",") if d.strip()]
    mapped = []
    for address in addresses:
        if address.isdigit() and int(address) < len(visible):
            mapped.append(visible[int(address)])
        elif address in visible:
            mapped.append(address)
        else:
            raise GpuUnavailableError(
                f"Spark gave this task GPU {address!r}, but the executor's {CUDA_VISIBLE}={inherited!r} "
                f"holds no such device (Spark's addresses are read as indices into it). Make the GPU "
                f"discovery script report indices into {CUDA_VISIBLE}, or unset it on the executors."
            )
    return tuple(mapped)


def host_devices(topology: Topology, host: str) -> str:
    """CUDA_VISIBLE_DEVICES for every rank on `host`: each rank's first GPU in local-rank order (so entry
    LOCAL_RANK is the rank's own), then the rest of their GPUs; each device is listed once."""
    owned = [peer.gpus for peer in topology.peers if peer.host == host]
    ordered = [gpus[0] for gpus in owned if gpus] + [gpu for gpus in owned for gpu in gpus[1:]]
    return ",".join(dict.fromkeys(ordered))


def require_spark_gpus(task_gpu_amount: float) -> None:
    """`use_gpu=True` on Spark: refuse before anything starts when Spark gives tasks no GPU."""
    if task_gpu_amount <= 0:
        raise GpuUnavailableError(
            "use_gpu=True, but Spark assigns no GPU to tasks. Create the SparkSession with "
            "spark.task.resource.gpu.amount=1 (plus spark.executor.resource.gpu.amount and a GPU discovery "
            "script), or use use_gpu=None to allow CPU training."
        )


def require_host_gpus() -> None:
    """`use_gpu=True` on the driver (np < 0): refuse when this machine has no GPU."""
    if host_gpu_count() == 0:
        raise GpuUnavailableError(
            "use_gpu=True, but this machine has no GPU (neither /proc/driver/nvidia nor nvidia-smi lists "
            "one). Run on a GPU machine, or use use_gpu=None to allow CPU training."
        )


def use_gpu_value(use_gpu: bool | None) -> str:
    """How `Runner(use_gpu=...)` travels to the ranks (Env.USE_GPU)."""
    return {None: "auto", True: "1", False: "0"}[use_gpu]


def pin_rank_gpus(env: MutableMapping[str, str]) -> str | None:
    """In the rank, before user code: hide every GPU under `use_gpu=False`; the launcher set the host's list.

    Returns a warning for the driver when the host has GPUs that this rank cannot use by Spark's choice.
    """
    if env.get(Env.USE_GPU) == "0":
        env[CUDA_VISIBLE] = ""  # hidden on purpose: CPU training
        return None
    assigned = env.get(Env.TASK_GPUS)
    if assigned is None:
        return None  # not in a Spark task (np < 0): the machine's GPUs, as the person set them
    if assigned:
        return None
    count = host_gpu_count()
    if count == 0:
        return None
    return (
        f"{socket.gethostname()} has {count} GPU(s), but Spark assigned none to the barrier task(s) there: "
        f"those ranks train on CPU. Create the SparkSession with spark.task.resource.gpu.amount=1 (and "
        f"spark.executor.resource.gpu.amount plus a discovery script) to use them, or pass "
        f"Runner(use_gpu=False) to train on CPU on purpose."
    )


def cuda_initialised() -> bool:
    """Whether this process initialised CUDA, by torch or by anything that loaded the CUDA driver's library (which
    the CUDA runtime loads when it is first called, ``cuInit``): a child forked from it could not use CUDA."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return True
    with open("/proc/self/maps") as maps:
        return any("/libcuda.so" in line for line in maps)
