"""Horovod's Gloo rendezvous server (unauthenticated HTTP) listens on the ranks' address, never on every
interface, and not at all with ``horovod=False`` (direct launcher, np=-2: the driver hosts it).

The test looks at this process's own listening sockets with psutil once every rank has connected (the server,
when there is one, listens before the ranks start); the ranks wait until it has looked.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from sparkrunner import Runner
from tests.waiting import poll_until

WAIT_S = 120


def _listeners() -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def _wait_for(released: str) -> None:
    """On a rank: stay in the run until the test has looked at its listeners (`released` appears)."""
    import os

    poll_until(lambda: os.path.exists(released), WAIT_S)


def plain_function(released: str) -> int:
    import os

    _wait_for(released)
    return int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"])


def horovod_function(released: str) -> int:
    import os

    import horovod.torch as hvd
    import torch

    _wait_for(released)
    hvd.init()
    hvd.allreduce(torch.tensor([1.0]))
    return int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"])


def run_watching_listeners(main: Any, tmp_path: Path, **options: Any) -> tuple[int, set[tuple[str, int]]]:
    """Run `main` at np=-2 (direct launcher); return its value and the listeners this process opened that were
    up once every rank had connected."""
    before = _listeners()
    seen: set[tuple[str, int]] = set()
    released = tmp_path / "looked"
    runner = Runner(np=-2, launcher="direct", tracking=False, progress=False, **options)

    def look() -> None:
        try:
            runner.wait_in_flight(WAIT_S)
            seen.update(_listeners() - before)
        finally:
            released.touch()

    looker = threading.Thread(target=look, daemon=True)
    looker.start()
    try:
        value = runner.run(main, str(released))
    finally:
        looker.join()
    return value, seen


def test_horovod_false_starts_no_rendezvous_server(tmp_path: Path) -> None:
    port, seen = run_watching_listeners(plain_function, tmp_path, horovod=False)
    assert port not in {p for _, p in seen}
    assert seen, "the driver channel should have been seen listening"
    assert all(ip == "127.0.0.1" for ip, _ in seen)


@pytest.mark.slow
def test_a_horovod_run_hosts_the_rendezvous_on_the_ranks_address_only(tmp_path: Path) -> None:
    port, seen = run_watching_listeners(horovod_function, tmp_path)
    assert ("127.0.0.1", port) in seen
    assert all(ip == "127.0.0.1" for ip, _ in seen), seen


def test_it_is_hosted_for_a_function_that_does_not_mention_horovod(tmp_path: Path) -> None:
    port, seen = run_watching_listeners(plain_function, tmp_path)
    assert ("127.0.0.1", port) in seen
