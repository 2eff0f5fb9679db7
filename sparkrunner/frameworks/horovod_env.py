"""Horovod over Gloo (no MPI): the rendezvous variables every rank reads, and the rendezvous server.

Who hosts the rendezvous server: the process that spawns rank 0 — barrier task 0 for np > 0, the driver for
np < 0. It must know the whole topology before any rank calls `hvd.init()` (the server sizes its scopes from
the host plan), and the driver only learns the hosts of a barrier stage after the tasks started; task 0 knows
them right after the address exchange. The server listens on task 0's reserved rendezvous port (PortSlot.HOROVOD_RENDEZVOUS), which
every task can compute from the shared topology, and lives exactly as long as that task's rank. Ranks retry
their first request for about 1.5 s while the server starts; starting it takes milliseconds, importing
torch and Horovod in a rank takes seconds.
"""

from __future__ import annotations

import dis
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType, ModuleType
from typing import Any

from sparkrunner.launch.topology import PortSlot, Topology

GLOO_VARIABLES = (
    "HOROVOD_GLOO_RENDEZVOUS_ADDR",
    "HOROVOD_GLOO_RENDEZVOUS_PORT",
    "HOROVOD_CONTROLLER",
    "HOROVOD_CPU_OPERATIONS",
    "HOROVOD_RANK",
    "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK",
    "HOROVOD_LOCAL_SIZE",
    "HOROVOD_CROSS_RANK",
    "HOROVOD_CROSS_SIZE",
    "HOROVOD_HOSTNAME",
)


def horovod_installed() -> bool:
    return importlib.util.find_spec("horovod") is not None


def _cross_size(topology: Topology, index: int) -> int:
    """Hosts that have a rank with this rank's local rank (Horovod's cross communicator size)."""
    local = topology.local_rank(index)
    return sum(1 for host in topology.hosts() if sum(p.host == host for p in topology.peers) > local)


def _cross_rank(topology: Topology, index: int) -> int:
    local, host = topology.local_rank(index), topology.peers[index].host
    hosts = [h for h in topology.hosts() if sum(p.host == h for p in topology.peers) > local]
    return hosts.index(host)


def environment(topology: Topology, index: int) -> dict[str, str]:
    """Horovod's Gloo variables for the rank at `index` (empty when Horovod is not installed)."""
    if not horovod_installed():
        return {}
    server = topology.peers[0]
    return {
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": server.host,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(server.ports[PortSlot.HOROVOD_RENDEZVOUS]),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_RANK": str(index),
        "HOROVOD_SIZE": str(topology.size),
        "HOROVOD_LOCAL_RANK": str(topology.local_rank(index)),
        "HOROVOD_LOCAL_SIZE": str(topology.local_world_size(index)),
        "HOROVOD_CROSS_RANK": str(_cross_rank(topology, index)),
        "HOROVOD_CROSS_SIZE": str(_cross_size(topology, index)),
        "HOROVOD_HOSTNAME": topology.peers[index].host,
    }


def host_plan(topology: Topology) -> list[object]:
    """Horovod's slot list for the rendezvous server, from the same numbers the ranks get."""
    from horovod.runner.common.util.hosts import SlotInfo

    return [
        SlotInfo(
            hostname=topology.peers[i].host,
            rank=i,
            local_rank=topology.local_rank(i),
            cross_rank=_cross_rank(topology, i),
            size=topology.size,
            local_size=topology.local_world_size(i),
            cross_size=_cross_size(topology, i),
        )
        for i in range(topology.size)
    ]


def _is_horovod(module_name: str) -> bool:
    return module_name.split(".")[0] == "horovod"


def _code_objects(code: CodeType) -> Iterator[CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _code_objects(const)


def mentions_horovod(main: Callable[..., Any]) -> bool:
    """True when `main` imports Horovod (in its body or a nested function) or uses a global Horovod module."""
    code = getattr(main, "__code__", None)
    if code is None:
        return False
    module_globals = getattr(main, "__globals__", {})
    for part in _code_objects(code):
        for instruction in dis.get_instructions(part):
            if instruction.opname == "IMPORT_NAME" and _is_horovod(str(instruction.argval)):
                return True
        for name in part.co_names:
            value = module_globals.get(name)
            if isinstance(value, ModuleType) and _is_horovod(value.__name__):
                return True
    return False


def wants_rendezvous(main: Callable[..., Any], horovod: bool | None) -> bool:
    """Whether a run hosts the rendezvous server: `horovod` when the user said (``Runner(horovod=...)``), else
    whether `main` mentions Horovod (`mentions_horovod`). A function that reaches Horovod only through another
    function or module of its own needs ``horovod=True``; without it ``hvd.init()`` fails to reach the
    rendezvous server (an error, not a silent single-process run)."""
    if not horovod_installed():
        return False
    return mentions_horovod(main) if horovod is None else horovod


@contextmanager
def rendezvous(topology: Topology, index: int, wanted: bool) -> Iterator[None]:
    """Host Horovod's Gloo rendezvous server while the block runs, if the run wants it and this task is task 0
    (else no-op). It listens on task 0's address only: it is unauthenticated HTTP, as in Horovod itself."""
    if index != 0 or not wanted:
        yield
        return
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    server = RendezvousHTTPServer(
        (topology.peers[0].host, topology.peers[0].ports[PortSlot.HOROVOD_RENDEZVOUS]), RendezvousHandler, 0
    )
    server.init(host_plan(topology))
    # a short poll interval: shutdown() waits for the serving loop to notice, which ends the task
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="horovod-rendezvous", daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def finish_timeline() -> str | None:
    """In a rank whose function used Horovod with HOROVOD_TIMELINE set: shut Horovod down so the timeline is
    complete on disk, and return its path (Horovod writes it on rank 0 only); None otherwise."""
    path = os.environ.get("HOROVOD_TIMELINE")
    hvd = sys.modules.get("horovod.torch")
    if not path or hvd is None or not hvd.is_initialized():
        return None
    wrote = hvd.rank() == 0
    hvd.shutdown()
    return path if wrote and os.path.exists(path) else None
