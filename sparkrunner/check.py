"""`sparkrunner check`: what this environment can run, from the Spark cluster down to the GPUs.

Like ``horovodrun --check-build``, for the whole stack: Spark master and slots, launchers, Horovod's build,
framework versions, GPUs. Each line is one fact; nothing here starts a rank.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
from collections.abc import Iterator
from typing import Any

from sparkrunner.errors import SparkRunnerError
from sparkrunner.launch.mpirun import MpirunLauncher
from sparkrunner.system.gpus import CUDA_VISIBLE, host_gpu_count
from sparkrunner.timeouts import TOOL_TIMEOUT_S


def report(spark: Any | None) -> Iterator[str]:
    """Lines describing this environment; the Spark section only when a session is given."""
    yield f"sparkrunner {_version('sparkrunner')}, Python {platform.python_version()}, pyspark {_version('pyspark')}"
    yield from _spark_lines(spark)
    yield from _launcher_lines()
    yield from _horovod_lines()
    yield from _framework_lines()


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _spark_lines(spark: Any | None) -> Iterator[str]:
    from sparkrunner.placement.slots import session_slots
    from sparkrunner.placement.spark_sessions import is_connect_session, task_resource_amount

    if spark is None:
        yield "Spark: not checked (give --master or --remote to check a cluster; --np < 0 needs no Spark)"
        return
    conf = spark.conf
    if is_connect_session(spark):
        yield f"Spark: Spark Connect {spark.version}, master {conf.get('spark.master', None) or 'not visible'}"
    else:
        yield f"Spark: {spark.version}, master {spark.sparkContext.master}"
    slots = session_slots(spark)
    yield f"  task slots: {slots if slots is not None else 'not visible over Spark Connect (start_timeout applies)'}"
    dynamic = conf.get("spark.dynamicAllocation.enabled", "false")
    yield f"  dynamic allocation: {dynamic}" + (" (barrier stages refuse it)" if dynamic == "true" else "")
    executor_gpus = conf.get("spark.executor.resource.gpu.amount", None)
    yield f"  GPUs per task: {task_resource_amount(spark):g}, per executor: {executor_gpus or 0}"


def _launcher_lines() -> Iterator[str]:
    yield "Launchers:"
    yield "  direct: available (one process per task; torch.distributed, Horovod over Gloo, TF)"
    try:
        MpirunLauncher().check_available()
    except SparkRunnerError as exc:
        yield f"  mpirun: not available: {exc}"
    else:
        yield f"  mpirun: available ({_first_line(['mpirun', '--version'])}) - what launcher='auto' picks for Horovod or mpi4py code"


def _horovod_lines() -> Iterator[str]:
    version = _version("horovod")
    if version is None:
        yield "Horovod: not installed (torch.distributed and TF need no Horovod)"
        return
    from horovod.common import util

    built = {name: _probe(getattr(util, f"{name.lower()}_built")) for name in ("MPI", "Gloo", "NCCL")}
    frameworks = [
        name for name in ("torch", "tensorflow") if _probe(lambda n=name: util.extension_available(n))
    ]
    yield f"Horovod {version}: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in built.items())
    yield f"  framework bindings: {', '.join(frameworks) or 'none'}"


def _framework_lines() -> Iterator[str]:
    torch_version = _version("torch")
    yield f"torch: {torch_version or 'not installed'}"
    tf_version = _version("tensorflow") or _version("tensorflow-cpu")
    yield f"TensorFlow: {tf_version or 'not installed'}"
    if torch_version is not None:
        import torch

        yield f"  torch CUDA: {torch.version.cuda or 'none (CPU build)'}, GPUs visible: {torch.cuda.device_count()}"
    gpus = host_gpu_count()
    visible = os.environ.get(CUDA_VISIBLE)
    yield f"GPUs on this machine: {gpus}" + (f" ({CUDA_VISIBLE}={visible})" if visible is not None else "")


def _probe(check: Any) -> bool:
    try:
        return bool(check())
    except Exception:
        return False


def _first_line(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{command[0]} failed: {exc}"
    return (done.stdout.strip().splitlines() or ["?"])[0]
