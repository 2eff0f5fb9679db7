"""Port ranges and slot ceilings: bad input is refused with a clear error before anything starts."""

from __future__ import annotations

import pytest

from sparkrunner import Runner
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.placement.slots import slot_ceiling
from sparkrunner.system.network import hold_ports, mpi_ports, own_ports, peer_address, socket_environment


@pytest.mark.parametrize("bad", [(2000, 1000), (80, 200), "40000-40005", "forty", (1, 2, 3)])
def test_a_bad_port_range_is_refused_when_the_runner_is_made(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="port_range"):
        Runner(np=-2, launcher="direct", port_range=bad)  # type: ignore[arg-type]


def test_a_bad_port_range_in_the_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKRUNNER_PORT_RANGE", "50000")
    with pytest.raises(InvalidArgumentError, match="SPARKRUNNER_PORT_RANGE"):
        Runner(np=-2, launcher="direct")


def test_ports_come_from_the_range_and_tasks_holding_at_once_do_not_share_them() -> None:
    ours = own_ports((45000, 45099))
    with hold_ports(4, ours, slot=0) as first, hold_ports(4, ours, slot=1) as second:
        assert all(45000 <= p <= 45049 for p in first.ports + second.ports)
        assert not set(first.ports) & set(second.ports)  # even where a port of the range is busy
    assert mpi_ports((45000, 45099)) == (45050, 45099)


def test_loopback_ranks_name_the_loopback_interface() -> None:
    assert socket_environment("127.0.0.1") == {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}


@pytest.mark.parametrize(
    ("conf", "master", "ceiling"),
    [
        ({}, "local[3]", 3),
        ({"spark.task.cpus": "2"}, "local-cluster[2,2,1024]", 2),
        ({"spark.cores.max": "6"}, "spark://m:7077", 6),
        ({"spark.executor.instances": "3", "spark.executor.cores": "4"}, "k8s://api:443", 12),
        ({}, "spark://m:7077", None),
    ],
)
def test_the_slot_ceiling_comes_from_the_clusters_configuration(
    conf: dict[str, str], master: str, ceiling: int | None
) -> None:
    found = slot_ceiling(conf, master)
    assert (found[0] if found else None) == ceiling


def test_a_driver_name_that_does_not_resolve_leaves_the_tasks_own_address() -> None:
    """A Connect client may give executors a name they cannot resolve: the task still names its address
    (the rank then reports that it cannot reach the driver) instead of failing on the name."""
    assert peer_address("127.0.0.1", "unreachable.invalid") == "127.0.0.1"
