"""The data path: Spark DataFrame -> Parquet (once, cached) -> each rank's shard as numpy, torch or tf batches.

data = materialize(df)                       # on the driver
Runner(np=2).run(train, data=data)           # the handle is small and picklable

def train(data):
    loader = TorchLoader(data, batch_size=64)   # rank and world size come from the run
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader: ...               # same len(loader) on every rank
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkrunner.data.cache_store import CacheEntry, cache_info, clear_cache
    from sparkrunner.data.dataset import ParquetData
    from sparkrunner.data.global_batch import BatchSplit, global_batch
    from sparkrunner.data.loader import NumpyLoader
    from sparkrunner.data.materialize import materialize
    from sparkrunner.data.shards import DEFAULT_REMAINDER, REMAINDERS
    from sparkrunner.data.stream_handle import StreamData
    from sparkrunner.data.streaming import close_stream, stream
    from sparkrunner.data.tf_adapter import tf_dataset
    from sparkrunner.data.torch_adapter import TorchLoader

# Imported on first use: a rank reading its shard must not load the driver's materialize and stream code, and a
# plain install (no `data` extra: no numpy, no pyarrow) imports sparkrunner without this package's dependencies.
_LAZY = {
    "CacheEntry": "sparkrunner.data.cache_store",
    "cache_info": "sparkrunner.data.cache_store",
    "clear_cache": "sparkrunner.data.cache_store",
    "ParquetData": "sparkrunner.data.dataset",
    "BatchSplit": "sparkrunner.data.global_batch",
    "global_batch": "sparkrunner.data.global_batch",
    "NumpyLoader": "sparkrunner.data.loader",
    "materialize": "sparkrunner.data.materialize",
    "DEFAULT_REMAINDER": "sparkrunner.data.shards",
    "REMAINDERS": "sparkrunner.data.shards",
    "StreamData": "sparkrunner.data.stream_handle",
    "close_stream": "sparkrunner.data.streaming",
    "stream": "sparkrunner.data.streaming",
    "tf_dataset": "sparkrunner.data.tf_adapter",
    "TorchLoader": "sparkrunner.data.torch_adapter",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'sparkrunner.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_REMAINDER",
    "REMAINDERS",
    "BatchSplit",
    "CacheEntry",
    "NumpyLoader",
    "ParquetData",
    "StreamData",
    "TorchLoader",
    "cache_info",
    "clear_cache",
    "close_stream",
    "global_batch",
    "materialize",
    "stream",
    "tf_dataset",
]
