"""The checks of single values both sides make (`sparkrunner.common.checks`): port ranges, pure logic."""

from __future__ import annotations

import pytest

from sparkrunner.common.checks import configured_port_range, parse_port_range
from sparkrunner.errors import InvalidArgumentError


def test_a_port_range_reads_the_same_from_a_tuple_and_a_string() -> None:
    assert (
        parse_port_range((40000, 40100), "port_range")
        == parse_port_range("40000-40100", "x")
        == (40000, 40100)
    )


@pytest.mark.parametrize("value", ["40000", "a-b", (1000, 2000), (40000, 40005), (50000, 40000), None])
def test_a_bad_port_range_is_refused_naming_where_it_came_from(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^SOURCE="):
        parse_port_range(value, "SOURCE")


def test_the_port_range_falls_back_on_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKRUNNER_PORT_RANGE", "41000-41031")
    assert configured_port_range() == (41000, 41031)
    assert configured_port_range((42000, 42015)) == (42000, 42015)
    monkeypatch.delenv("SPARKRUNNER_PORT_RANGE")
    assert configured_port_range() is None
