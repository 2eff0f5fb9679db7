"""Keep the global batch the same whatever the world size: per-rank batch and gradient accumulation adapt.

An elastic run (``np=(min, max)``) changes its world size between attempts; with a fixed per-rank batch the
global batch (and so the learning dynamics) would change with it. `global_batch` splits a fixed global batch
into ``world_size * accumulation * per_rank``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrunner.common.checks import check_number
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ranks.api import rank_context


@dataclass(frozen=True)
class BatchSplit:
    """``world_size * accumulation * per_rank == global_size``: each rank runs `accumulation` micro-batches of
    `per_rank` rows before each optimizer step."""

    global_size: int
    world_size: int
    per_rank: int
    accumulation: int


def global_batch(
    global_size: int, max_per_rank: int | None = None, world_size: int | None = None
) -> BatchSplit:
    """The per-rank batch (at most `max_per_rank`, e.g. what fits in memory) and the fewest gradient
    accumulation steps that give `global_size` rows per optimizer step on `world_size` ranks (default: this
    run's, `rank_context().world_size`)."""
    world = rank_context().world_size if world_size is None else world_size
    check_number("global_size", global_size, 1)
    check_number("world_size", world, 1)
    most = global_size if max_per_rank is None else check_number("max_per_rank", max_per_rank, 1)
    if global_size % world:
        raise InvalidArgumentError(
            f"a global batch of {global_size} rows cannot be split evenly over {world} ranks: choose a global "
            f"batch that every world size of np=(min, max) divides (e.g. a multiple of their product)"
        )
    per_world = global_size // world
    for accumulation in range(1, per_world + 1):
        if per_world % accumulation == 0 and per_world // accumulation <= most:
            return BatchSplit(global_size, world, per_world // accumulation, accumulation)
    raise AssertionError("unreachable: accumulation == per_world gives a per-rank batch of 1")
