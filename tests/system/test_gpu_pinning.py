"""GPU pinning from Spark task resources, on local-cluster with Spark's real resource scheduler.

There is no GPU on this machine: the one stand-in is the GPU *discovery script* (`discover_fake_gpus.sh`),
which hands each worker a made-up GPU index of its own. Scheduling, assignment and pinning are all real; both
workers run on this one host, so its two GPU tasks are the case where LOCAL_RANK and per-task GPUs must agree.
The executors carry their own CUDA_VISIBLE_DEVICES (as YARN or Slurm set it): Spark's addresses are indices
into it, so rank pinned to address "0" must see device "7", never "0".
"""

from __future__ import annotations

import ast
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import GpuUnavailableError
from sparkrunner.frameworks.horovod_env import horovod_installed
from sparkrunner.system.gpus import device_ids, host_devices
from sparkrunner.topology import Peer, Topology
from tests.conftest import CLUSTER_MASTER, spark_session
from tests.helpers import driver_url
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


def gpu_idioms() -> dict[str, Any]:
    """The local ranks each GPU idiom reads in this rank, its GPU list, and the executor JVM it runs under.

    `hvd.local_rank()` is HOROVOD_LOCAL_RANK under Gloo (direct) and Open MPI's local rank under mpirun."""
    import psutil

    executor = next(p for p in psutil.Process().parents() if p.name() == "java")
    return {
        "rank": int(os.environ["RANK"]),
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
        "horovod_local_rank": os.environ.get("HOROVOD_LOCAL_RANK"),
        "ompi_local_rank": os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK"),
        "visible": os.environ["CUDA_VISIBLE_DEVICES"],
        "executor_pid": executor.pid,
    }


def executor_gpus(spark: Any) -> dict[int, str]:
    """Executor JVM pid -> the device its GPU address points at, read from the resources file Spark's worker
    wrote for that executor (the oracle: Spark's own assignment, not sparkrunner's topology)."""
    import psutil

    found, ours = {}, driver_url(spark)
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "java" and ours in cmdline and "--resourcesFile" in cmdline:
            allocations = json.loads(Path(cmdline[cmdline.index("--resourcesFile") + 1]).read_text())
            (gpu,) = [a["addresses"] for a in allocations if a["id"]["resourceName"] == "gpu"]
            found[proc.pid] = MAPPED[gpu[0]]
    return found


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_every_gpu_idiom_picks_the_ranks_own_task_gpu(spark_with_fake_gpus: Any, launcher: str) -> None:
    """Spark placement, np=2, two GPU tasks on one host (torchrun's model): every rank sees both tasks' GPUs
    and `CUDA_VISIBLE_DEVICES[LOCAL_RANK]` (= `hvd.local_rank()`, = Open MPI's local rank) is its own task's."""
    views = Runner(np=2, launcher=launcher, tracking=False).run_all(gpu_idioms)
    own_gpu = executor_gpus(spark_with_fake_gpus)
    assert sorted(own_gpu.values()) == sorted(MAPPED.values()), own_gpu
    if (
        launcher == "mpirun"
    ):  # task 0 runs mpirun: both ranks live under its executor; rank 1's task is the other
        (other,) = set(own_gpu) - {views[0]["executor_pid"]}
        expected = [own_gpu[views[0]["executor_pid"]], own_gpu[other]]
    else:
        expected = [own_gpu[view["executor_pid"]] for view in views]
    for view, gpu in zip(views, expected, strict=True):
        assert view["local_world_size"] == 2, view
        assert view["local_rank"] == view["rank"], view
        if launcher == "mpirun":
            assert view["ompi_local_rank"] == str(view["local_rank"]), view
        else:  # sparkrunner sets Horovod's Gloo variables wherever Horovod is installed
            assert view["horovod_local_rank"] == (str(view["local_rank"]) if horovod_installed() else None), (
                view
            )
        assert sorted(view["visible"].split(",")) == sorted(MAPPED.values()), view
        assert view["visible"].split(",")[view["local_rank"]] == gpu, (view, expected)


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


def test_entry_local_rank_of_the_host_list_is_each_ranks_first_gpu() -> None:
    """Two GPUs per rank (ranks_per_task on a 4-GPU task), two hosts: set_device(LOCAL_RANK) stays on the rank's
    own GPUs, and every GPU of the host is listed once."""
    t = Topology((Peer("a", (), ("0", "1")), Peer("b", (), ("4",)), Peer("a", (), ("2", "3"))))
    assert host_devices(t, "a").split(",")[t.local_rank(2)] == "2"
    assert host_devices(t, "a") == "0,2,1,3"
    assert host_devices(t, "b") == "4"
    assert host_devices(Topology((Peer("a", (), ()),)), "a") == "", "no GPU: an explicit empty list"
