"""Horovod's cross rank, when the rendezvous is hosted, and how a missed one is explained: pure logic."""

from __future__ import annotations

import importlib.util

import pytest

from sparkrunner.frameworks.horovod_env import _cross_rank, hosts_rendezvous, rendezvous_failure
from sparkrunner.topology import Peer, Topology


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


# Horovod 0.28.1's lines when hvd.init() misses the rendezvous (http_store.cc), as a rank relays them
HOROVOD_ABORT = [
    "[2026-11-23 14:41:56.914961: E /tmp/pip-wheel-x/horovod/common/gloo/http_store.cc:96] "
    "HTTP GET request failed too many times, aborting. See exception message above.",
    "terminate called after throwing an instance of 'std::runtime_error'",
    "  what():  HTTP request failed.",
]


def test_a_missed_rendezvous_is_explained_with_horovods_own_words() -> None:
    said = rendezvous_failure(["epoch 1", *HOROVOD_ABORT])
    assert said is not None
    assert 'Horovod said: "HTTP GET request failed too many times, aborting.' in said
    assert "[2026" not in said  # Horovod's time and source prefix is left out
    assert "Runner(horovod=True)" in said


@pytest.mark.parametrize("output", [[], ["loss 0.5", "RuntimeError: CUDA out of memory"]])
def test_other_output_is_not_taken_for_a_missed_rendezvous(output: list[str]) -> None:
    assert rendezvous_failure(output) is None


@pytest.mark.parametrize(("horovod", "expected"), [(True, True), (False, False)])
def test_the_users_word_decides_whether_the_rendezvous_is_hosted(horovod: bool, expected: bool) -> None:
    assert hosts_rendezvous(horovod) is expected


def test_by_default_the_rendezvous_is_hosted_wherever_horovod_is_installed() -> None:
    assert hosts_rendezvous(None) is (importlib.util.find_spec("horovod") is not None)


@pytest.mark.skipif(importlib.util.find_spec("horovod") is None, reason="needs Horovod")
def test_a_finished_scope_leaves_the_other_scopes_counts_alone() -> None:
    """Rank 0 finishes its one-rank cross scope while rank 1 has not finished the local scope yet (as under
    load): the local scope must still be cleared once rank 1 finishes it, else the next hvd.init() reads the
    last round's addresses. Horovod 0.28.1's own handler leaves them there."""
    import http.client
    import threading

    from horovod.runner.http.http_server import RendezvousHTTPServer

    from sparkrunner.frameworks.horovod_env import host_plan, scoped_handler

    server = RendezvousHTTPServer(("127.0.0.1", 0), scoped_handler(), 0)
    server.init(host_plan(topology("h", "h")))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()

    def request(method: str, path: str, body: bytes | None = None) -> None:
        connection = http.client.HTTPConnection(*server.server_address)
        connection.request(method, path, body=body)
        assert connection.getresponse().status == 200
        connection.close()

    try:
        for rank in ("0", "1"):
            request("PUT", f"/local_h/{rank}", b"address of rank " + rank.encode())
        for path in ("/global/0", "/global/1", "/local_h/0", "/cross_0/0", "/local_h/1", "/cross_1/1"):
            request("DELETE", path)
        assert server.cache.get("local_h", {}) == {}
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
