"""The torch loader: the rank's batches as ``{column: torch.Tensor}``, sharing memory with the numpy batches."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

from sparkrunner.data.dataset import ParquetData
from sparkrunner.data.loader import NumpyLoader


class TorchLoader:
    """Iterable of ``{column: tensor}`` batches with ``len()`` and ``set_epoch()``; options as NumpyLoader.

    Use it where a DataLoader goes (``for batch in loader``); no worker processes are needed because
    decoding runs in pyarrow's threads and the bounded prefetch thread.
    """

    def __init__(self, data: ParquetData, batch_size: int, **options: Any) -> None:
        self.batches = NumpyLoader(data, batch_size, **options)

    def __len__(self) -> int:
        return len(self.batches)

    def set_epoch(self, epoch: int) -> None:
        self.batches.set_epoch(epoch)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import torch

        batches = iter(self.batches)
        try:
            for batch in batches:
                with warnings.catch_warnings():
                    # Arrow hands out read-only buffers; the tensors are inputs, nobody writes into them
                    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                    yield {name: torch.from_numpy(values) for name, values in batch.items()}
        finally:
            batches.close()  # type: ignore[attr-defined]
