"""materialize on Spark Connect DataFrames, against a real local Connect server: the tasks write Parquet with
pyarrow (the client has no SparkContext), the cache is reused across sessions only for data named by files,
a Spark Connect run (np=2, launchers `direct` and `mpirun`) reads disjoint shards that cover every row, and a
Connect DataFrame streams to np<0 ranks (its feeders on the server's slots) or is refused with no free slot.

The client runs in its own driver process, against the shared Connect server (tests/scenarios/connect/server.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers import leftover_rank_processes, run_driver
from tests.scenarios.connect.server import ConnectServer

pytestmark = pytest.mark.spark

ROWS = 1000


def _line(out: str, prefix: str) -> str:
    found = [line for line in out.splitlines() if line.startswith(prefix + " ")]
    assert found, f"no {prefix!r} line in:\n{out}"
    return found[0][len(prefix) + 1 :]


def test_materialize_a_connect_dataframe_and_read_it_in_a_connect_run(
    connect_server: ConnectServer, tmp_path: Path
) -> None:
    out = run_driver("connect_materialize", connect_server.url, str(tmp_path), str(ROWS), seconds=900)
    assert _line(out, "SESSIONS") == "True", out
    assert _line(out, "WRITTEN") == "1000 ('id', 'x')", out
    assert f"materialized {ROWS:,} rows into" in out, out
    table = pq.read_table(_line(out, "URI"))
    assert sorted(zip(table["id"].to_pylist(), table["x"].to_pylist(), strict=True)) == [
        (i, float(i % 7 * 2)) for i in range(ROWS)
    ]
    assert str(table.schema.field("x").type) == "float"
    assert _line(out, "REUSED") == "True True", "another Connect session must reuse data named by its files"
    assert _line(out, "FILES") == "False"
    assert _line(out, "UDF") == "True True True", "a UDF: keyed to the session and the DataFrame"
    assert _line(out, "RAND") == "True True"
    assert _line(out, "LOCAL") == "True"
    assert _line(out, "TABLE") == "True True", "tables and SQL are resolved in the server's catalog"
    assert _line(out, "BUILTIN") == "False", "built-in functions name their data"
    assert _line(out, "LOCAL DATA") == "True"
    assert _line(out, "VECTORS") == "[('features', 'float32', (2,)), ('label', 'int64', ())]"
    for launcher in ("direct", "mpirun"):
        shards = json.loads(_line(out, f"SHARDS {launcher}"))
        assert [len(s) for s in shards] == [ROWS // 2, ROWS // 2], launcher
        assert set(shards[0]).isdisjoint(shards[1]), f"{launcher}: shards overlap"
        assert sorted(shards[0] + shards[1]) == list(range(ROWS)), f"{launcher}: rows missing"
    streamed = json.loads(_line(out, "STREAM"))
    assert [len(s) for s in streamed] == [ROWS // 2, ROWS // 2], "stream over Connect: unequal steps"
    assert sorted(streamed[0] + streamed[1]) == list(range(ROWS)), "stream over Connect: not every row once"
    assert _line(out, "STREAM REFUSED") == "True", "no free slot for the feeders must be refused"
    assert leftover_rank_processes(grace_s=10) == {}
