"""What a zygote (`sparkrunner.ranks.zygote`) imports, and whether it may still fork after: `preload`, `fork_hazard`.

A fork copies the calling thread only, shares every open socket with the child, and leaves a child of a process that
initialised CUDA unable to use it: a zygote forks only while it runs one thread, holds no socket its imports opened,
and has not initialised CUDA. Its modules are chosen for that (`zygote_link.PRELOADABLE`, `WARM_LATER`), and
`fork_hazard` checks it after they are imported, so that a module that does otherwise on some host (a library's
thread, a device probe) costs a cold start there, never a broken rank.

DeepSpeed is the one module imported on a condition. The Hugging Face Trainer and Accelerate import it on first use
wherever it is installed (``accelerate.utils.other.extract_model_from_parallel``: ``from deepspeed import
DeepSpeedEngine``), and it imports MLflow (its autotuner), which brings pandas, pyspark, pydantic and fastapi: 1,756
modules, 1.5 s of a core on a quiet machine, 1.0 s of it MLflow's. MLflow starts no thread and opens no socket when
imported (its telemetry client, made at import, starts its threads with its first record:
``mlflow/telemetry/client.py``, ``TelemetryClient.__init__``), and touches no device. DeepSpeed picks its accelerator
when imported (``deepspeed/accelerator/real_accelerator.py``, ``get_accelerator``): unless ``DS_ACCELERATOR`` names
one, it asks ``torch.xpu.is_available()``, imports the vendors' torch extensions it finds (torch_npu, habana, ...),
then ``torch.cuda.device_count()`` and ``torch.cuda.is_available()``, whose default check initialises the CUDA driver
(``torch/cuda/__init__.py``, ``is_available``: ``cudaGetDeviceCount`` calls ``cuInit``). So DeepSpeed itself is
imported only where none of that can reach a device (`deepspeed_picks_cpu`); it then keeps the kind only, and its
CPU accelerator counts devices when asked, in the rank (``deepspeed/accelerator/cpu_accelerator.py``,
``device_count``: ``LOCAL_SIZE``, else the NUMA nodes; ``current_device``: ``LOCAL_RANK``). Elsewhere the zygote
imports MLflow only, and each rank imports DeepSpeed's own modules (0.4 s) and picks its device after the fork.
(Read in DeepSpeed 0.19.8, torch 2.13.0 and MLflow 3.17.2. The CPU accelerator also takes the process's resident
memory when made, the zygote's, as its first peak: a statistic, which the rank's own use then raises.)
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from sparkrunner.system import gpus, processes

DEEPSPEED = "deepspeed"
DEEPSPEED_DEPENDENCIES = ("mlflow",)
"""What DeepSpeed imports that costs most and picks no device: imported first, wherever DeepSpeed is installed."""
_DEEPSPEED_PROBES = ("torch_npu", "torch_sdaa", "habana_frameworks", "torch_mlu", "torch_supa", "torch_xmlir")
"""The vendors' torch extensions DeepSpeed's accelerator detection imports when installed (`get_accelerator`)."""


def preload(modules: Iterable[str]) -> None:
    """Import what every rank would import first; a module that fails is left to the rank. `DEEPSPEED` stands for
    `deepspeed_imports()`."""
    for name in modules:
        for module in deepspeed_imports() if name == DEEPSPEED else (name,):
            with contextlib.suppress(Exception):
                importlib.import_module(module)


def deepspeed_imports() -> tuple[str, ...]:
    """What a zygote imports for DeepSpeed: nothing where it is not installed, its dependencies, and DeepSpeed
    itself where its import can only pick the CPU."""
    if importlib.util.find_spec(DEEPSPEED) is None:
        return ()
    return (*DEEPSPEED_DEPENDENCIES, DEEPSPEED) if deepspeed_picks_cpu() else DEEPSPEED_DEPENDENCIES


def deepspeed_picks_cpu() -> bool:
    """Whether DeepSpeed's accelerator detection, followed step by step (`get_accelerator`), can only end at its
    CPU accelerator without touching a device: ``DS_ACCELERATOR`` unset or ``cpu``, a torch built without CUDA, ROCm
    or XPU (``torch.cuda.device_count()`` and ``torch.xpu.device_count()`` return 0 before calling anything), and
    none of the vendors' extensions it would import installed."""
    if os.environ.get("DS_ACCELERATOR", "cpu") != "cpu":
        return False
    import torch

    xpu = getattr(torch, "xpu", None)
    if torch.backends.cuda.is_built() or (xpu is not None and xpu._is_compiled()):
        return False
    return all(importlib.util.find_spec(probe) is None for probe in _DEEPSPEED_PROBES)


@dataclass(frozen=True)
class ForkState:
    """What a fork would copy badly, counted in this process: its threads (native ones included: a library's pool
    or background thread is no Python thread) and its open sockets."""

    threads: int
    sockets: int


def fork_state() -> ForkState:
    return ForkState(processes.native_threads(), _open_sockets())


def _open_sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # (the listing's own descriptor, gone by now)
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


def fork_hazard(before: ForkState, native_threads: bool = True) -> str | None:
    """Why a fork now would hand a rank a broken copy, after the imports made since `before`; None when it would
    not. A Python thread besides this one; a native thread more than before (where `native_threads`: numpy's
    OpenBLAS pool, made at its import, stops and restarts around a fork itself); a socket more than before; CUDA
    initialised, by torch or by anything that loaded the CUDA driver's library (which the CUDA runtime loads when
    it is first called, ``cuInit``: torch's CUDA builds import where no driver is installed)."""
    now = fork_state()
    if threading.active_count() != 1 or (native_threads and now.threads > before.threads):
        return f"{now.threads} threads after its imports"
    if now.sockets > before.sockets:
        return f"{now.sockets - before.sockets} socket(s) opened by its imports"
    if gpus.cuda_initialised():
        return "CUDA initialised by its imports"
    return None
