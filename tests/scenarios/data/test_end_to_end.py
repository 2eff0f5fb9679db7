"""Spark DataFrame -> materialize -> Runner ranks that each read their shard, checked across real processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.data import ParquetData, materialize

ROWS, BATCH, EPOCHS = 1003, 16, 2


def read_shards(data: ParquetData, batch_size: int, epochs: int) -> list[dict[str, Any]]:
    """Each rank reads its shard (an allreduce per step, as training would); rank 0 gathers what all read."""
    import torch.distributed as dist

    from sparkrunner.data import TorchLoader

    dist.init_process_group("gloo")
    loader = TorchLoader(data, batch_size, seed=0)  # rank and world size come from the run
    report: dict[str, Any] = {"rank": dist.get_rank(), "len": len(loader), "steps": [], "ids": []}
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        ids: list[int] = []
        for batch in loader:
            total = batch["id"].sum()
            dist.all_reduce(total)  # would hang if one rank had fewer steps
            ids += batch["id"].tolist()
        report["steps"].append(len(ids) // batch_size)
        report["ids"].append(ids)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, report)
    dist.destroy_process_group()
    return gathered


def check_shards(reports: list[dict[str, Any]], world: int) -> None:
    assert sorted(r["rank"] for r in reports) == list(range(world))
    steps = ROWS // (world * BATCH)
    for report in reports:
        assert report["len"] == steps and report["steps"] == [steps] * EPOCHS
    for epoch in range(EPOCHS):
        seen = [i for report in reports for i in report["ids"][epoch]]
        assert len(seen) == len(set(seen)) == steps * world * BATCH, f"epoch {epoch}: shards overlap"
        assert set(seen) <= set(range(ROWS))
    first = reports[0]["ids"]
    assert first[0] != first[1], "epoch 1 repeated epoch 0's order"


@pytest.fixture(scope="module")
def dataset(spark_local: Any, tmp_path_factory: pytest.TempPathFactory) -> ParquetData:
    frame = spark_local.range(0, ROWS, numPartitions=3).selectExpr("id", "CAST(id % 7 AS DOUBLE) AS x")
    return materialize(frame, tmp_path_factory.mktemp("cache"), max_rows_per_file=200)


@pytest.mark.spark
def test_spark_ranks_read_disjoint_equal_shards(
    spark_local: Any, dataset: ParquetData, launcher: str
) -> None:
    check_shards(
        Runner(np=2, spark=spark_local, launcher=launcher).run(read_shards, dataset, BATCH, EPOCHS), world=2
    )


def test_local_ranks_read_disjoint_equal_shards(dataset: ParquetData, tmp_path: Path, launcher: str) -> None:
    check_shards(Runner(np=-2, launcher=launcher).run(read_shards, dataset, BATCH, EPOCHS), world=2)
