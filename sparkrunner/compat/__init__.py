"""Drop-ins for the launchers people arrive from: change the import, keep the code (docs/migrating.md).

- `TorchDistributor`, `DeepspeedTorchDistributor` (pyspark.ml.torch / pyspark.ml.deepspeed)
- `MirroredStrategyRunner` (spark-tensorflow-distributor)
- `horovod_spark.run` (horovod.spark.run)
- `HorovodRunner` (Databricks' sparkdl), the same class as ``sparkrunner.HorovodRunner``
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkrunner.compat import horovod_spark
    from sparkrunner.compat.mirrored_strategy import MirroredStrategyRunner
    from sparkrunner.compat.torch_distributor import DeepspeedTorchDistributor, TorchDistributor
    from sparkrunner.runner import HorovodRunner

# Imported on first use, like the top-level package: each drop-in pulls in the driver side of sparkrunner.
_LAZY = {
    "DeepspeedTorchDistributor": "sparkrunner.compat.torch_distributor",
    "HorovodRunner": "sparkrunner.runner",
    "MirroredStrategyRunner": "sparkrunner.compat.mirrored_strategy",
    "TorchDistributor": "sparkrunner.compat.torch_distributor",
}


def __getattr__(name: str) -> Any:
    if name == "horovod_spark":
        return importlib.import_module("sparkrunner.compat.horovod_spark")
    if name not in _LAZY:
        raise AttributeError(f"module 'sparkrunner.compat' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "DeepspeedTorchDistributor",
    "HorovodRunner",
    "MirroredStrategyRunner",
    "TorchDistributor",
    "horovod_spark",
]
