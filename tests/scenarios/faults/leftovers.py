"""What a run may leave on this machine, scanned by the tests themselves (not by the library's clean-up): rank
processes (/proc), new entries in the driver's temp dir, the temp folders the ranks were told of (their secret
folder, mpirun's session folder: in the executors' temp dir), `/dev/shm` entries, and ports no longer bindable.
Shared by the fault matrix, the CI-sized soak and `bench/soak.py`."""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sparkrunner.common.environment import Env
from tests.helpers import fd_targets, rank_processes
from tests.waiting import poll_until

SHM = "/dev/shm"
LEFTOVER_GRACE_S = 10.0
"""How long the run's leftovers get to go after `run()` returned (watchers poll, killed processes are reaped)."""
RANK_FOLDERS = (Env.SECRET_DIR, "OMPI_MCA_orte_tmpdir_base")
"""Variables naming the temp folders a rank's launcher made for it (none may outlive the run)."""


def record_rank_folders(folder: str, rank: int) -> None:
    """In a rank: write its temp folders (`RANK_FOLDERS`) and its MASTER_PORT to `folder` for `Leftovers`. Read
    from the environment the rank started with (/proc): it forgets its secret folder before the user's code."""
    started_with = dict(
        entry.split(b"=", 1)
        for entry in Path("/proc/self/environ").read_bytes().split(b"\0")
        if b"=" in entry
    )
    named = [started_with[name.encode()].decode() for name in RANK_FOLDERS if started_with.get(name.encode())]
    Path(folder, f"temp-folders-{rank}").write_text("\n".join(named))
    Path(folder, f"port-{rank}").write_text(os.environ.get("MASTER_PORT", ""))


def ranks_recorded(folder: Path) -> tuple[set[str], set[int]]:
    """The temp folders and ports the ranks of a run wrote with `record_rank_folders`."""
    folders = {line for p in folder.glob("temp-folders-*") for line in p.read_text().splitlines() if line}
    return folders, {int(text) for p in folder.glob("port-*") if (text := p.read_text())}


def use_private_temp_dir(folder: Path) -> None:
    """Make `folder` this process's temp dir (TMPDIR, which the driver's ranks and mpirun inherit), so its
    listing shows this run's files only, never other sessions' on the machine."""
    folder.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = str(folder)


TORCH_CACHE = f"torchinductor_{getpass.getuser()}"
"""torch's own cache folder in the temp dir, which torch keeps by design: made by whatever imports torch._dynamo (a
DDP rank, or the driver's import zygote warming it for later runs), never a leftover of a run."""


def temp_entries() -> set[str]:
    return set(os.listdir(tempfile.gettempdir())) - {TORCH_CACHE}


def shm_entries() -> set[str]:
    return set(os.listdir(SHM)) if os.path.isdir(SHM) else set()


def shm_in_use(exclude: frozenset[int] | set[int] = frozenset()) -> set[str]:
    """The /dev/shm entries some live process (but those in `exclude`) maps or holds open (/proc/*/maps and
    /proc/*/fd): those belong to a run still going, such as another pytest worker's 4-rank mpirun run, not to a
    run that ended."""
    used: set[str] = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) not in exclude:
            with contextlib.suppress(OSError):
                used.update(_shm_names((proc / "maps").read_text().splitlines()))
            with contextlib.suppress(OSError):
                used.update(_shm_names(fd_targets(int(proc.name))))
    return used


def _shm_names(lines: list[str]) -> set[str]:
    """The /dev/shm entry each line names (a maps line, or a descriptor's target), the rest ignored."""
    prefix = SHM + "/"
    return {line.split(prefix, 1)[1].split()[0] for line in lines if prefix in line}


def bindable(port: int) -> bool:
    """A server could listen on `port` again now (SO_REUSEADDR, as servers bind: TIME_WAIT does not count)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError):
            probe.bind(("0.0.0.0", port))
            return True
    return False


@dataclass
class Leftovers:
    """The machine before a run; `after(run_folder)` lists what the run left (empty when nothing), waiting up to
    `LEFTOVER_GRACE_S`."""

    temp: set[str] = field(default_factory=temp_entries)
    shm: set[str] = field(default_factory=shm_entries)

    def now(self, folders: set[str], ports: set[int]) -> list[str]:
        found = [f"process {pid}: {cmd}" for pid, cmd in rank_processes().items()]
        found += [f"temp entry {name}" for name in sorted(temp_entries() - self.temp)]
        found += [f"rank temp folder {path}" for path in sorted(folders) if os.path.exists(path)]
        found += [f"/dev/shm/{name}" for name in sorted(shm_entries() - self.shm - shm_in_use())]
        return found + [f"port {port} still bound" for port in sorted(ports) if not bindable(port)]

    def after(self, run_folder: Path) -> list[str]:
        """What is left of the run whose ranks recorded their folders and ports in `run_folder`."""
        folders, ports = ranks_recorded(run_folder)
        poll_until(lambda: not self.now(folders, ports), LEFTOVER_GRACE_S)
        return self.now(folders, ports)
