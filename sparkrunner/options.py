"""Every Runner option in one frozen dataclass, checked before anything starts, and the checks it is made of."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from sparkrunner import timeouts
from sparkrunner.channel.environment import Env
from sparkrunner.errors import CheckpointDirError, InvalidArgumentError

LauncherName = Literal["auto", "direct", "mpirun"]
Verbosity = Literal["all", "log_callback_only"]
OnStall = Literal["warn", "fail"]
VERBOSITIES: tuple[str, ...] = get_args(Verbosity)
PortRange = tuple[int, int]
_MIN_RANGE_PORTS = 16


def check_number(
    name: str,
    value: Any,
    least: float | None = None,
    *,
    integer: bool = True,
    above: bool = False,
    note: str = "",
) -> Any:
    """`value` if it is an int (or, `integer=False`, a number of seconds) >= `least` (> with `above`), never a
    bool; else an InvalidArgumentError that names the option, the rule and the value."""
    kinds = int if integer else (int, float)
    low = -math.inf if least is None else least
    if isinstance(value, bool) or not isinstance(value, kinds) or value < low or (above and value == low):
        what = "an int" if integer else "a number of seconds"
        bound = "" if least is None else f" {'>' if above else '>='} {least:g}"
        raise InvalidArgumentError(f"{name} must be {what}{bound}{note}, not {value!r}")
    return value


def check_choice(name: str, value: Any, choices: Any) -> Any:
    """`value` if it is one of `choices` (a `Literal` type or a tuple), else an error that lists them."""
    allowed = get_args(choices) or tuple(choices)
    if value not in allowed:
        raise InvalidArgumentError(
            f"{name}={value!r} is unknown; use one of: {', '.join(map(repr, allowed))}"
        )
    return value


def parse_port_range(value: object, source: str) -> PortRange:
    """(low, high) from a tuple or a "LOW-HIGH" string, checked; a clear error naming `source` otherwise."""
    try:
        text = value if isinstance(value, str) else "-".join(str(int(v)) for v in value)  # type: ignore[attr-defined]
        low, high = (int(part) for part in text.split("-"))
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"{source}={value!r} is not a port range; give two port numbers, e.g. (40000, 40100) or '40000-40100'"
        ) from None
    if not 1024 <= low <= high <= 65535 or high - low + 1 < _MIN_RANGE_PORTS:
        raise InvalidArgumentError(
            f"{source}={value!r} must satisfy 1024 <= low <= high <= 65535 and hold at least {_MIN_RANGE_PORTS} "
            f"ports (half for sparkrunner's own listeners, half for MPI's)"
        )
    return low, high


def configured_port_range(value: object = None) -> PortRange | None:
    """The port range from `Runner(port_range=...)`, else from SPARKRUNNER_PORT_RANGE, else None (any port)."""
    if value is not None:
        return parse_port_range(value, "port_range")
    text = os.environ.get(Env.PORT_RANGE)
    return parse_port_range(text, Env.PORT_RANGE) if text else None


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


def check_checkpoint_dir(np: int, max_failures: int, checkpoint_dir: str | None) -> None:
    """Refuse, before anything starts, a Spark run that must resume but has nowhere to keep checkpoints."""
    if np > 0 and max_failures > 0 and checkpoint_dir is None:
        raise CheckpointDirError(
            f"max_failures={max_failures} resumes failed attempts from checkpoints, which np > 0 runs keep in a "
            f"folder that the driver and every executor can read: pass checkpoint_dir='/shared/path' (a mounted "
            f"file system such as NFS, /dbfs/... on Databricks)"
        )
    if checkpoint_dir is not None and (
        not isinstance(checkpoint_dir, (str, os.PathLike)) or not str(checkpoint_dir)
    ):
        raise CheckpointDirError(f"checkpoint_dir must be a folder path, not {checkpoint_dir!r}")


@dataclass(frozen=True)
class RunOptions:
    """What `Runner(...)` was given (see `Runner` for each option's meaning), checked in `__post_init__`.

    `port_range` is resolved against ``SPARKRUNNER_PORT_RANGE`` and `env` made a plain str -> str dict.
    ``Runner(np=(min, max))`` arrives as ``np=max`` (negative for a local range) and `np_range`
    (`parse_np`).
    `tracking` and `observers` are checked where they are turned into observers (`observe.tracking`).
    """

    np: int
    spark: Any = None
    launcher: LauncherName = "auto"
    driver_log_verbosity: Verbosity = "all"
    start_timeout: float = timeouts.START_TIMEOUT_S
    timeout: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    tracking: Any = None
    progress: bool = True
    observers: Sequence[Any] = ()
    max_failures: int = 0
    checkpoint_dir: str | None = None
    stop_grace_s: float = timeouts.STOP_GRACE_S
    retry_if: Any = None
    stall_timeout: float | None = None
    on_stall: OnStall = "warn"
    horovod: bool | None = None
    use_gpu: bool | None = None
    ranks_per_task: int | None = None
    port_range: PortRange | None = None
    np_range: SizeRange | None = None

    def __post_init__(self) -> None:
        self._check_np()
        if self.np_range is not None:
            check_range(self.np_range, self.ranks_per_task, self.checkpoint_dir)
        check_choice("launcher", self.launcher, LauncherName)
        check_choice("driver_log_verbosity", self.driver_log_verbosity, Verbosity)
        check_choice("on_stall", self.on_stall, OnStall)
        for name in ("start_timeout", "timeout", "stall_timeout"):
            if name == "start_timeout" or getattr(self, name) is not None:
                check_number(name, getattr(self, name), 0, integer=False, above=True)
        check_number("max_failures", self.max_failures, 0, note=" (failed attempts to retry)")
        check_number("stop_grace_s", self.stop_grace_s, 0, integer=False)
        if self.retry_if is not None and not callable(self.retry_if):
            raise InvalidArgumentError(f"retry_if must be a function(error) -> bool, not {self.retry_if!r}")
        check_checkpoint_dir(self.np, self.max_failures, self.checkpoint_dir)
        for name in ("horovod", "use_gpu"):
            check_choice(name, getattr(self, name), (None, True, False))
        self._check_ranks_per_task()
        object.__setattr__(self, "port_range", configured_port_range(self.port_range))
        object.__setattr__(self, "env", {str(k): str(v) for k, v in (self.env or {}).items()})

    def _check_np(self) -> None:
        check_number("np", self.np, note=" (ranks)")
        if self.np == 0:
            raise InvalidArgumentError(
                "np=0 starts no rank. Use np > 0 for a Spark barrier stage of np tasks, or np < 0 to run |np| "
                "processes on the driver."
            )

    def _check_ranks_per_task(self) -> None:
        per_task = self.ranks_per_task
        if per_task is None:
            return
        check_number("ranks_per_task", per_task, 1, note=" or None")
        if self.np < 0 and per_task != 1:
            raise InvalidArgumentError(
                "ranks_per_task applies to Spark runs (np > 0); np < 0 runs |np| local ranks"
            )
        if self.np > 0 and self.np % per_task and self.np_range is None:
            raise InvalidArgumentError(
                f"np={self.np} is not a multiple of ranks_per_task={per_task}: every task starts the same number "
                f"of ranks"
            )
