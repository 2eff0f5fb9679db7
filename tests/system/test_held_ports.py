"""Ports a rank listens on later (MASTER_PORT, TF_CONFIG's, Horovod's rendezvous, JAX's coordinator) are held
from the moment they are chosen until the rank has taken them over.

Oracles: plain `bind` calls from processes of the test's own (a fresh interpreter, a port thief), and a real
torch TCP store listening on MASTER_PORT; none goes through sparkrunner's code.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from sparkrunner import Runner
from sparkrunner.options import LauncherName
from sparkrunner.system.network import hold_ports
from tests.matrix import Placement

THIEF_RUNS = 10
"""Launches per launcher beside the port thief (bench/held_ports.py runs 50)."""

_BIND_EACH = """
import errno, json, socket, sys
out = {}
for port in json.loads(sys.argv[1]):
    s = socket.socket()
    try:
        s.bind(("", port)); out[port] = 0
    except OSError as e:
        out[port] = e.errno
    finally:
        s.close()
print(json.dumps(out))
"""

THIEF = """
import socket, time
while True:  # what a busy host does: sockets bound to ports the kernel picks, held a moment, then closed
    held = []
    for _ in range(400):
        s = socket.socket()
        s.bind(("", 0))
        held.append(s)
    time.sleep(0.02)
    for s in held:
        s.close()
"""


def bind_from_another_process(ports: list[int]) -> dict[int, int]:
    """Try a plain bind to each port from a fresh interpreter: port -> 0 (bound) or the errno."""
    done = subprocess.run(
        [sys.executable, "-c", _BIND_EACH, json.dumps(ports)], capture_output=True, text=True, check=True
    )
    return {int(port): code for port, code in json.loads(done.stdout).items()}


def run_ports() -> dict[str, int]:
    """In a rank: every port some rank of this run will listen on, by what it is for (from the rank's env)."""
    ports = {"MASTER_PORT": int(os.environ["MASTER_PORT"])}
    for i, worker in enumerate(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]):
        ports[f"TF_CONFIG worker {i}"] = int(worker.rsplit(":", 1)[1])
    ports["JAX coordinator"] = int(os.environ["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)[1])
    if "HOROVOD_GLOO_RENDEZVOUS_PORT" in os.environ:
        ports["Horovod rendezvous"] = int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"])
    return ports


def try_the_ports_then_train() -> tuple[dict[str, int], dict[int, int], float]:
    """Before any rank listens: bind every port of the run from another process; then a real Gloo allreduce
    over a TCP store on MASTER_PORT."""
    import torch
    import torch.distributed as dist

    ports = run_ports()
    binds = bind_from_another_process(sorted(set(ports.values())))
    dist.init_process_group("gloo")
    total = torch.ones(1)
    dist.all_reduce(total)
    dist.destroy_process_group()
    return ports, binds, float(total.item())


def listen_on_own_ports(delay_s: float) -> list[int]:
    """After `delay_s` (a rank importing its framework), listen on each port this rank's servers take, as
    torch's store and gRPC do (SO_REUSEADDR); an EADDRINUSE fails the run."""
    rank = int(os.environ["RANK"])
    time.sleep(delay_s)
    mine = [int(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"][rank].rsplit(":", 1)[1])]
    if rank == 0:
        mine += [int(os.environ["MASTER_PORT"]), int(os.environ["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)[1])]
    servers = [socket.create_server(("", port)) for port in mine]
    for server in servers:
        server.close()
    return mine


def _eventually_free(ports: list[int], within_s: float = 10.0) -> dict[int, int]:
    """The ports that still cannot be bound after `within_s` (the holder lets go once the ranks ended)."""
    deadline = time.monotonic() + within_s
    while True:
        refused = {p: code for p, code in bind_from_another_process(ports).items() if code}
        if not refused or time.monotonic() > deadline:
            return refused
        time.sleep(0.2)


def test_a_held_port_refuses_other_binders_and_admits_its_rank_server() -> None:
    with hold_ports(3) as held:
        refused = bind_from_another_process(list(held.ports))
        assert refused == dict.fromkeys(held.ports, errno.EADDRINUSE)
        with socket.create_server(("", held.ports[0])):  # what the rank's server does: SO_REUSEADDR, listen
            pass
    assert not _eventually_free(list(held.ports), within_s=0)


@pytest.mark.slow
def test_the_kernel_hands_no_held_port_to_ephemeral_binds_or_connections() -> None:
    with hold_ports(100) as held, socket.create_server(("127.0.0.1", 0)) as server:
        got: set[int] = set()
        for _ in range(5000):
            with socket.socket() as s:
                s.bind(("", 0))
                got.add(s.getsockname()[1])
            with socket.create_connection(server.getsockname()) as c:
                got.add(c.getsockname()[1])
                server.accept()[0].close()
        assert not got & set(held.ports)


def test_while_ranks_start_no_other_process_can_bind_a_port_of_the_run(
    launcher: LauncherName, placement: Placement
) -> None:
    ports, binds, total = Runner(np=placement.np(2), launcher=launcher, spark=placement.spark).run(
        try_the_ports_then_train
    )
    assert total == 2.0
    assert {"MASTER_PORT", "TF_CONFIG worker 0", "TF_CONFIG worker 1", "JAX coordinator"} <= set(ports)
    assert binds == dict.fromkeys(set(ports.values()), errno.EADDRINUSE), ports
    # after the run, nothing holds them: those no connection used (a closed connection's TIME_WAIT blocks a bind)
    unused = [port for name, port in ports.items() if name.startswith(("TF_CONFIG", "JAX"))]
    assert not _eventually_free(unused), "the run's ports are still held after it ended"


@pytest.fixture
def port_thief() -> Iterator[None]:
    thief = subprocess.Popen([sys.executable, "-c", THIEF])
    try:
        yield
    finally:
        thief.kill()
        thief.wait()


@pytest.mark.slow
def test_launches_beside_a_port_thief_see_no_eaddrinuse(launcher: LauncherName, port_thief: None) -> None:
    runner = Runner(np=-2, launcher=launcher)
    listened = [runner.run(listen_on_own_ports, 0.3) for _ in range(THIEF_RUNS)]
    assert all(len(ports) == 3 for ports in listened)
