"""`Runner(np=(min, max))`: the range is refused by name when wrong, before anything starts."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.options import SizeRange, parse_np


@pytest.mark.parametrize(
    ("np", "options", "message"),
    [
        ((2,), {}, r"two ints, not \(2,\)"),
        ((2, 4.0), {}, "two ints"),
        ((True, 4), {}, "two ints"),
        ((4, 2), {"checkpoint_dir": "/c"}, r"min \(4\) is larger than max \(2\)"),
        ((0, 4), {}, "both be > 0"),
        ((-2, 4), {}, "both be > 0"),
        ((2, 4), {}, "pass checkpoint_dir="),
        ((2, 5), {"checkpoint_dir": "/c", "ranks_per_task": 2}, "multiples of ranks_per_task=2"),
    ],
)
def test_a_bad_range_is_refused_by_name(np: Any, options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        Runner(np=np, tracking=False, **options)


def test_a_range_becomes_max_and_its_range() -> None:
    assert parse_np((2, 4)) == (4, SizeRange(2, 4, local=False))
    assert parse_np([-2, -4]) == (-4, SizeRange(2, 4, local=True))  # local: always |max| processes
    assert parse_np(3) == (3, None)
    runner = Runner(np=(2, 4), checkpoint_dir="/c", ranks_per_task=2, tracking=False)
    assert (runner.options.np, runner.options.np_range) == (4, SizeRange(2, 4))
