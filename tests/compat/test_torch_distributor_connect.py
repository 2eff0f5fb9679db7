"""The TorchDistributor drop-in over Spark Connect (local_mode=False; the direct launcher, TorchDistributor's
only one): a function's rank-0 value and a script, from a client driver process against the shared real local Connect
server (tests/scenarios/connect/server.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_driver
from tests.scenarios.connect.server import ConnectServer

pytest.importorskip("torch")

SCRIPT = """
import os, sys
import torch.distributed as dist
dist.init_process_group("gloo")
open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}"), "w").write(os.environ["WORLD_SIZE"])
"""


@pytest.mark.spark
def test_function_and_script_over_spark_connect(connect_server: ConnectServer, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = run_driver("connect_torch_distributor", connect_server.url, str(script), str(out_dir), seconds=600)
    assert "SESSION pyspark.sql.connect.session" in out, out
    assert "FUNCTION (2, 6.0)" in out, out  # 2*1 + 2*2
    assert "SCRIPT None" in out, out
    assert sorted(p.name for p in out_dir.iterdir()) == ["rank0", "rank1"]
    assert "spark.task.resource.gpu.amount' was unset" in out, out
