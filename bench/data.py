"""Rows per second into framework batches for one rank of two, side by side, on a few-million-row Parquet dataset.

    .venv/bin/python bench/data.py [--rows 4000000] [--batch-size 1024] [--repeats 3]

Measures, in one run and on the same files: the limits of this machine for the rank's half - pyarrow's
multi-threaded decode of its row groups into memory (the decode ceiling) and a memory copy of the same
decoded bytes (the bandwidth ceiling) -; raw pyarrow.parquet iter_batches -> numpy (a naive loop);
sparkrunner's native reader (numpy) and torch loader, from local files and from a local S3-API server
(moto), with that server's own limit (the rank's files fetched whole in parallel, no decode); and - in the pinned Petastorm environment (.venv-petastorm), as a subprocess - Petastorm's
make_batch_reader and BatchedDataLoader with cur_shard/shard_count. Targets: torch loader >= 0.8x the
decode ceiling; reading from the S3 server >= 0.5x local; torch loader >= 2x BatchedDataLoader.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

PETASTORM_PYTHON = ROOT / ".venv-petastorm" / "bin" / "python"
FEATURES = 16
FILES = 8
ROW_GROUPS_PER_FILE = 2
WORLD, RANK = 2, 0


def write_dataset(path: Path, rows: int) -> None:
    """`features` (16 float32 per row, as Spark writes an array column) and `label`, in 8 files of 2 row groups."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.mkdir(parents=True)
    rng = np.random.default_rng(0)
    per_file = rows // FILES
    for number in range(FILES):
        values = pa.array(rng.random(per_file * FEATURES, dtype=np.float32))
        offsets = pa.array(np.arange(0, (per_file + 1) * FEATURES, FEATURES, dtype=np.int32))
        table = pa.table(
            {
                "features": pa.ListArray.from_arrays(offsets, values),
                "label": rng.integers(0, 10, per_file, dtype=np.int64),
            }
        )
        pq.write_table(
            table, path / f"part-{number:05d}.parquet", row_group_size=per_file // ROW_GROUPS_PER_FILE
        )


def best_rates(candidates: dict[str, Callable[[], Iterable[Any]]], repeats: int) -> dict[str, float]:
    """Rows/s of full passes, taking turns so that load from other work hits every candidate alike; best pass."""
    best = dict.fromkeys(candidates, 0.0)
    for _ in range(repeats):
        for name, batches in candidates.items():
            start = time.perf_counter()
            rows = sum(_rows(batch) for batch in batches())
            best[name] = max(best[name], rows / (time.perf_counter() - start))
    return best


def _rows(batch: Any) -> int:
    return len(batch.label) if hasattr(batch, "label") else len(batch["label"])


def raw_pyarrow(path: Path, batch_size: int) -> Iterable[dict[str, np.ndarray]]:
    """The ceiling: iter_batches over this rank's half of the files, each column straight to numpy."""
    import pyarrow.parquet as pq

    for file in sorted(path.glob("*.parquet"))[RANK::WORLD]:
        for batch in pq.ParquetFile(file).iter_batches(batch_size=batch_size):
            features = batch.column(0)
            yield {
                "features": features.flatten().to_numpy().reshape(len(batch), FEATURES),
                "label": batch.column(1).to_numpy(),
            }


def rank_files(path: Path) -> list[Path]:
    """The files that hold the rank's rows when the native reader splits them unshuffled (contiguous halves)."""
    files = sorted(path.glob("*.parquet"))
    per_rank = len(files) // WORLD
    return files[RANK * per_rank : (RANK + 1) * per_rank]


def decode_ceiling(path: Path) -> Iterable[dict[str, Any]]:
    """pyarrow's multi-threaded decode of the rank's row groups straight into one in-memory table."""
    import pyarrow.parquet as pq

    table = pq.read_table([str(f) for f in rank_files(path)], use_threads=True)
    yield {"label": table.column("label")}


def copy_ceiling(path: Path) -> Callable[[], Iterable[dict[str, Any]]]:
    """A memory copy of as many bytes as the rank's decoded columns take: no reader can beat memory bandwidth."""
    import pyarrow.parquet as pq

    table = pq.read_table([str(f) for f in rank_files(path)])
    source = np.ones(table.nbytes, dtype=np.uint8)
    target = np.empty_like(source)
    rows = np.empty(table.num_rows, dtype=np.int8)

    def copy() -> Iterable[dict[str, Any]]:
        np.copyto(target, source)
        yield {"label": rows}

    return copy


def s3_ceiling(s3_uri: str, s3_options: dict[str, Any], path: Path) -> Callable[[], Iterable[dict[str, Any]]]:
    """The S3 server's own limit: the rank's files fetched whole, in parallel, with no decode (moto's ceiling)."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    filesystem = pafs.S3FileSystem(**s3_options)
    files = rank_files(path)
    rows = np.empty(sum(pq.read_metadata(file).num_rows for file in files), dtype=np.int8)

    def fetch(file: Path) -> int:
        with filesystem.open_input_file(f"{s3_uri.removeprefix('s3://')}/{file.name}") as opened:
            return len(opened.read_buffer(opened.size()))

    def fetch_all() -> Iterable[dict[str, Any]]:
        with ThreadPoolExecutor(len(files)) as pool:
            list(pool.map(fetch, files))
        yield {"label": rows}

    return fetch_all


def main_side(
    path: Path, batch_size: int, repeats: int, s3_uri: str, s3_options: dict[str, Any]
) -> dict[str, float]:
    from sparkrunner.data import NumpyLoader, TorchLoader, materialize

    data = materialize(path)
    remote = materialize(s3_uri, storage_options=s3_options)
    candidates: dict[str, Callable[[], Iterable[Any]]] = {
        "memory copy of the same bytes": copy_ceiling(path),
        "pyarrow threaded decode into memory": lambda: decode_ceiling(path),
        "raw pyarrow iter_batches -> numpy": lambda: raw_pyarrow(path, batch_size),
        "sparkrunner native reader (numpy)": lambda: NumpyLoader(
            data, batch_size, shuffle=False, rank=RANK, world_size=WORLD
        ),
        "sparkrunner native reader, shuffled": lambda: NumpyLoader(
            data, batch_size, shuffle=True, rank=RANK, world_size=WORLD
        ),
        "sparkrunner torch loader": lambda: TorchLoader(
            data, batch_size, shuffle=False, rank=RANK, world_size=WORLD
        ),
        "sparkrunner torch loader, shuffled": lambda: TorchLoader(
            data, batch_size, shuffle=True, rank=RANK, world_size=WORLD
        ),
        "S3 server: raw parallel GET, no decode": s3_ceiling(s3_uri, s3_options, path),
        "sparkrunner torch loader, S3 server": lambda: TorchLoader(
            remote, batch_size, shuffle=False, rank=RANK, world_size=WORLD
        ),
        "sparkrunner native reader, S3 server": lambda: NumpyLoader(
            remote, batch_size, shuffle=False, rank=RANK, world_size=WORLD
        ),
    }
    return best_rates(candidates, repeats)


def petastorm_side(path: Path, batch_size: int, repeats: int) -> dict[str, float]:
    """Runs in the pinned environment: Petastorm's own readers with their default pools, sharded like a rank."""
    import warnings

    from petastorm import make_batch_reader
    from petastorm.pytorch import BatchedDataLoader

    warnings.filterwarnings("ignore", category=FutureWarning)
    url = "file://" + str(path)

    def reader() -> Any:
        return make_batch_reader(
            url, cur_shard=RANK, shard_count=WORLD, num_epochs=1, shuffle_row_groups=False
        )

    def batch_reader() -> Iterable[Any]:
        with reader() as batches:
            yield from batches

    def loader() -> Iterable[Any]:
        with reader() as batches:
            yield from BatchedDataLoader(batches, batch_size=batch_size)

    candidates = {"petastorm make_batch_reader": batch_reader, "petastorm BatchedDataLoader (torch)": loader}
    return best_rates(candidates, repeats)


def petastorm_rates(path: Path, batch_size: int, repeats: int) -> dict[str, float]:
    """`petastorm_side` over the Parquet dataset at `path`, run in Petastorm's pinned environment."""
    command = [str(PETASTORM_PYTHON), __file__, "--petastorm-side", str(path)]
    command += ["--batch-size", str(batch_size), "--repeats", str(repeats)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"the Petastorm side failed (run scripts/setup.sh for .venv-petastorm):\n{done.stderr}")
    rates: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return rates


def report(results: dict[str, float], rows: int) -> None:
    print(
        f"\nrows/s into framework batches, rank {RANK} of {WORLD} ({rows // WORLD:,} of {rows:,} rows each pass)"
    )
    for name, value in results.items():
        print(f"  {name:40s} {value:>14,.0f}")
    decode = results["pyarrow threaded decode into memory"]
    ratios = {
        "torch loader / decode ceiling": (results["sparkrunner torch loader"] / decode, "(target >= 0.8x)"),
        "native reader / decode ceiling": (results["sparkrunner native reader (numpy)"] / decode, ""),
        "decode ceiling / memory copy": (decode / results["memory copy of the same bytes"], ""),
        "native reader / naive iter_batches": (
            results["sparkrunner native reader (numpy)"] / results["raw pyarrow iter_batches -> numpy"],
            "",
        ),
        "torch loader, S3 server / local": (
            results["sparkrunner torch loader, S3 server"] / results["sparkrunner torch loader"],
            "(target >= 0.5x)",
        ),
        "torch loader, S3 server / server's GET": (
            results["sparkrunner torch loader, S3 server"]
            / results["S3 server: raw parallel GET, no decode"],
            "",
        ),
    }
    print()
    for name, (value, target) in ratios.items():
        print(f"  {name:40s} {value:6.2f}x  {target}")
    if "petastorm BatchedDataLoader (torch)" in results:
        torch_ratio = results["sparkrunner torch loader"] / results["petastorm BatchedDataLoader (torch)"]
        print(f"  {'torch loader / Petastorm BatchedDataLoader':40s} {torch_ratio:6.2f}x  (target >= 2x)")
        batch_ratio = results["sparkrunner native reader (numpy)"] / results["petastorm make_batch_reader"]
        print(f"  {'native reader / Petastorm make_batch_reader':40s} {batch_ratio:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--petastorm-side", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.petastorm_side:
        print(json.dumps(petastorm_side(Path(args.petastorm_side), args.batch_size, args.repeats)))
        return
    workdir = Path(tempfile.mkdtemp(prefix="sparkrunner-bench-data-"))
    try:
        path = workdir / "dataset"
        write_dataset(path, args.rows)
        sys.path.insert(0, str(ROOT))  # the tests' S3-API server (moto in server mode) serves the S3 rows
        from tests.data.s3_server import s3_server

        with s3_server() as s3:
            uri = s3.new_prefix()
            s3.upload(path, uri)
            results = main_side(path, args.batch_size, args.repeats, uri, s3.storage_options)
        results.update(petastorm_rates(path, args.batch_size, args.repeats))
        report(results, args.rows)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
