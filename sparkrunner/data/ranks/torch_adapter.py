"""The torch loader: the rank's batches as ``{column: torch.Tensor}``, sharing memory with the numpy batches."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from sparkrunner.data.columns import Chunk
from sparkrunner.data.dataset import ParquetData
from sparkrunner.data.ranks.loader import NumpyLoader
from sparkrunner.data.stream_handle import StreamData


class TorchLoader:
    """Iterable of ``{column: tensor}`` batches with ``len()`` and ``set_epoch()``; options as NumpyLoader.

    Use it where a DataLoader goes (``for batch in loader``); no worker processes are needed because
    decoding runs in pyarrow's threads and the bounded prefetch thread.
    """

    def __init__(self, data: ParquetData | StreamData, batch_size: int, **options: Any) -> None:
        self.batches = NumpyLoader(data, batch_size, **options)

    def __len__(self) -> int:
        return len(self.batches)

    def set_epoch(self, epoch: int) -> None:
        self.batches.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The epoch's position, for a checkpoint (see `NumpyLoader.state_dict`)."""
        return self.batches.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume mid-epoch at this run's world size (see `NumpyLoader.load_state_dict`)."""
        self.batches.load_state_dict(state)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        batches = iter(self.batches)
        try:
            first = next(batches, None)
            if first is None:
                return
            with warnings.catch_warnings():
                # Arrow hands out read-only buffers and torch says so (once per process): the tensors are
                # inputs nobody writes into. Only the first conversion can warn, so only it pays for the filter.
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                tensors = _tensors(first)
            yield tensors
            for batch in batches:
                yield _tensors(batch)
        finally:
            batches.close()  # type: ignore[attr-defined]


def _tensors(batch: Chunk) -> dict[str, Any]:
    import torch

    return {name: torch.from_numpy(values) for name, values in batch.items()}
