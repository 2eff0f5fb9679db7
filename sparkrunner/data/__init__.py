"""The data path: Spark DataFrame -> Parquet (once, cached) -> each rank's shard as numpy, torch or tf batches.

data = materialize(df)                       # on the driver
Runner(np=2).run(train, data=data)           # the handle is small and picklable

def train(data):
    loader = TorchLoader(data, batch_size=64)   # rank and world size come from the run
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader: ...               # same len(loader) on every rank
"""

from typing import TYPE_CHECKING

from sparkrunner.common.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from sparkrunner.data.dataset import ParquetData
    from sparkrunner.data.driver.cache_store import CacheEntry, cache_info, clear_cache
    from sparkrunner.data.driver.materialize import materialize
    from sparkrunner.data.driver.streaming import close_stream, stream
    from sparkrunner.data.ranks.global_batch import BatchSplit, global_batch
    from sparkrunner.data.ranks.loader import NumpyLoader
    from sparkrunner.data.ranks.tf_adapter import tf_dataset
    from sparkrunner.data.ranks.torch_adapter import TorchLoader
    from sparkrunner.data.shards import DEFAULT_REMAINDER, REMAINDERS
    from sparkrunner.data.stream_handle import StreamData

# Imported on first use: a rank reading its shard must not load the driver's materialize and stream code, and a
# plain install (no `data` extra: no numpy, no pyarrow) imports sparkrunner without this package's dependencies.
_LAZY = {
    "CacheEntry": "sparkrunner.data.driver.cache_store",
    "cache_info": "sparkrunner.data.driver.cache_store",
    "clear_cache": "sparkrunner.data.driver.cache_store",
    "ParquetData": "sparkrunner.data.dataset",
    "BatchSplit": "sparkrunner.data.ranks.global_batch",
    "global_batch": "sparkrunner.data.ranks.global_batch",
    "NumpyLoader": "sparkrunner.data.ranks.loader",
    "materialize": "sparkrunner.data.driver.materialize",
    "DEFAULT_REMAINDER": "sparkrunner.data.shards",
    "REMAINDERS": "sparkrunner.data.shards",
    "StreamData": "sparkrunner.data.stream_handle",
    "close_stream": "sparkrunner.data.driver.streaming",
    "stream": "sparkrunner.data.driver.streaming",
    "tf_dataset": "sparkrunner.data.ranks.tf_adapter",
    "TorchLoader": "sparkrunner.data.ranks.torch_adapter",
}


__getattr__ = lazy_exports("sparkrunner.data", _LAZY)


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
