"""Horovod's Gloo rendezvous server (unauthenticated HTTP) listens on the ranks' address, never on every
interface, and not at all with ``horovod=False`` (direct launcher, np=-2: the driver hosts it).

The test watches this process's own listening sockets with psutil while the run is in flight.
"""

from __future__ import annotations

import threading
from typing import Any

import psutil

from sparkrunner import Runner


def _listeners() -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def plain_function() -> int:
    import os
    import time

    time.sleep(1.5)
    return int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"])


def horovod_function() -> int:
    import os

    import horovod.torch as hvd
    import torch

    hvd.init()
    hvd.allreduce(torch.tensor([1.0]))
    return int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"])


def run_watching_listeners(main: Any, **options: Any) -> tuple[int, set[tuple[str, int]]]:
    """Run `main` at np=-2 (direct launcher); return its value and every listener this process opened meanwhile."""
    before = _listeners()
    seen: set[tuple[str, int]] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.02):
            seen.update(_listeners() - before)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        value = Runner(np=-2, launcher="direct", tracking=False, progress=False, **options).run(main)
    finally:
        done.set()
        watcher.join()
    return value, seen


def test_horovod_false_starts_no_rendezvous_server() -> None:
    port, seen = run_watching_listeners(plain_function, horovod=False)
    assert port not in {p for _, p in seen}
    assert seen, "the driver channel should have been seen listening"
    assert all(ip == "127.0.0.1" for ip, _ in seen)


def test_a_horovod_run_hosts_the_rendezvous_on_the_ranks_address_only() -> None:
    port, seen = run_watching_listeners(horovod_function)
    assert ("127.0.0.1", port) in seen
    assert all(ip == "127.0.0.1" for ip, _ in seen), seen


def test_it_is_hosted_for_a_function_that_does_not_mention_horovod() -> None:
    port, seen = run_watching_listeners(plain_function)
    assert ("127.0.0.1", port) in seen
