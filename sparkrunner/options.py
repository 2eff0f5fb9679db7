"""Every Runner option in one frozen dataclass, checked before anything starts, and the checks it is made of."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from sparkrunner import timeouts
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.launch.network import PortRange, configured_port_range
from sparkrunner.launch.user_env import check_user_env
from sparkrunner.recovery.checkpoint_dir import check_options
from sparkrunner.recovery.size_range import SizeRange, check_range

LauncherName = Literal["auto", "direct", "mpirun"]
Verbosity = Literal["all", "log_callback_only"]
OnStall = Literal["warn", "fail"]
VERBOSITIES: tuple[str, ...] = get_args(Verbosity)


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


@dataclass(frozen=True)
class RunOptions:
    """What `Runner(...)` was given (see `Runner` for each option's meaning), checked in `__post_init__`.

    `port_range` is resolved against ``SPARKRUNNER_PORT_RANGE`` and `env` made a plain str -> str dict.
    ``Runner(np=(min, max))`` arrives as ``np=max`` (negative for a local range) and `np_range`
    (`recovery.elastic.parse_np`).
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
        check_options(self.np, self.max_failures, self.checkpoint_dir)
        for name in ("horovod", "use_gpu"):
            check_choice(name, getattr(self, name), (None, True, False))
        self._check_ranks_per_task()
        object.__setattr__(self, "port_range", configured_port_range(self.port_range))
        object.__setattr__(self, "env", {str(k): str(v) for k, v in (self.env or {}).items()})
        check_user_env(self.env, self.np > 0, self.use_gpu)

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
