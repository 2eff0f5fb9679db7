"""Run a guarantee test against both readers: Petastorm's case runs for real in the pinned environment."""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
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


def both_readers(test: Callable[..., Any]) -> Callable[..., Any]:
    """Parametrize `test` over the readers; where Petastorm cannot import, rerun its case in .venv-petastorm."""

    @pytest.mark.parametrize("reader", READERS)
    @functools.wraps(test)
    def run(*args: Any, reader: str, **kwargs: Any) -> Any:
        if reader == "petastorm" and not HAVE_PETASTORM:
            return _run_in_petastorm_env(_current_test_id())
        return test(*args, reader=reader, **kwargs)

    return run


def _current_test_id() -> str:
    """The running test's id as a pytest command line names it: without the ` (call)` phase, nor the
    `@<group>` that pytest-xdist appends under `--dist loadgroup` (after the last `]`, as xdist reads it)."""
    node_id = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
    at = node_id.rfind("@")
    return node_id[:at] if at > node_id.rfind("]") else node_id


def _run_in_petastorm_env(node_id: str) -> None:
    assert PETASTORM_PYTHON.exists(), f"{PETASTORM_PYTHON} is missing: run scripts/setup.sh"
    command = [str(PETASTORM_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", node_id]
    done = subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=_DELEGATE_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, (
        f"{node_id} failed in the Petastorm environment:\n{done.stdout}\n{done.stderr}"
    )


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
