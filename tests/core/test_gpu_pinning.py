"""GPU pinning from Spark task resources, on local-cluster with Spark's real resource scheduler.

There is no GPU on this machine: the one stand-in is the GPU *discovery script*, which reports made-up
addresses to Spark's workers (a mock, named as such). Scheduling, assignment and pinning are all real.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from tests.conftest import CLUSTER_MASTER, spark_session

FAKE_GPUS = ["3", "5"]


@pytest.fixture(scope="module")
def spark_with_fake_gpus(tmp_path_factory: pytest.TempPathFactory) -> Any:
    script: Path = tmp_path_factory.mktemp("gpu") / "discover_fake_gpus.sh"
    script.write_text(f"#!/bin/sh\necho '{json.dumps({'name': 'gpu', 'addresses': FAKE_GPUS})}'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return spark_session(
        CLUSTER_MASTER,
        **{
            "spark.worker.resource.gpu.amount": "1",
            "spark.worker.resource.gpu.discoveryScript": str(script),
            "spark.executor.resource.gpu.amount": "1",
            "spark.executor.resource.gpu.discoveryScript": str(script),
            "spark.task.resource.gpu.amount": "1",
        },
    )


def visible_gpus() -> list[str]:
    seen = os.environ["CUDA_VISIBLE_DEVICES"]
    print("gpus", os.environ["RANK"], seen)
    return [seen]


def test_each_rank_sees_exactly_its_tasks_gpu(
    spark_with_fake_gpus: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    Runner(np=2).run(visible_gpus)
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines() if " gpus " in line]
    assert len(lines) == 2
    for *_, gpus in lines:
        assert len(gpus.split(",")) == 1, "one task GPU means one visible device"
        assert gpus in FAKE_GPUS
