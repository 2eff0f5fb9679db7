"""The inference bench's load count, which its "loads equal to the Python workers" figure rests on: every process
that builds or unpickles a bench model adds one line with its pid, and the bench counts lines and pids."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from bench.inference import CNN, LOADS, MLP, WIDTH, loads


@pytest.mark.parametrize("cls", [MLP, CNN])
def test_building_and_unpickling_a_model_each_count_one_load_of_this_process(
    cls: type[torch.nn.Module], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    count_file = tmp_path / "loads"
    monkeypatch.setenv(LOADS, str(count_file))
    model = cls()
    copy = pickle.loads(pickle.dumps(model))
    assert count_file.read_text().split() == [str(os.getpid())] * 2  # the file itself, read independently
    assert loads(count_file) == (2, 1)
    x = torch.rand(5, WIDTH)
    torch.testing.assert_close(copy(x), model(x))  # the copy is the same network, not a fresh one


FAKE_NVIDIA_SMI = """#!/bin/sh
# nvidia-smi on a machine with GPUs 0 and 3 (the only query the discovery script makes)
[ "$*" = "--query-gpu=index --format=csv,noheader" ] && printf '0\\n3\\n'
"""


def test_gpu_conf_gives_spark_every_gpu_nvidia_smi_lists_and_a_share_of_one_per_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import subprocess

    from bench.spark_session import gpu_conf

    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    conf = gpu_conf(str(tmp_path), 2, tasks_per_gpu=4)
    script = conf["spark.executor.resource.gpu.discoveryScript"]
    assert conf["spark.worker.resource.gpu.discoveryScript"] == script
    out = subprocess.run([script], capture_output=True, text=True, check=True).stdout  # as Spark runs it
    assert json.loads(out) == {
        "name": "gpu",
        "addresses": ["0", "3"],
    }  # the JSON Spark's ResourceInformation reads
    assert conf["spark.executor.resource.gpu.amount"] == conf["spark.worker.resource.gpu.amount"] == "2"
    assert float(conf["spark.task.resource.gpu.amount"]) == 0.25
