"""Runner(port_range=...) on `local-cluster[2,1,1024]`: every port a run's processes listen on comes from the
range, except those the libraries give no way to choose (see docs/networking.md): each rank's one Gloo pair
listener, and mpirun's PMIx server for its local ranks, which listens on loopback only. The oracle reads /proc
itself: the processes of the run, their sockets, and the kernel's table of listening TCP sockets."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from tests.helpers import listening_sockets, rank_processes
from tests.waiting import poll_until, wait_until

pytestmark = pytest.mark.spark

PORT_RANGE = (42000, 42100)
_LOOPBACK = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it


def hold_sockets_open(flags: str, with_horovod: bool) -> dict[str, int]:
    """Join a Gloo process group (and Horovod over MPI under mpirun), then keep every socket open until the
    test has looked at them; returns the rank's view of the ports it was given."""
    import torch
    import torch.distributed as dist

    if with_horovod:
        import horovod.torch as hvd

        hvd.init()
        hvd.allreduce(torch.ones(1))
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    Path(flags, f"ready-{dist.get_rank()}").touch()
    poll_until(lambda: Path(flags, "go").exists(), 120)
    dist.barrier()
    dist.destroy_process_group()
    return {"master_port": int(os.environ["MASTER_PORT"])}


def _parent(pid: int) -> int:
    """The parent pid, from /proc/PID/stat (the field after the parenthesised command name); -1 once gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[1])


def _wait_for(flags: Path, count: int, run: threading.Thread) -> None:
    wait_until(
        lambda: len(list(flags.glob("ready-*"))) >= count or not run.is_alive(),
        180,
        "the ranks did not get ready in time",
    )
    assert len(list(flags.glob("ready-*"))) >= count, "the run ended before its ranks were ready"


def test_listening_ports_come_from_the_port_range(spark_cluster: Any, launcher: str, tmp_path: Path) -> None:
    result: dict[str, Any] = {}
    runner = Runner(np=2, launcher=launcher, port_range=PORT_RANGE, tracking=False, timeout=300)

    def run() -> None:
        result["value"] = runner.run(hold_sockets_open, str(tmp_path), launcher == "mpirun")

    thread = threading.Thread(target=run)
    thread.start()
    try:
        _wait_for(tmp_path, 2, thread)
        processes = rank_processes()
        sockets = {pid: listening_sockets(pid) for pid in processes}
        parents = {pid: _parent(pid) for pid in processes}
    finally:
        (tmp_path / "go").touch()
        thread.join(300)
    low, high = PORT_RANGE
    outside = {pid: {s for s in found if not low <= s[1] <= high} for pid, found in sockets.items()}
    workers = [
        pid for pid, argv in processes.items() if argv.split()[1:3] == ["-m", "sparkrunner.ranks.bootstrap"]
    ]
    ranks = [pid for pid in workers if parents[pid] not in workers]  # not their forked output relays
    assert len(ranks) == 2, processes
    for pid in ranks:  # Gloo's pair listener, its port chosen by the kernel (Gloo may have closed it already)
        assert len(outside.pop(pid)) <= 1, sockets[pid]
    for pid, found in outside.items():  # mpirun: its PMIx server for the local ranks, on loopback only
        assert all(address == _LOOPBACK for address, _ in found), (processes[pid], sorted(found))
    if launcher == "mpirun":
        assert any(low <= port <= high for pid in processes for _, port in sockets[pid] if pid not in ranks)
    inside = {port for found in sockets.values() for _, port in found if low <= port <= high}
    assert result["value"]["master_port"] in inside  # torch's store listens where sparkrunner said
