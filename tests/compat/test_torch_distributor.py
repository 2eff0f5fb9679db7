"""The TorchDistributor drop-in: functions and scripts, on the driver (local_mode=True) and in a barrier stage
of real local-cluster Spark (local_mode=False); always the direct launcher (TorchDistributor has no other)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkrunner.compat import DeepspeedTorchDistributor, TorchDistributor
from sparkrunner.errors import InvalidArgumentError
from tests.compat.functions import ALLREDUCE_SCRIPT, torch_allreduce

pytest.importorskip("torch")

MODES = [
    pytest.param(True, id="local_mode=True(np<0)"),
    pytest.param(False, id="local_mode=False(spark)", marks=pytest.mark.spark),
]


@pytest.fixture(scope="module", params=MODES)
def local_mode(request: pytest.FixtureRequest) -> bool:
    """Each placement: local_mode=True needs no Spark; local_mode=False gets local-cluster[2,1,1024]."""
    if not request.param:
        request.getfixturevalue("spark_cluster")
    return bool(request.param)


@pytest.mark.slow
def test_function_returns_rank_zeros_value_of_a_gloo_allreduce(local_mode: bool) -> None:
    result = TorchDistributor(num_processes=2, local_mode=local_mode, use_gpu=False).run(
        torch_allreduce, 3.0, offset=0.5
    )
    expected = sum(3.0 * (rank + 1) + 0.5 for rank in range(2))  # 9.0 + 1.0
    assert result["rank"] == 0 and result["world_size"] == 2
    assert result["sum"] == pytest.approx(expected)
    # (LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK) as pyspark's torchrun gives them: one torchrun per
    # Spark task on Spark (one process each, even on one host), one on the driver in local mode
    places = [(r, 2, 0, 0) for r in range(2)] if local_mode else [(0, 1, r, r) for r in range(2)]
    assert result["places"] == places


@pytest.mark.slow
def test_script_runs_on_every_rank_with_its_arguments_and_returns_none(
    local_mode: bool, tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text(ALLREDUCE_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    result = TorchDistributor(num_processes=2, local_mode=local_mode, use_gpu=False).run(
        str(script), str(out), 0.01, "--epochs=2"
    )
    assert result is None
    written = sorted(p.read_text() for p in out.iterdir())
    assert written == ["2 3.0 0.01 --epochs=2"] * 2


@pytest.mark.slow
def test_use_gpu_false_hides_gpus_on_spark_and_leaves_the_driver_alone(
    local_mode: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this machine has no GPU: as the original, left as set
    result = TorchDistributor(num_processes=2, local_mode=local_mode, use_gpu=False).run(torch_allreduce, 1.0)
    assert result["cuda_visible"] == ""


@pytest.mark.slow
def test_deepspeed_script_gets_deepspeed_flags_and_a_written_config(local_mode: bool, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(ALLREDUCE_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    config = {"train_batch_size": 8}
    DeepspeedTorchDistributor(
        numGpus=2, nnodes=1, localMode=local_mode, useGpu=False, deepspeedConfig=config
    ).run(str(script), str(out), 5)
    flags = [p.read_text().split(" ", 2)[2].split() for p in sorted(out.iterdir())]
    assert len(flags) == 2 and flags[0] == flags[1]
    assert flags[0][:3] == ["5", "--deepspeed", "--deepspeed_config"]
    assert not Path(flags[0][3]).exists()  # the run's JSON file is gone after the run


@pytest.mark.slow
@pytest.mark.spark
def test_deepspeed_function_returns_rank_zeros_value(spark_cluster: Any) -> None:
    """In Spark only: on the driver a function takes TorchDistributor's path with the same local Runner
    (`test_function_returns_rank_zeros_value_of_a_gloo_allreduce`); in Spark the barrier stage is DeepSpeed's
    (its own SSL setting)."""
    result = DeepspeedTorchDistributor(numGpus=2, localMode=False, useGpu=False).run(torch_allreduce, 2.0)
    assert result["world_size"] == 2 and result["sum"] == pytest.approx(2.0 + 4.0)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_num_processes_must_be_a_positive_integer(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="num_processes has to be a positive integer"):
        TorchDistributor(bad, True, False)


def test_a_script_refuses_keyword_arguments(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    with pytest.raises(InvalidArgumentError, match="not keyword arguments"):
        TorchDistributor(1, True, False).run(str(script), lr=0.1)


def test_local_mode_false_numbers_each_process_within_its_task_with_the_tasks_gpus() -> None:
    """torchrun ``--nnodes=2 --node_rank=1 --nproc_per_node=2`` in task 1 of a host running both tasks, whose
    ranks sparkrunner numbers host-wide (its GPU list: each rank's own at its host-wide LOCAL_RANK)."""
    from sparkrunner.compat.torch_distributor import torchrun_task_environment

    env = {"RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "4", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    seen = torchrun_task_environment(env, 2)
    assert (seen["LOCAL_RANK"], seen["LOCAL_WORLD_SIZE"], seen["NODE_RANK"], seen["GROUP_RANK"]) == (
        "1",
        "2",
        "1",
        "1",
    )
    assert seen["CUDA_VISIBLE_DEVICES"] == "6,7" and seen["GROUP_WORLD_SIZE"] == "2"
    assert "CUDA_VISIBLE_DEVICES" not in torchrun_task_environment({**env, "CUDA_VISIBLE_DEVICES": ""}, 2)
