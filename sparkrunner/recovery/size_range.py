"""`Runner(np=(min, max))`: the range of an elastic run's world size, parsed and checked before anything starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkrunner.errors import InvalidArgumentError


@dataclass(frozen=True)
class SizeRange:
    """The ranks an elastic run may have, ``least <= size <= most`` (both > 0); `local` for ``np < 0``."""

    least: int
    most: int
    local: bool = False


def parse_np(np: Any) -> tuple[int, SizeRange | None]:
    """``np`` as `Runner` takes it: an int, or ``(min, max)``; returns the fixed np (``max`` for a range,
    negative for a local range) and the range, or a clear error naming what is wrong."""
    if not isinstance(np, tuple | list):
        return np, None
    if len(np) != 2 or any(isinstance(n, bool) or not isinstance(n, int) for n in np):
        raise InvalidArgumentError(f"np=(min, max) takes two ints, not {np!r}")
    least, most = np
    if least == 0 or most == 0 or (least > 0) != (most > 0):
        raise InvalidArgumentError(
            f"np={tuple(np)!r}: min and max must both be > 0 (Spark) or both < 0 (local processes, which "
            f"always run |max|)"
        )
    if abs(least) > abs(most):
        raise InvalidArgumentError(f"np={tuple(np)!r}: min ({least}) is larger than max ({most})")
    local = most < 0
    return most, SizeRange(abs(least), abs(most), local)


def check_range(size: SizeRange, per_task: int | None, checkpoint_dir: Any) -> None:
    """An elastic Spark run restarts from checkpoints, and every size must fill whole tasks."""
    if size.local:
        return
    if checkpoint_dir is None:
        raise InvalidArgumentError(
            f"np=({size.least}, {size.most}) resizes the run by restarting it from its checkpoints: pass "
            f"checkpoint_dir='/a/folder/every/executor/and/the/driver/can/read'"
        )
    if per_task is not None and (size.least % per_task or size.most % per_task):
        raise InvalidArgumentError(
            f"np=({size.least}, {size.most}): min and max must be multiples of ranks_per_task={per_task}"
        )
