"""Scoring from a plain Spark Connect client, against the shared real local Connect server
(tests/scenarios/connect/server.py): a client built by ``pyspark.sql.connect`` alone (no JVM, no SparkContext, pyspark
not switched into Connect mode, where pyspark parses a DDL return type through a classic session) scores with a
`ScoringModel` of a torch classifier on the server's executors, an array and a vector feature column, and gets the
same probabilities and classes as the module's forward pass and softmax computed in the client with torch.

test_connect_ml.py builds its client through pyspark.sql's builder, which switches pyspark into Connect mode (its
Pipeline writers need it), so it cannot see what a plain client lacks."""

from __future__ import annotations

import pytest

from tests.helpers import run_driver
from tests.scenarios.connect.server import ConnectServer

pytestmark = pytest.mark.spark


def test_scoring_model_from_a_plain_connect_client(connect_server: ConnectServer) -> None:
    out = run_driver("connect_scoring", connect_server.url, seconds=240)  # a bound, not a timing
    assert "\nPLAIN True True\n" in f"\n{out}", (
        out
    )  # the client really is plain: else the test proves nothing
    assert "\nROWS 64\n" in f"\n{out}", out
    assert "\nCLASSES True\n" in f"\n{out}", out
    error = [line.split()[1] for line in out.splitlines() if line.startswith("ERROR ")]
    assert error and float(error[0]) < 1e-6, out
