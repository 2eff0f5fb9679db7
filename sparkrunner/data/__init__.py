"""The data path: Spark DataFrame -> Parquet (once, cached) -> each rank's shard as numpy, torch or tf batches.

data = materialize(df)                       # on the driver
Runner(np=2).run(train, data=data)           # the handle is small and picklable

def train(data):
    loader = TorchLoader(data, batch_size=64)   # rank and world size come from the run
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader: ...               # same len(loader) on every rank
"""

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
