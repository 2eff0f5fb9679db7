"""GPU pinning from Spark task resources, on local-cluster with Spark's real resource scheduler.

There is no GPU on this machine: the one stand-in is the GPU *discovery script* (`discover_fake_gpus.sh`),
which hands each worker a made-up GPU index of its own. Scheduling, assignment and pinning are all real.
The executors carry their own CUDA_VISIBLE_DEVICES (as YARN or Slurm set it): Spark's addresses are indices
into it, so rank pinned to address "0" must see device "7", never "0".
"""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import GpuUnavailableError
from sparkrunner.launch.gpus import device_ids
from tests.conftest import CLUSTER_MASTER, spark_session
from tests.matrix import LAUNCHERS

EXECUTOR_VISIBLE = "7,6"  # the executors' own CUDA_VISIBLE_DEVICES
MAPPED = {"0": "7", "1": "6"}  # Spark address -> the device a rank must see

_DISCOVERY_STAND_IN = """#!/bin/sh
# STAND-IN for an nvidia-smi based GPU discovery script (this machine has no GPU): every call hands out
# the next index, so each local-cluster worker owns a different GPU.
exec 9>>"{dir}/lock"
flock 9
n=$(cat "{dir}/next" 2>/dev/null || echo 0)
echo $((n + 1)) > "{dir}/next"
echo "{{\\"name\\": \\"gpu\\", \\"addresses\\": [\\"$n\\"]}}"
"""


@pytest.fixture(scope="module")
def spark_with_fake_gpus(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder: Path = tmp_path_factory.mktemp("gpu")
    script = folder / "discover_fake_gpus.sh"
    script.write_text(_DISCOVERY_STAND_IN.format(dir=folder))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return spark_session(
        CLUSTER_MASTER,
        **{
            "spark.worker.resource.gpu.amount": "1",
            "spark.worker.resource.gpu.discoveryScript": str(script),
            "spark.executor.resource.gpu.amount": "1",
            "spark.executor.resource.gpu.discoveryScript": str(script),
            "spark.task.resource.gpu.amount": "1",
            "spark.executorEnv.CUDA_VISIBLE_DEVICES": EXECUTOR_VISIBLE,
        },
    )


def show_visible_gpus() -> None:
    print("gpus", os.environ["RANK"], repr(os.environ["CUDA_VISIBLE_DEVICES"]))


def seen_gpus(out: str) -> dict[str, str]:
    """rank -> the CUDA_VISIBLE_DEVICES it printed, read from the driver's output."""
    seen = {}
    for line in out.splitlines():
        if " gpus " in line:
            rank, _, value = line.split(" gpus ", 1)[1].partition(" ")
            seen[rank] = ast.literal_eval(value)  # the repr of the str the rank printed
    return seen


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_each_rank_sees_only_its_own_tasks_gpu(
    spark_with_fake_gpus: Any, launcher: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Spark placement, np=2: two ranks never see the same GPU, and see it through the executor's list."""
    Runner(np=2, launcher=launcher, tracking=False).run(show_visible_gpus)
    seen = seen_gpus(capsys.readouterr().out)
    assert sorted(seen) == ["0", "1"], seen
    assert sorted(seen.values()) == sorted(MAPPED.values()), f"not mapped onto {EXECUTOR_VISIBLE}: {seen}"
    assert seen["0"] != seen["1"], "two ranks share a GPU"


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_use_gpu_false_hides_every_gpu(
    spark_with_fake_gpus: Any, launcher: str, capsys: pytest.CaptureFixture[str]
) -> None:
    Runner(np=2, launcher=launcher, tracking=False, use_gpu=False).run(show_visible_gpus)
    assert seen_gpus(capsys.readouterr().out) == {"0": "", "1": ""}


def test_addresses_are_indices_into_the_executors_list() -> None:
    assert device_ids(["1"], "GPU-aa,GPU-bb") == ("GPU-bb",)
    assert device_ids(["4"], "4,5") == ("4",), "an address that is already a listed id stays"
    assert device_ids(["0", "1"], None) == ("0", "1")
    with pytest.raises(GpuUnavailableError, match="CUDA_VISIBLE_DEVICES='2,3'"):
        device_ids(["7"], "2,3")
