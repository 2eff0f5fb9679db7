"""Run a guarantee test against both readers: Petastorm's cases run for real in the pinned environment, all of a
module's in one pytest there."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparkrunner.data import NumpyLoader

READERS = ("arrow", "petastorm")
ROOT = Path(__file__).resolve().parents[2]
PETASTORM_PYTHON = ROOT / ".venv-petastorm" / "bin" / "python"
HAVE_PETASTORM = importlib.util.find_spec("petastorm") is not None
_DELEGATE_TIMEOUT_S = 300
"""For one pytest in .venv-petastorm running every Petastorm case of a module (each case had this bound alone)."""


def both_readers(test: Callable[..., Any]) -> Callable[..., Any]:
    """Parametrize `test` over the readers; where Petastorm cannot import, its case reports the outcome the same
    case had in .venv-petastorm, where one pytest ran every collected Petastorm case of the module."""

    @pytest.mark.parametrize("reader", READERS)
    @functools.wraps(test)
    def run(*args: Any, reader: str, **kwargs: Any) -> Any:
        if reader == "petastorm" and not HAVE_PETASTORM:
            return _report_petastorm_outcome(_current_test_id())
        return test(*args, reader=reader, **kwargs)

    run.runs_petastorm_elsewhere = True  # type: ignore[attr-defined]
    return run


_PETASTORM_CASES: list[str] = []
"""The collected Petastorm cases that run in .venv-petastorm (node ids), set by note_petastorm_cases."""
_PETASTORM_OUTCOMES: dict[str, dict[str, dict[str, str]]] = {}
"""Per module: each Petastorm case's outcome in .venv-petastorm (tests/data/petastorm_report.py)."""


def note_petastorm_cases(items: list[pytest.Item]) -> None:
    """Keep the node ids of the collected (not deselected) Petastorm cases that run in .venv-petastorm."""
    _PETASTORM_CASES[:] = [
        _without_group(item.nodeid)
        for item in items
        if getattr(getattr(item, "function", None), "runs_petastorm_elsewhere", False)
        and getattr(getattr(item, "callspec", None), "params", {}).get("reader") == "petastorm"
        and not HAVE_PETASTORM
    ]


def _current_test_id() -> str:
    """The running test's id as a pytest command line names it: without the ` (call)` phase, nor the
    `@<group>` that pytest-xdist appends under `--dist loadgroup` (after the last `]`, as xdist reads it)."""
    return _without_group(os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0])


def _without_group(node_id: str) -> str:
    """`node_id` without the `@<group>` pytest-xdist appends to it under `--dist loadgroup` (after the last `]`)."""
    at = node_id.rfind("@")
    return node_id[:at] if at > node_id.rfind("]") else node_id


def _report_petastorm_outcome(node_id: str) -> None:
    """Pass, skip or fail as `node_id` did in .venv-petastorm, running its module's cases there first if none
    has run yet (one pytest start and one Petastorm import for them all, not one per case)."""
    module = node_id.split("::")[0]
    if module not in _PETASTORM_OUTCOMES:
        cases = [case for case in _PETASTORM_CASES if case.split("::")[0] == module]
        _PETASTORM_OUTCOMES[module] = _run_in_petastorm_env(cases if node_id in cases else [*cases, node_id])
    outcome = _PETASTORM_OUTCOMES[module][node_id]
    if outcome["outcome"] == "skipped":
        pytest.skip(f"in the Petastorm environment: {outcome['details']}")
    if outcome["outcome"] == "failed":
        pytest.fail(f"{node_id} failed in the Petastorm environment:\n{outcome['details']}", pytrace=False)


def _run_in_petastorm_env(node_ids: list[str]) -> dict[str, dict[str, str]]:
    """Run `node_ids` in one pytest in .venv-petastorm; each case's outcome and, unless it passed, its report."""
    assert PETASTORM_PYTHON.exists(), f"{PETASTORM_PYTHON} is missing: run scripts/setup.sh"
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "outcomes.json"
        command = [str(PETASTORM_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += ["-p", "tests.data.petastorm_report", *node_ids]
        done = subprocess.run(
            command,
            cwd=ROOT,
            env={**os.environ, "SPARKRUNNER_PETASTORM_REPORT": str(report)},
            capture_output=True,
            text=True,
            timeout=_DELEGATE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        assert report.exists(), (
            f"pytest in the Petastorm environment reported nothing:\n{done.stdout}\n{done.stderr}"
        )
        outcomes: dict[str, dict[str, str]] = json.loads(report.read_text())
    for missing in set(node_ids) - set(outcomes):  # e.g. not collected there
        outcomes[missing] = {
            "outcome": "failed",
            "details": f"it did not run; pytest said:\n{done.stdout}\n{done.stderr}",
        }
    return outcomes


def write_dataset(path: Path, file_rows: list[int], row_group_rows: int) -> Path:
    """Real Parquet files: `id` (0..n-1, unique), `x` (2 floats derived from id) and `y` (id % 10)."""
    path.mkdir(parents=True, exist_ok=True)
    start = 0
    for number, rows in enumerate(file_rows):
        ids = np.arange(start, start + rows, dtype=np.int64)
        x = np.stack([ids, -ids], axis=1).astype(np.float32).reshape(-1)
        table = pa.table(
            {
                "id": ids,
                "x": pa.FixedSizeListArray.from_arrays(pa.array(x), 2).cast(pa.list_(pa.float32())),
                "y": (ids % 10).astype(np.int32),
            }
        )
        pq.write_table(table, path / f"part-{number:05d}.parquet", row_group_size=row_group_rows)
        start += rows
    return path


def epoch_ids(loader: NumpyLoader, epoch: int) -> list[np.ndarray]:
    """The ids of every batch of one epoch, checking each batch's shape on the way."""
    loader.set_epoch(epoch)
    found = []
    for batch in loader:
        assert batch["id"].shape == (loader.batch_size,)
        assert batch["x"].shape == (loader.batch_size, 2)
        np.testing.assert_array_equal(batch["x"][:, 0], batch["id"])  # rows stay whole through shuffling
        found.append(batch["id"].copy())
    return found
