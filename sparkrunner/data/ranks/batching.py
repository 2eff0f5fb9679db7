"""Turn a stream of column chunks into exactly `steps` batches of `batch_size` rows, optionally row-shuffled."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from sparkrunner.data.columns import Chunk


def rows(chunk: Chunk) -> int:
    return len(next(iter(chunk.values()))) if chunk else 0


def _concat(chunks: list[Chunk]) -> Chunk:
    if len(chunks) == 1:
        return chunks[0]
    return {name: np.concatenate([chunk[name] for chunk in chunks]) for name in chunks[0]}


def _slice(chunk: Chunk, start: int, stop: int) -> Chunk:
    return {name: values[start:stop] for name, values in chunk.items()}


def shuffled(chunks: Iterable[Chunk], rng: np.random.Generator, buffer_rows: int) -> Iterator[Chunk]:
    """Permute rows within windows of at least `buffer_rows` rows (each chunk alone when it is larger)."""
    pending: list[Chunk] = []
    pending_rows = 0
    for chunk in chunks:
        pending.append(chunk)
        pending_rows += rows(chunk)
        if pending_rows >= buffer_rows:
            yield _permuted(_concat(pending), rng)
            pending, pending_rows = [], 0
    if pending:
        yield _permuted(_concat(pending), rng)


def _permuted(chunk: Chunk, rng: np.random.Generator) -> Chunk:
    order = rng.permutation(rows(chunk))
    return {name: values[order] for name, values in chunk.items()}


def batches(chunks: Iterable[Chunk], batch_size: int, steps: int) -> Iterator[Chunk]:
    """Exactly `steps` batches of `batch_size` rows (views into the chunks where a batch fits in one)."""
    carry: list[Chunk] = []
    carry_rows = 0
    emitted = 0
    for chunk in chunks:
        start, size = 0, rows(chunk)
        if carry:
            take = min(batch_size - carry_rows, size)
            carry.append(_slice(chunk, 0, take))
            carry_rows += take
            start = take
            if carry_rows < batch_size:
                continue
            yield _concat(carry)
            carry, carry_rows, emitted = [], 0, emitted + 1
        while start + batch_size <= size and emitted < steps:
            yield _slice(chunk, start, start + batch_size)
            start += batch_size
            emitted += 1
        if emitted == steps:
            return
        if start < size:
            carry, carry_rows = [_slice(chunk, start, size)], size - start
    if emitted < steps:
        raise RuntimeError(
            f"the reader ran out of rows after {emitted} of {steps} batches (a sparkrunner bug)"
        )
