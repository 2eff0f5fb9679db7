"""The TorchDistributor drop-in over Spark Connect (local_mode=False; the direct launcher, TorchDistributor's
only one): a function's rank-0 value and a script, against a real local Connect server in its own driver
process (a Connect server must not share the pytest process with the classic session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_driver

pytest.importorskip("torch")

DRIVER = """
from sparkrunner.compat import TorchDistributor
from tests.connect.server import start_connect_session

server, spark = start_connect_session()
print("SESSION", type(spark).__module__, flush=True)

def allreduce(scale):
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    value = torch.tensor([scale * (dist.get_rank() + 1)])
    dist.all_reduce(value)
    return dist.get_world_size(), value.item()

print("FUNCTION", TorchDistributor(2, local_mode=False, use_gpu=False).run(allreduce, 2.0), flush=True)
print("SCRIPT", TorchDistributor(2, local_mode=False, use_gpu=False).run(SCRIPT_PATH, OUT_DIR), flush=True)
try:
    TorchDistributor(2, local_mode=False, use_gpu=True)
except RuntimeError as exc:
    print("GPU", exc, flush=True)
"""

SCRIPT = """
import os, sys
import torch.distributed as dist
dist.init_process_group("gloo")
open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}"), "w").write(os.environ["WORLD_SIZE"])
"""


@pytest.mark.spark
def test_function_and_script_over_spark_connect(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    driver = DRIVER.replace("SCRIPT_PATH", repr(str(script))).replace("OUT_DIR", repr(str(out_dir)))
    out = run_driver(driver, tmp_path, seconds=600)
    assert "SESSION pyspark.sql.connect.session" in out, out
    assert "FUNCTION (2, 6.0)" in out, out  # 2*1 + 2*2
    assert "SCRIPT None" in out, out
    assert sorted(p.name for p in out_dir.iterdir()) == ["rank0", "rank1"]
    assert "spark.task.resource.gpu.amount' was unset" in out, out
