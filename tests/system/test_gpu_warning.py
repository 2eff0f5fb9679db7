"""No silent CPU training: a rank on a host with GPUs, whose task Spark gave none, warns the person.

On a machine without GPUs the stand-in is a fake `nvidia-smi` (named `nvidia-smi`, in a folder put first on
the ranks' PATH) that lists two GPUs; on a GPU host the NVIDIA driver's own count wins (/proc is read before
nvidia-smi). Either way Spark (local-cluster, no GPU resources configured) assigns none.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import GpuUnavailableError, SparkRunnerWarning
from tests.matrix import LAUNCHERS

_FAKE_NVIDIA_SMI = """#!/bin/sh
# STAND-IN for nvidia-smi on a machine without GPUs: `nvidia-smi -L` lists two made-up GPUs.
echo "GPU 0: Stand-in GPU (UUID: GPU-00000000-0000-0000-0000-000000000000)"
echo "GPU 1: Stand-in GPU (UUID: GPU-11111111-1111-1111-1111-111111111111)"
"""


@pytest.fixture
def path_with_fake_nvidia_smi(tmp_path: Path) -> str:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(_FAKE_NVIDIA_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    return f"{tmp_path}{os.pathsep}{os.environ['PATH']}"


def real_gpus_here() -> int:
    """The NVIDIA driver's GPUs on this machine, read here (0 on a machine without them)."""
    proc = Path("/proc/driver/nvidia/gpus")
    return len(list(proc.iterdir())) if proc.is_dir() else 0


EXPECTED_GPUS = real_gpus_here() or 2  # else the stand-in's two


def visible_gpus() -> str:
    return os.environ["CUDA_VISIBLE_DEVICES"]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_host_with_gpus_but_none_assigned_warns(
    spark_cluster: Any, launcher: str, path_with_fake_nvidia_smi: str
) -> None:
    """Spark placement, np=2: the run goes on (on CPU, nothing visible) and says why, once per host."""
    runner = Runner(np=2, launcher=launcher, tracking=False, env={"PATH": path_with_fake_nvidia_smi})
    with pytest.warns(
        SparkRunnerWarning, match=rf"has {EXPECTED_GPUS} GPU\(s\), but Spark assigned none"
    ) as caught:
        assert runner.run(visible_gpus) == ""
    assert len([w for w in caught if issubclass(w.category, SparkRunnerWarning)]) == 1


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_use_gpu_false_is_silent(spark_cluster: Any, launcher: str, path_with_fake_nvidia_smi: str) -> None:
    import warnings

    runner = Runner(
        np=2, launcher=launcher, tracking=False, use_gpu=False, env={"PATH": path_with_fake_nvidia_smi}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", SparkRunnerWarning)
        assert runner.run(visible_gpus) == ""


def test_use_gpu_true_refuses_before_starting_when_spark_gives_no_gpu(spark_cluster: Any) -> None:
    with pytest.raises(GpuUnavailableError, match=r"spark\.task\.resource\.gpu\.amount"):
        Runner(np=2, launcher="direct", tracking=False, use_gpu=True).run(visible_gpus)


@pytest.mark.skipif(
    real_gpus_here() > 0 or shutil.which("nvidia-smi") is not None, reason="this machine has a GPU"
)
def test_use_gpu_true_on_the_driver_refuses_without_a_gpu() -> None:
    """np=-2 (driver placement) on this GPU-less machine, without the stand-in on PATH."""
    with pytest.raises(GpuUnavailableError, match="this machine has no GPU"):
        Runner(np=-2, launcher="direct", tracking=False, use_gpu=True).run(visible_gpus)
