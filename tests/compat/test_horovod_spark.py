"""The horovod.spark.run drop-in returns every rank's value in rank order, on local-cluster Spark, with each
launcher named as the original lets the user name it (use_gloo -> direct + Gloo rendezvous, use_mpi -> mpirun);
and under HorovodRunner, Horovod reached through the user's own module works (its rendezvous is hosted
wherever Horovod is installed)."""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparkrunner.compat import HorovodRunner, horovod_spark
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.placement.slots import task_slots
from tests.compat import hvd_helper
from tests.compat.functions import (
    ELASTIC_EPOCHS,
    elastic_batch,
    elastic_model_and_optimizer,
    horovod_elastic_training,
    horovod_rank_value,
    touch_file,
)
from tests.helpers import driver_url
from tests.matrix import LAUNCHERS
from tests.recovery.elastic_scenario import ExecutorHolder
from tests.waiting import wait_until

pytest.importorskip("horovod.torch")

log = logging.getLogger("sparkrunner")

CHOICES = {"direct": {"use_gloo": True}, "mpirun": {"use_mpi": True}}


@pytest.mark.spark
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_run_returns_every_ranks_value_in_rank_order(spark_cluster: Any, launcher: str) -> None:
    values = horovod_spark.run(
        horovod_rank_value, args=(10,), kwargs={"factor": 5}, num_proc=2, **CHOICES[launcher]
    )
    assert [v["rank"] for v in values] == [0, 1]
    assert [v["value"] for v in values] == [10, 15]
    assert [v["sum"] for v in values] == [3.0, 3.0]  # 1 + 2, every rank
    assert {v["controller"] for v in values} == {"gloo" if launcher == "direct" else "mpi"}


@pytest.mark.spark
def test_num_proc_defaults_to_spark_default_parallelism_and_stdout_is_honoured(spark_cluster: Any) -> None:
    out = io.StringIO()
    values = horovod_spark.run(horovod_rank_value, args=(0,), use_gloo=True, stdout=out)
    assert len(values) == spark_cluster.sparkContext.defaultParallelism == 2
    assert "horovod rank 0 of 2" in out.getvalue() and "horovod rank 1 of 2" in out.getvalue()


def through_own_module() -> int:
    """Reaches Horovod only through hvd_helper: nothing in this function names Horovod."""
    return hvd_helper.horovod_size()


@pytest.mark.slow
@pytest.mark.parametrize("launcher", [pytest.param("direct", id="direct")])
def test_horovod_runner_hosts_the_rendezvous_for_horovod_hidden_in_a_module(launcher: str) -> None:
    assert HorovodRunner(np=-2, launcher=launcher).run(through_own_module) == 2


def test_bad_num_proc_is_refused(spark_cluster: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="num_proc has to be a positive integer"):
        horovod_spark.run(horovod_rank_value, num_proc=0, use_gloo=True)


def uninterrupted_training() -> tuple[list[float], float]:
    """The oracle: the same epochs in this process, plain torch, no Horovod and no restart."""
    import torch

    model, optimizer = elastic_model_and_optimizer()
    for epoch in range(ELASTIC_EPOCHS):
        x, y = elastic_batch(epoch)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return model.weight.detach().flatten().tolist(), model.bias.item()


@pytest.mark.spark
@pytest.mark.slow
def test_run_elastic_restores_the_last_commit_at_the_new_size_after_a_lost_executor(
    spark_cluster: Any, tmp_path: Path
) -> None:
    """Horovod Elastic code, unchanged, through `run_elastic` (launcher direct, Spark barrier stages of 2, 1,
    then 2 tasks; the commits in the folder run_elastic makes on a local master): an executor is killed right
    after a commit and its replacement held back, so the run goes on
    at 1 rank from that commit, then grows back to 2 when the replacement is let go. The only test that runs
    Horovod's `hvd.elastic.run` and `TorchState` across restarts. Oracles: the same training in this process
    without a restart (the weights), and the ranks' own marks (which epochs ran at which size, what the reset
    callbacks saw)."""
    holder = ExecutorHolder(tmp_path, driver_url(spark_cluster), seconds=120)
    try:
        values = horovod_spark.run_elastic(
            horovod_elastic_training, args=(str(tmp_path),), num_proc=2, min_num_proc=1, max_num_proc=2,
            reset_limit=1, start_timeout=120, tracking=False, progress=False,
        )  # fmt: skip
    finally:
        holder.join()
        wait_until(lambda: task_slots(spark_cluster.sparkContext) >= 2, 120, "2 task slots")
    assert holder.killed_at is not None and holder.held is not None, "no executor was killed and held back"

    marks = [line.split() for line in (tmp_path / "epochs").read_text().splitlines()]
    epochs = [tuple(map(int, fields[:3])) for fields in marks]
    resets = [tuple(map(int, line.split())) for line in (tmp_path / "resets").read_text().splitlines()]
    assert epochs == [(0, 0, 2), (0, 1, 2), (1, 2, 1), (1, 3, 1), (2, 4, 2), (2, 5, 2)]  # none trained twice
    assert resets == [(1, 1), (2, 2)]  # each later attempt restored a commit and called back at its size
    first_after = min(float(fields[3]) for fields in marks if int(fields[0]) == 1)
    log.info(
        "run_elastic: a lost executor to the first epoch after it: %.1f s", first_after - holder.killed_at
    )
    weight, bias = uninterrupted_training()
    assert [v["size"] for v in values] == [2, 2]
    for value in values:
        np.testing.assert_allclose(value["weight"], weight, rtol=1e-5)
        np.testing.assert_allclose(value["bias"], bias, rtol=1e-5)


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"host_discovery_script": "discover.sh"}, "host_discovery_script=...) has no meaning here"),
        ({"min_num_proc": 3, "max_num_proc": 2}, "min_num_proc=3 is larger than max_num_proc=2"),
        ({"num_proc": 3, "min_num_proc": 1, "max_num_proc": 2}, "num_proc=3 is outside"),
        ({"min_num_proc": 0}, "min_num_proc has to be a positive integer"),
        ({"reset_limit": -1}, "reset_limit must be a whole number"),
        ({"elastic_timeout": 0}, "elastic_timeout must be a number of seconds"),
    ],
    ids=["host_discovery_script", "min_above_max", "num_proc_outside", "min_num_proc", "reset_limit",
         "elastic_timeout"],
)  # fmt: skip
def test_run_elastic_refuses_bad_input_by_name_before_anything_starts(
    spark_cluster: Any, tmp_path: Path, given: dict[str, Any], named: str
) -> None:
    """The function would leave a file behind if any rank ran it."""
    arguments = {"num_proc": 2, **given}
    with pytest.raises(InvalidArgumentError, match=re.escape(named)):
        horovod_spark.run_elastic(touch_file, args=(str(tmp_path / "ran"),), **arguments)
    assert not (tmp_path / "ran").exists()
