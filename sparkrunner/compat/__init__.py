"""Drop-ins for the launchers people arrive from: change the import, keep the code (docs/migrating.md).

- `TorchDistributor`, `DeepspeedTorchDistributor` (pyspark.ml.torch / pyspark.ml.deepspeed)
- `MirroredStrategyRunner` (spark-tensorflow-distributor)
- `horovod_spark.run` (horovod.spark.run), `horovod_spark.TorchEstimator`/`TorchModel`,
  `horovod_spark.KerasEstimator`/`KerasModel` (horovod.spark.torch, horovod.spark.keras)
- `HorovodRunner` (Databricks' sparkdl), the same class as ``sparkrunner.HorovodRunner``
"""

from typing import TYPE_CHECKING, Any

from sparkrunner.compat import horovod_spark
from sparkrunner.compat.mirrored_strategy import MirroredStrategyRunner
from sparkrunner.compat.torch_distributor import DeepspeedTorchDistributor, TorchDistributor

if TYPE_CHECKING:
    from sparkrunner.runner import HorovodRunner


def __getattr__(name: str) -> Any:
    """`HorovodRunner` lives with `Runner` on the driver side: imported on first use, not by the ranks that
    unpickle a drop-in's helper from this package."""
    if name == "HorovodRunner":
        from sparkrunner.runner import HorovodRunner

        return HorovodRunner
    raise AttributeError(f"module 'sparkrunner.compat' has no attribute {name!r}")


__all__ = [
    "DeepspeedTorchDistributor",
    "HorovodRunner",
    "MirroredStrategyRunner",
    "TorchDistributor",
    "horovod_spark",
]
