"""The checks of one value that both sides make: the driver's options (`sparkrunner.options`) and a rank's
loaders take numbers, choices and port ranges, and refuse a bad one with the same `InvalidArgumentError`.

It lives apart from `sparkrunner.options` so that a rank, which checks its own arguments, loads none of the
driver's option declarations.
"""

from __future__ import annotations

import math
import os
from typing import Any, get_args

from sparkrunner.common.environment import Env
from sparkrunner.errors import InvalidArgumentError

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
