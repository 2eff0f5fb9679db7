"""The executor's fork server (`sparkrunner.ranks.zygote`) driven through its task-side client
(`sparkrunner.tasks.zygote_client`), with real processes and no Spark: each request forks a new child of the same
zygote, whose output reaches the task's pipe and whose exit status comes back; the child shows its own argv and
environment in /proc; a wrong key is refused; a zygote whose later imports start a thread, open a socket or load the
CUDA driver forks no more; the zygote ends when the driver's lease closes, leaving nothing in
the temp dir. Oracles: the process table (/proc), the child's own report of its pid and parent, the temp dir's
listing."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkrunner.channel import ChannelServer, new_secret
from sparkrunner.common.rank_job import ZygoteSpec
from sparkrunner.ranks import zygote_imports
from sparkrunner.system import zygote_link
from sparkrunner.tasks import zygote_client
from tests.helpers import ROOT
from tests.waiting import poll_until, wait_until


def _proc(pid: int, name: str) -> list[bytes]:
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return f.read().split(b"\0")


def _zygotes(lease_id: str) -> list[int]:
    """Live processes whose environment names `lease_id` as their zygote lease (read from /proc, not by
    sparkrunner)."""
    wanted = f"SPARKRUNNER_ZYGOTE_LEASE_ID={lease_id}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if (
                wanted in _proc(int(pid), "environ")
                and b"Z" not in _proc(int(pid), "stat")[0].split(b") ")[1][:1]
            ):
                found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.fixture
def own_temp_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temp dir of the test's own (TMPDIR, which the zygote inherits), short enough for the sockets' folder."""
    folder = Path(tempfile.mkdtemp(prefix="zygote-test-", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_each_rank_is_a_new_child_of_one_zygote_and_the_zygote_ends_with_its_lease(
    tmp_path: Path, own_temp_dir: Path
) -> None:
    key = new_secret()
    lease = ChannelServer(key, lambda *a: None, lambda *a: None)
    lease_id = f"zygote-test-{os.getpid()}-zygote"
    spec = ZygoteSpec(lease_id, key, ("127.0.0.1", lease.port), ())
    argv = [sys.executable, "-m", "tests.ranks.zygote_child"]
    pythonpath = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    try:
        seen = []
        for attempt, code in enumerate((3, 0)):
            marker = tmp_path / f"go-{attempt}"
            env = {**os.environ, "PYTHONPATH": pythonpath, "ZYGOTE_TEST_MARKER": str(marker),
                   "SPARKRUNNER_ATTEMPT_ID": f"rank-of-attempt-{attempt}"}  # fmt: skip
            rank = zygote_client.fork_rank(spec, [*argv, str(code)], env, None)
            assert rank is not None, "the zygote did not serve"
            own = f"SPARKRUNNER_ATTEMPT_ID=rank-of-attempt-{attempt}".encode()
            wait_until(
                lambda pid=rank.pid, own=own: own in _proc(pid, "environ"), 10, "the rank's env in /proc"
            )
            assert b"tests.ranks.zygote_child" in _proc(rank.pid, "cmdline")
            marker.touch()
            assert rank.wait(30) == code
            said = re.search(r"pid=(\d+) ppid=(\d+) marker=(\S+)", rank.output_tail())
            assert said is not None, rank.output_tail()
            assert (int(said[1]), said[3]) == (rank.pid, str(marker))
            seen.append((int(said[1]), int(said[2])))
        (first_pid, zygote), (second_pid, second_parent) = seen
        assert first_pid != second_pid and second_parent == zygote
        assert _zygotes(lease_id) == [zygote]
        stranger = ZygoteSpec(lease_id, new_secret(), spec.lease, ())  # another key: refused
        assert zygote_client.fork_rank(stranger, [*argv, "0"], env, None) is None
    finally:
        lease.close()
    assert poll_until(lambda: not _zygotes(lease_id), 10), (
        f"the zygote outlived its lease: {_zygotes(lease_id)}"
    )
    assert os.listdir(own_temp_dir) == [], "the zygote left its sockets' folder or its own temp folder"


def test_the_sockets_folder_removed_by_an_ending_zygote_before_a_file_is_made_in_it_is_made_again(
    own_temp_dir: Path,
) -> None:
    """`made_in_sockets_folder`: another zygote's rmdir of the empty folder comes between its makedirs and the
    file's creation (here, from inside the creating call); the folder is made again and the file made in it."""
    path = zygote_client.socket_path("race-zygote")
    calls = []

    def removed_then_opened(target: str) -> int:
        if not calls:
            os.rmdir(os.path.dirname(target))
        calls.append(target)
        return os.open(target, os.O_CREAT | os.O_RDWR, 0o600)

    os.close(zygote_link.made_in_sockets_folder(path, removed_then_opened))
    assert os.path.isfile(path) and len(calls) == 2


def test_a_rank_ends_with_its_task_s_connection_or_its_kill(tmp_path: Path) -> None:
    """A task that hangs up (its Python worker killed) takes its rank down; `kill()` reports SIGKILL's end."""
    key = new_secret()
    lease = ChannelServer(key, lambda *a: None, lambda *a: None)
    spec = ZygoteSpec(f"zygote-test-{os.getpid()}-kill-zygote", key, ("127.0.0.1", lease.port), ())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "ZYGOTE_TEST_MARKER": str(tmp_path / "never")}  # fmt: skip
    argv = [sys.executable, "-m", "tests.ranks.zygote_child", "0"]
    try:
        killed, orphaned = (zygote_client.fork_rank(spec, argv, env, None) for _ in range(2))
        assert killed is not None and orphaned is not None
        killed.kill()
        assert killed.wait(10) == -signal.SIGKILL
        orphaned._sock.close()  # as a killed worker's descriptors close
        assert poll_until(lambda: _gone(orphaned.pid), 10), "the rank outlived its task's connection"
    finally:
        lease.close()


def _gone(pid: int) -> bool:
    """`pid` has ended (gone from /proc, or a zombie)."""
    try:
        return _proc(pid, "stat")[0].rsplit(b") ", 1)[1][:1] == b"Z"
    except OSError:
        return True


def _warm_spec(name: str) -> tuple[ZygoteSpec, ChannelServer, dict[str, str]]:
    """A zygote spec that imports tests/ranks/zygote_warm_probe.py once idle, its lease, and a rank's env."""
    key = new_secret()
    lease = ChannelServer(key, lambda *a: None, lambda *a: None)
    spec = ZygoteSpec(
        f"zygote-test-{os.getpid()}-{name}-zygote", key, ("127.0.0.1", lease.port), (),
        ("tests.ranks.zygote_warm_probe",),
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return spec, lease, env


def test_once_idle_the_zygote_imports_its_later_modules_and_later_ranks_find_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ZygoteSpec.warm`: imported by the zygote itself (the probe writes the importer's pid) once it is idle,
    not by a rank; a rank forked after that finds the module imported."""
    monkeypatch.setenv("ZYGOTE_TEST_WARMED", str(tmp_path / "warmed"))
    spec, lease, env = _warm_spec("warm")
    argv = [sys.executable, "-m", "tests.ranks.zygote_child", "0"]
    try:
        first = zygote_client.fork_rank(spec, argv, {**env, "ZYGOTE_TEST_MARKER": str(tmp_path / "go")}, None)
        assert first is not None, "the zygote did not serve"
        (tmp_path / "go").touch()
        assert first.wait(30) == 0
        zygote = int(re.search(r"ppid=(\d+)", first.output_tail())[1])  # type: ignore[index]
        wait_until((tmp_path / "warmed").exists, 30, "the zygote's later import")
        assert (tmp_path / "warmed").read_text() == str(zygote)
        later = zygote_client.fork_rank(spec, argv, {**env, "ZYGOTE_TEST_MARKER": str(tmp_path / "go")}, None)
        assert later is not None and later.wait(30) == 0
        assert f"ppid={zygote} " in later.output_tail() and "warm=True" in later.output_tail()
    finally:
        lease.close()


@pytest.mark.parametrize("hazard", ["thread", "socket", "cuda"])
def test_a_zygote_whose_later_imports_start_a_thread_open_a_socket_or_load_cuda_forks_no_more(
    hazard: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork would copy half of that thread, share that socket, or hand its child a CUDA driver it cannot use
    (no GPU here: the probe loads a copy of a system library named as the CUDA driver's, which is what the
    zygote finds in its memory map when a CUDA runtime was first called): the next rank is refused (its task
    starts it cold); the rank the zygote forked before runs on to its end (`sparkrunner.ranks.zygote_imports`'s
    `fork_hazard`)."""
    monkeypatch.setenv("ZYGOTE_TEST_WARMED", str(tmp_path / "warmed"))
    monkeypatch.setenv("ZYGOTE_TEST_HAZARD", _cuda_stand_in(tmp_path) if hazard == "cuda" else hazard)
    spec, lease, env = _warm_spec(hazard)
    argv = [sys.executable, "-m", "tests.ranks.zygote_child", "0"]
    try:
        running = zygote_client.fork_rank(
            spec, argv, {**env, "ZYGOTE_TEST_MARKER": str(tmp_path / "go")}, None
        )
        assert running is not None, "the zygote did not serve"
        wait_until((tmp_path / "warmed").exists, 30, "the zygote's later import")
        assert (
            zygote_client.fork_rank(spec, argv, {**env, "ZYGOTE_TEST_MARKER": str(tmp_path / "go")}, None)
            is None
        )
        (tmp_path / "go").touch()
        assert running.wait(30) == 0
    finally:
        lease.close()


def _cuda_stand_in(folder: Path) -> str:
    """A copy, named ``libcuda.so.1`` in `folder`, of the C math library this interpreter loaded (found in its
    memory map): a library whose loading does nothing else."""
    with open("/proc/self/maps") as maps:
        libm = next(line.split()[-1] for line in maps if "/libm.so" in line)
    path = folder / "libcuda.so.1"
    shutil.copyfile(libm, path)
    return str(path)


def test_deepspeed_itself_is_preloaded_only_where_its_accelerator_detection_can_only_pick_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DeepSpeed picks its accelerator when imported: with ``DS_ACCELERATOR`` naming a device (its detection then
    checks that device, `real_accelerator.get_accelerator`) a zygote imports only its dependencies; on this CPU-only
    torch, with none set, DeepSpeed too (what it then picks in a rank: tests/placement/test_warm_local_starts.py)."""
    import torch

    assert not torch.backends.cuda.is_built(), "the oracle below holds for a CPU-only torch"
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    assert zygote_imports.deepspeed_imports() == ("mlflow", "deepspeed")
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    assert zygote_imports.deepspeed_imports() == ("mlflow",)
