"""The `Runner` each framework drop-in builds: the direct launcher (the originals start the framework's
processes themselves, with no MPI) and no Horovod rendezvous; on Spark, after the originals' TLS refusal."""

from __future__ import annotations

from typing import Any

from sparkrunner.compat.spark_facts import check_encryption


def local_runner(processes: int, **options: Any) -> Any:
    """`processes` ranks on the driver."""
    from sparkrunner.runner import Runner

    return Runner(-processes, launcher="direct", horovod=False, **options)


def barrier_runner(
    spark: Any, ranks: int, use_gpu: bool, ranks_per_task: int, ignore_ssl_key: str, name: str
) -> Any:
    """`ranks` ranks in one barrier stage of `spark`, `ranks_per_task` per task; refuses a TLS cluster unless
    `ignore_ssl_key` is set to true."""
    from sparkrunner.runner import Runner

    check_encryption(spark, ignore_ssl_key, name)
    return Runner(
        ranks, spark=spark, launcher="direct", horovod=False, use_gpu=use_gpu, ranks_per_task=ranks_per_task
    )
