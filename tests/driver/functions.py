"""Functions the diagnostics tests run on the ranks (shipped by value, like a notebook's)."""

from __future__ import annotations

import os
import signal
import sys
import time

from tests.waiting import poll_until


def stuck_here(until_file: str | None = None) -> None:
    while until_file is None or not os.path.exists(until_file):
        time.sleep(0.2)


def rank_one_stuck_here(until_file: str | None = None) -> str:
    print(f"rank {os.environ['RANK']} is up", flush=True)
    if os.environ["RANK"] == "1":
        stuck_here(until_file)
    while until_file is None or not os.path.exists(until_file):
        time.sleep(0.2)
    return "done"


def all_reduce_with_a_stopped_peer() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)  # every rank is wired up
    print(f"rank {os.environ['RANK']} passed the first all_reduce", flush=True)
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    dist.all_reduce(tensor)  # rank 0 waits here for its stopped peer


def crashes_after_a_line() -> None:
    if os.environ["RANK"] == "1":
        print("loss went nan at step 42", flush=True)
        print("about to write the checkpoint", file=sys.stderr, flush=True)
        os._exit(3)
    time.sleep(600)


def killed_on_rank_one() -> None:
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)


def rank_one_hangs_up_then_dies(marker_dir: str) -> None:
    """Rank 1 closes its Gloo connections, so rank 0's all_reduce fails with 'connection closed by peer'; rank 1
    dies (exit 7) only once rank 0 has reported that error and exited: the consequence always arrives first, and
    rank 1's death must still be named the cause."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    marker = os.path.join(marker_dir, "rank0.pid")
    if dist.get_rank() == 1:
        dist.destroy_process_group()
        _wait_for_exit_of_pid_in(marker, seconds=60.0)
        os._exit(7)
    with open(marker + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(marker + ".tmp", marker)  # rank 1 sees the whole pid or nothing
    dist.all_reduce(tensor)


def _wait_for_exit_of_pid_in(path: str, seconds: float) -> None:
    """Poll until `path` names a pid that no longer runs (bounded: the test then fails rather than hangs)."""
    poll_until(lambda: _names_an_ended_pid(path), seconds)


def _names_an_ended_pid(path: str) -> bool:
    """`path` exists and names a pid that no longer runs."""
    if not os.path.exists(path):
        return False
    with open(path) as f:
        pid = int(f.read())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def prints_a_storm(lines: int, updates: int, long_line: int) -> str:
    for i in range(updates):
        sys.stdout.write(f"\rstep {i}/{updates}")
    sys.stdout.write("\n")
    print("x" * long_line)
    for i in range(lines):
        print(f"line {i}")
    return "ok"


def prints_then_raises(lines: int) -> None:
    for i in range(lines):
        print(f"line {i}")
    raise ValueError("after many lines")


def prints_a_huge_line_and_dies() -> None:
    if os.environ["RANK"] == "1":
        print("y" * 5_000_000, flush=True)
        os._exit(2)
    time.sleep(600)
