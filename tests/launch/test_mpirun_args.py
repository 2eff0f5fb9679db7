"""mpirun's hostfile and command line, from a topology: pure functions, checked against hand-written tables."""

from __future__ import annotations

import sys

import pytest

from sparkrunner.common.checks import PortRange
from sparkrunner.launch.mpirun import hostfile_text, mpirun_command
from sparkrunner.topology import Peer, Topology


def topology(*hosts: str) -> Topology:
    return Topology(tuple(Peer(host, (1000 + i,)) for i, host in enumerate(hosts)))


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        (["a"], "a slots=1\n"),
        (["a", "a", "a"], "a slots=3\n"),
        (["a", "b"], "a slots=1\nb slots=1\n"),
        (["b", "a", "b", "a", "c"], "b slots=2\na slots=2\nc slots=1\n"),  # first-seen order, as mpirun fills
    ],
)
def test_hostfile_has_one_line_per_host_with_its_task_count(hosts: list[str], expected: str) -> None:
    assert hostfile_text(topology(*hosts)) == expected


def options(cmd: list[str]) -> dict[str, list[str]]:
    """Every `--mca NAME VALUE` of a command, by name."""
    found: dict[str, list[str]] = {}
    for i, word in enumerate(cmd):
        if word == "--mca":
            found.setdefault(cmd[i + 1], []).append(cmd[i + 2])
    return found


def test_command_starts_np_ranks_unbound_with_our_rsh_agent_and_ends_with_the_bootstrap() -> None:
    """...and ends a dead rank's peers without Open MPI's default second of waiting (bench/dead_rank.py)."""
    cmd = mpirun_command(3, ["-H", "a:2,b:1"], [], None)
    assert cmd[:8] == ["mpirun", "--allow-run-as-root", "-np", "3", "--bind-to", "none", "--map-by", "slot"]
    assert cmd[8:10] == ["-H", "a:2,b:1"]
    assert options(cmd)["plm_rsh_agent"] == [f"{sys.executable} -m sparkrunner.tasks.rsh_agent"]
    assert options(cmd)["odls_base_sigkill_timeout"] == ["0"]
    assert cmd[-3:] == [sys.executable, "-m", "sparkrunner.ranks.bootstrap"]
    assert "btl_tcp_if_include" not in options(cmd) and "-x" not in cmd


@pytest.mark.parametrize("names", [["A"], ["PATH", "SPARKRUNNER_X", "Z"]])
def test_every_named_variable_is_exported_once_with_dash_x(names: list[str]) -> None:
    cmd = mpirun_command(2, [], names, None)
    exported = [cmd[i + 1] for i, word in enumerate(cmd) if word == "-x"]
    assert exported == names


def test_a_network_restricts_both_mpi_transports_to_it() -> None:
    found = options(mpirun_command(2, [], [], "10.0.0.0/24"))
    assert found["btl_tcp_if_include"] == ["10.0.0.0/24"] and found["oob_tcp_if_include"] == ["10.0.0.0/24"]


@pytest.mark.parametrize("family", ["4", "6"])
def test_a_port_range_keeps_every_mpi_port_inside_it(family: str) -> None:
    low, high = 40000, 40199
    ports: PortRange = (low, high)
    found = options(mpirun_command(2, [], [], None, ports))
    data_low = int(found[f"btl_tcp_port_min_v{family}"][0])
    data_high = data_low + int(found[f"btl_tcp_port_range_v{family}"][0]) - 1
    oob_low, oob_high = (int(p) for p in found[f"oob_tcp_dynamic_ipv{family}_ports"][0].split("-"))
    assert low <= data_low <= data_high < oob_low <= oob_high <= high  # inside, and apart from each other
