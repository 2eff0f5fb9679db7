"""The horovod.spark.run drop-in returns every rank's value in rank order, on local-cluster Spark, with each
launcher named as the original lets the user name it (use_gloo -> direct + Gloo rendezvous, use_mpi -> mpirun);
and under HorovodRunner, Horovod reached through the user's own module works (its rendezvous is hosted
wherever Horovod is installed)."""

from __future__ import annotations

import io
from typing import Any

import pytest

from sparkrunner.compat import HorovodRunner, horovod_spark
from sparkrunner.errors import InvalidArgumentError
from tests.compat import hvd_helper
from tests.compat.functions import horovod_rank_value
from tests.matrix import LAUNCHERS

pytest.importorskip("horovod.torch")

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
