"""Every estimator over Spark Connect, against one real local Connect server (in its own driver process, launcher
direct): TorchEstimator fitted on np<0 ranks (materialized rows) and in the server's barrier stage (streamed
rows), saved (unfitted in a Pipeline, fitted in a PipelineModel) and loaded over Connect, scoring on the server's executors as the fitted module's own forward pass does on the client; then
LightningEstimator (np<0), KerasEstimator (tf_keras, np<0) and FunctionEstimator (a barrier stage, materialized
rows), each scored on the executors within a bound of the generating function, the error computed in Spark."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import run_driver

pytestmark = pytest.mark.spark


@pytest.mark.timeout(960)
def test_fit_and_transform_over_spark_connect(tmp_path: Path) -> None:
    # a bound, not a timing: five estimators' fits in one driver took 581 s at a load of ~10
    out = run_driver("connect_ml", str(tmp_path), seconds=900)
    for line in ("EPOCHS 20 20", "SAME True", "LEARNT True", "SAVED TorchEstimator 3 True", "LOADED True",
                 "STREAMED 2"):  # fmt: skip
        assert f"\n{line}\n" in f"\n{out}", out
    # each: the epochs in its history (the rows its train_fn saw, for the function) and its worst error
    for name, size, bound in (("LIGHTNING", 6, 0.2), ("KERAS", 8, 0.2), ("FUNCTION", 800, 1e-3)):
        found = re.search(rf"^{name} (\d+) (\S+)$", out, re.MULTILINE)
        assert found is not None, out
        assert int(found[1]) == size and float(found[2]) < bound, found[0]
