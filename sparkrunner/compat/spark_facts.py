"""What the drop-ins read from Spark before a run: configuration values, the driver's GPUs, the TLS refusal."""

from __future__ import annotations

import logging
from typing import Any

from sparkrunner.errors import DistributorRuntimeError, DriverGpuError, InvalidArgumentError
from sparkrunner.placement.spark_sessions import conf_value, is_connect_session, task_resource_amount
from sparkrunner.system.gpus import device_ids, host_gpu_count

log = logging.getLogger(__name__)


def optional_session() -> Any:
    """The user's SparkSession, or None when there is none (driver-only runs do not need one)."""
    from sparkrunner.placement.spark_sessions import find_spark_session

    try:
        return find_spark_session()
    except InvalidArgumentError:
        return None


def conf_flag(spark: Any, key: str) -> bool:
    value = conf_value(spark, key, "false").strip().lower()
    if value not in ("true", "false"):
        raise InvalidArgumentError(f"the Spark setting {key}={value!r} must be 'true' or 'false'")
    return value == "true"


def positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgumentError(f"{name} has to be a positive integer, not {value!r}")
    return value


def task_gpu_amount(spark: Any, resource: str = "gpu") -> int:
    """`spark.task.resource.<resource>.amount`, which must be set (and >= 1) for GPU training on executors."""
    key = f"spark.task.resource.{resource}.amount"
    amount = int(task_resource_amount(spark, resource))
    if amount < 1:
        raise DriverGpuError(
            f"'{key}' was unset (or < 1), so Spark assigns no GPU to tasks and GPU training is unavailable. "
            f"Create the SparkSession with {key}=1 (plus spark.executor.resource.{resource}.amount and a "
            f"discovery script), or pass use_gpu=False to train on CPU."
        )
    return amount


def driver_gpus(spark: Any, inherited: str | None) -> list[str]:
    """The GPUs the driver may use: Spark's driver GPU resource when configured, else this machine's GPUs;
    as CUDA device ids (Spark's addresses read as indices into an inherited CUDA_VISIBLE_DEVICES)."""
    addresses = _driver_resource_addresses(spark)
    if addresses is None:
        addresses = [str(i) for i in range(host_gpu_count())]
    if not addresses:
        raise DriverGpuError(
            "use_gpu=True runs on the driver here, but GPUs were unable to be found on the driver (no "
            "spark.driver.resource.gpu resource, no GPU on this machine). Pass use_gpu=False to train on CPU."
        )
    return list(device_ids(addresses, inherited))


def _driver_resource_addresses(spark: Any) -> list[str] | None:
    if spark is None or is_connect_session(spark):
        return None  # Connect: only the client's (this machine's) GPUs can be used
    resource = spark.sparkContext.resources.get("gpu")
    return None if resource is None else list(resource.addresses)


def check_encryption(spark: Any, ignore_key: str, name: str) -> None:
    """Refuse, as the originals do, to send tensors between executors unencrypted on a TLS-enabled cluster.

    sparkrunner's own driver channel is authenticated and encrypted, but the framework's collectives (Gloo,
    NCCL, TensorFlow's gRPC) are not.
    """
    if not conf_flag(spark, "spark.ssl.enabled"):
        return
    if conf_flag(spark, ignore_key):
        log.warning(
            "%s: this cluster has TLS encryption enabled, and %s=true: the training collectives send model "
            "parameters (and possibly data) between executors unencrypted",
            name,
            ignore_key,
        )
        return
    raise DistributorRuntimeError(
        f"this cluster has TLS encryption enabled (spark.ssl.enabled=true), but {name}'s training "
        f"collectives do not encrypt data in transit. To run anyway, set '{ignore_key}' to 'true' in the "
        f"Spark configuration; model parameters and possibly training data then cross the network unencrypted."
    )
