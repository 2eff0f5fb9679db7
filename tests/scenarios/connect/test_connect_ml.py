"""TorchEstimator over Spark Connect, against a real local Connect server (in its own driver process): a fit on
np<0 ranks (materialized rows) and in the server's barrier stage (streamed rows), and transform on the
server's executors scoring as the fitted module's own forward pass does on the client."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_driver

pytestmark = pytest.mark.spark


def test_fit_and_transform_over_spark_connect(tmp_path: Path) -> None:
    out = run_driver("connect_ml", str(tmp_path), seconds=600)
    for line in ("EPOCHS 20 20", "SAME True", "LEARNT True", "STREAMED 2"):
        assert f"\n{line}\n" in f"\n{out}", out
