"""Horovod's cross rank and the detection of Horovod in a function: pure logic, checked against tables."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sparkrunner.frameworks.horovod_env import _cross_rank, mentions_horovod
from sparkrunner.launch.topology import Peer, Topology


def topology(*hosts: str) -> Topology:
    return Topology(tuple(Peer(host, ()) for host in hosts))


# Horovod's definition: ranks with the same local rank form a cross communicator, numbered by host order
@pytest.mark.parametrize(
    ("hosts", "cross_ranks"),
    [
        (["a"], [0]),
        (["a", "a"], [0, 0]),
        (["a", "b"], [0, 1]),
        (["a", "a", "b", "b"], [0, 0, 1, 1]),
        (["a", "b", "a", "b"], [0, 1, 0, 1]),
        (["a", "a", "b"], [0, 0, 1]),  # local rank 1 lives on host a only
        (["a", "b", "b", "c", "c", "c"], [0, 1, 0, 2, 1, 0]),
    ],
)
def test_cross_rank_numbers_the_hosts_that_have_this_local_rank(
    hosts: list[str], cross_ranks: list[int]
) -> None:
    assert [_cross_rank(topology(*hosts), i) for i in range(len(hosts))] == cross_ranks


def imports_horovod_inside() -> None:
    import horovod.torch as hvd  # noqa: F401


def imports_in_a_nested_function() -> Callable[[], None]:
    def inner() -> None:
        from horovod import torch  # noqa: F401

    return inner


def imports_a_lookalike() -> None:
    import horovodish  # type: ignore[import-not-found]  # noqa: F401


def plain() -> int:
    return 1


@pytest.mark.parametrize(
    ("main", "expected"),
    [
        (imports_horovod_inside, True),
        (imports_in_a_nested_function, True),
        (imports_a_lookalike, False),
        (plain, False),
        (print, False),  # a builtin has no code to read
        (lambda: __import__("json"), False),
    ],
    ids=["import", "nested", "lookalike", "plain", "builtin", "other-import"],
)
def test_mentions_horovod(main: Callable[..., Any], expected: bool) -> None:
    assert mentions_horovod(main) is expected


def test_a_global_horovod_module_counts() -> None:
    hvd = pytest.importorskip("horovod")
    namespace: dict[str, Any] = {"hvd": hvd}
    exec("def main():\n    return hvd.rank()\n", namespace)
    assert mentions_horovod(namespace["main"]) is True
