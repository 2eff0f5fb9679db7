"""The estimators over Spark Connect, against the shared real local Connect server (tests/scenarios/connect/server.py;
the client in its own driver process, launcher direct): TorchEstimator fitted on np<0 ranks (materialized rows) and
in the server's barrier stage (streamed rows), saved (unfitted in a Pipeline, fitted in a PipelineModel) and loaded
over Connect, scoring on the server's executors as the fitted module's own forward pass does on the client; then
FunctionEstimator in a barrier stage from materialized rows, its model (a pickled result and predict_fn) scored on
the executors within a bound of the generating function, the error computed in Spark.

What differs among these over Connect: where the ranks run (np<0 or the server's barrier stage), how the rows reach
them (materialized or streamed) and the fitted model's kind in the scoring UDF. LightningEstimator and
KerasEstimator take TorchEstimator's Connect path (`fit_stage`'s hand-over and rank count, the model inside the
scoring UDF, the same writers); only their ranks' training differs, which tests/ml tests on a classic session."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import run_driver
from tests.scenarios.connect.server import ConnectServer

pytestmark = pytest.mark.spark


@pytest.mark.timeout(960)
def test_fit_and_transform_over_spark_connect(connect_server: ConnectServer, tmp_path: Path) -> None:
    # a bound, not a timing: set when the driver fitted five estimators (581 s at a load of ~10)
    out = run_driver("connect_ml", connect_server.url, str(tmp_path), seconds=900)
    for line in ("EPOCHS 20 20", "SAME True", "LEARNT True", "SAVED TorchEstimator 3 True", "LOADED True",
                 "STREAMED 2"):  # fmt: skip
        assert f"\n{line}\n" in f"\n{out}", out
    # the rows its train_fn saw and its worst error
    found = re.search(r"^FUNCTION (\d+) (\S+)$", out, re.MULTILINE)
    assert found is not None, out
    assert int(found[1]) == 800 and float(found[2]) < 1e-3, found[0]
