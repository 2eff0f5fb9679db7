"""Horovod over Gloo (no MPI): the rendezvous variables every rank reads, and the rendezvous server.

Who hosts the rendezvous server: the process that spawns rank 0 — barrier task 0 for np > 0, the driver for
np < 0. It must know the whole topology before any rank calls `hvd.init()` (the server sizes its scopes from
the host plan), and the driver only learns the hosts of a barrier stage after the tasks started; task 0 knows
them right after the address exchange. The server listens on task 0's reserved rendezvous port (PortUse.HOROVOD_RENDEZVOUS), which
every task can compute from the shared topology, and lives exactly as long as that task's rank. Ranks retry
their first request for about 1.5 s while the server starts; starting it takes milliseconds, importing
torch and Horovod in a rank takes seconds.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import socket
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sparkrunner.errors import LauncherUnavailableError
from sparkrunner.timeouts import HANDSHAKE_TIMEOUT_S, RENDEZVOUS_WAKE_S
from sparkrunner.topology import PortUse, Topology

log = logging.getLogger(__name__)


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
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(server.ports[PortUse.HOROVOD_RENDEZVOUS]),
        "HOROVOD_RANK": str(index),
        "HOROVOD_SIZE": str(topology.size),
        "HOROVOD_LOCAL_RANK": str(topology.local_rank(index)),
        "HOROVOD_LOCAL_SIZE": str(topology.local_world_size(index)),
        "HOROVOD_CROSS_RANK": str(_cross_rank(topology, index)),
        "HOROVOD_CROSS_SIZE": str(_cross_size(topology, index)),
        "HOROVOD_HOSTNAME": topology.peers[index].host,
    }


def defaults() -> dict[str, str]:
    """Horovod over Gloo, unless the rank's environment chose otherwise (empty when Horovod is not installed)."""
    return {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"} if horovod_installed() else {}


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


def hosts_rendezvous(horovod: bool | None) -> bool:
    """Whether this process, spawning rank 0, hosts Horovod's Gloo rendezvous server: `horovod` when the user
    said (``Runner(horovod=...)``), else whenever Horovod is installed here.

    Always, not when the function is seen to use Horovod: code reaches ``hvd.init()`` through any number of the
    user's modules, libraries, scripts and test suites, and a rank that misses the server aborts. The server
    costs a ~40 ms import once per process and a thread; it listens on task 0's address only, for the run, and
    holds only what the ranks put there (as ``horovodrun``'s, and as torch's rendezvous store does for DDP)."""
    return horovod_installed() if horovod is None else horovod


def scoped_handler() -> type:
    """Horovod's rendezvous handler, except that a scope whose ranks have all finished clears only its own
    list of finished ranks. Horovod 0.28.1's clears every scope's, so under load a scope (``local_<host>``)
    can keep the last round's addresses, and an ``hvd.init()`` after ``hvd.shutdown()`` (as in every test
    of Horovod's own test_torch.py) connects to a closed port and aborts."""
    from horovod.runner.http.http_server import OK, RendezvousHandler

    class ScopedRendezvousHandler(RendezvousHandler):
        def do_DELETE(self) -> None:
            paths = self.path.split("/")
            if len(paths) != 3 or paths[1] not in self.server.scope_size:
                super().do_DELETE()  # a bad path, or a scope the ranks added: Horovod's own handling
                return
            _, scope, key = paths
            with self.server.finished_list_lock:
                finished = self.server.finished_list[scope]
                finished.append(key)
                if len(finished) == self.server.scope_size[scope]:
                    with self.server.cache_lock:
                        self.server.cache.get(scope, {}).clear()
                    finished.clear()
            self.send_status_code(OK)

    return ScopedRendezvousHandler


@contextmanager
def rendezvous(topology: Topology, index: int, horovod: bool | None) -> Iterator[None]:
    """Host Horovod's Gloo rendezvous server while the block runs, if this task is task 0 and
    `hosts_rendezvous(horovod)` (else no-op). It listens on task 0's address only: it is unauthenticated HTTP,
    as in Horovod itself."""
    if index != 0 or not hosts_rendezvous(horovod):
        yield
        return
    if not horovod_installed():
        raise LauncherUnavailableError(
            f"Runner(horovod=True) asks the direct launcher to host Horovod's rendezvous, but Horovod is not "
            f"installed where rank 0 starts ({sys.executable}): install it there (scripts/setup.sh builds it), "
            f"or leave horovod unset for code that does not use Horovod"
        )
    from horovod.runner.http.http_server import RendezvousHTTPServer

    address = (topology.peers[0].host, topology.peers[0].ports[PortUse.HOROVOD_RENDEZVOUS])
    try:
        server = RendezvousHTTPServer(address, scoped_handler(), 0)
    except OSError as exc:
        if horovod:  # asked for: the run cannot work without it
            raise
        log.warning(
            "Horovod's rendezvous server could not listen on %s:%s (%s): hvd.init() will fail", *address, exc
        )
        yield
        return
    server.init(host_plan(topology))
    thread = threading.Thread(target=server.serve_forever, name="horovod-rendezvous", daemon=True)
    thread.start()
    try:
        yield
    finally:
        _shut_down_now(server, thread, address)
        server.server_close()
        thread.join()


def _shut_down_now(server: Any, serving: threading.Thread, address: tuple[str, int]) -> None:
    """`server.shutdown()` without waiting out the serving loop's poll interval (half a second; the task's end
    waits for it): connections wake the loop until it has seen the shutdown asked."""
    stopper = threading.Thread(target=server.shutdown, name="horovod-rendezvous-stop", daemon=True)
    stopper.start()
    while stopper.is_alive() and serving.is_alive():
        with contextlib.suppress(OSError):
            socket.create_connection(address, timeout=HANDSHAKE_TIMEOUT_S).close()
        stopper.join(RENDEZVOUS_WAKE_S)


_RENDEZVOUS_FAILED = re.compile(r"HTTP (GET |PUT |DELETE )?request failed")


def rendezvous_failure(output: Sequence[str]) -> str | None:
    """What to tell the user when a rank's output shows `hvd.init()` failing to reach the Gloo rendezvous
    (Horovod then aborts the process, SIGABRT), quoting Horovod's own line; None when it does not."""
    said = next((line for line in output if _RENDEZVOUS_FAILED.search(line)), None)
    if said is None:
        return None
    said = re.sub(r"^\[[^]]*\]\s*", "", said.strip())  # Horovod's "[time: E file:line]" prefix
    return (
        f'Horovod could not reach its Gloo rendezvous server (Horovod said: "{said}"). sparkrunner hosts it '
        "beside rank 0 whenever Horovod is installed there, unless Runner(horovod=False): pass "
        "Runner(horovod=True), and let every rank's host reach rank 0's host (docs/networking.md)."
    )


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
