"""What the driver, the barrier tasks and the ranks share of a zygote (`sparkrunner.ranks.zygote`): its socket's
names, starting one, and a rank forked through it (`ZygoteRank`, which a launcher waits for as for a
`RankProcess`).

On an executor a barrier task starts the run's zygote (`sparkrunner.tasks.zygote_client`); on the driver (np < 0)
`sparkrunner.driver.zygotes` starts and keeps one, and its spec names the socket (`ZygoteSpec.socket`): ranks only
connect there.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from typing import TypeVar

from sparkrunner.channel import messages as m
from sparkrunner.channel.transport import Connection, client_handshake, readable
from sparkrunner.common.environment import Env
from sparkrunner.common.rank_job import ZygoteSpec
from sparkrunner.errors import ChannelError
from sparkrunner.system import processes
from sparkrunner.timeouts import HANDSHAKE_TIMEOUT_S, ZYGOTE_START_WAIT_S

log = logging.getLogger(__name__)
T = TypeVar("T")

PRELOADABLE = (
    "numpy",
    "scipy",
    "torch",
    "torchvision",
    "pytorch_lightning",
    "lightning",
    "transformers",
    "accelerate",
)
"""Modules a zygote imports when the run's code does: heavy to import, and safe to fork once imported (none starts
a thread, opens a socket or initialises CUDA when imported: the zygote checks, `zygote_imports.fork_hazard`, and
tests/placement/test_warm_local_starts.py checks the zygote a rank was forked from). DeepSpeed only once idle, and
only where its import cannot reach a device (`WARM_LATER`)."""

WARM_LATER = {
    "torch": ("torch._dynamo",),
    "transformers": ("transformers.trainer", "deepspeed"),
    "accelerate": ("deepspeed",),
    "sparkrunner": ("pyarrow.dataset", "pyarrow.parquet"),
    "pyarrow": ("pyarrow.dataset", "pyarrow.parquet"),
}
"""What a zygote imports once idle after its first forks, for the ranks of later runs and attempts, when the run's
code imports the key: modules loaded on first use, not by the import itself: DistributedDataParallel, FSDP and
torch.compile load torch._dynamo (2-3 s; the deadlock once seen at the end of DDP in ranks forked after it is
torch's, and guarded in every rank: `sparkrunner.ranks.torch_guard`); the Hugging Face Trainer
transformers.trainer (3-4 s), and, where DeepSpeed is installed, DeepSpeed with MLflow, pandas and pydantic, which
it imports (the Trainer's and Accelerate's ``unwrap_model``: 1,756 modules, 1.5 s; DeepSpeed itself only where its
import can only pick the CPU, its dependencies everywhere: `sparkrunner.ranks.zygote_imports`); sparkrunner's data
readers pyarrow's dataset and Parquet modules (pyarrow's allocator without its background thread:
`sparkrunner.ranks.zygote`)."""

IMPORT_VARIABLES = (
    "TMPDIR",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "MLFLOW_CONFIGURE_LOGGING",  # MLflow configures its loggers when imported
    "MLFLOW_LOGGING_LEVEL",
)
IMPORT_PREFIXES = (
    "PYTHON",  # the interpreter's own (PYTHONPATH, PYTHONHASHSEED, PYTHONWARNINGS, ...): read when it starts
    "OMP_",  # OpenMP's (OMP_NUM_THREADS, ...): read when torch's or numpy's runtime loads
    "KMP_",  # Intel OpenMP's
    "MKL_",  # MKL's (MKL_NUM_THREADS, MKL_THREADING_LAYER, ...)
    "OPENBLAS_",  # OpenBLAS's (OPENBLAS_NUM_THREADS, ...): numpy's and scipy's pools are made at import
    "GOTO_",
    "TORCH_",  # torch's switches read at import (TORCH_LOGS, TORCH_SHOW_CPP_STACKTRACES, ...)
    "PYTORCH_",
    "TORCHDYNAMO_",  # torch._dynamo's and inductor's configs are read when they are imported
    "TORCHINDUCTOR_",
    "HF_",  # huggingface_hub's constants (HF_HOME, HF_HUB_OFFLINE, ...) are read at import
    "HUGGINGFACE_",
    "TRANSFORMERS_",
    "DS_",  # DeepSpeed's (DS_ACCELERATOR: its accelerator, picked when it is imported)
    "DEEPSPEED_",  # (DEEPSPEED_TIMEOUT: its process groups' default timeout, read at import)
)
"""The variables that decide what a preloaded module becomes when it is imported (its thread pools, caches and
switches), named or by prefix: a zygote takes the ranks' values before importing, and one is kept for each set of
values. Every other variable reaches a forked rank as it reaches a cold one: the zygote's environment is replaced
by the rank's after the fork (`sparkrunner.ranks.zygote.become_rank`). docs/elastic.md, "Local runs start warm"."""

_ROOM = 64 * 1024
"""Bytes of padding in the zygote's environment (and a little in its argv): a forked rank writes its own there."""


class ZygoteRank(processes.LocalRank):
    """A rank forked by the zygote: the same interface as `processes.RankProcess` (pid, poll, wait, kill, output
    tail). Its output comes through a pipe this task passed to the zygote; its exit status over the connection."""

    def __init__(
        self,
        sock: socket.socket,
        conn: Connection,
        argv: list[str],
        env: Mapping[str, str],
        echo_to: int | None,
    ) -> None:
        self._sock, self._conn = sock, conn
        self._polling = threading.Lock()
        read, write = os.pipe()
        try:
            m.send(conn, m.Fork(list(argv), dict(env), os.getcwd()))
            socket.send_fds(sock, [b"\0"], [write])
        finally:
            os.close(write)
        self.output = processes.OutputTail(read, echo_to)
        self._code: int | None = None
        reply = m.receive(conn)
        if not isinstance(reply, m.Forked):
            raise ChannelError(f"the zygote answered {reply.kind!r} to a fork")
        self.pid = reply.pid

    def poll(self) -> int | None:
        """Its exit code once the zygote sent it, else None; from any thread (on the driver, the placement's
        supervision and the thread that closes the run's services both ask)."""
        with self._polling:
            if self._code is None and readable(self._sock, 0):
                try:
                    reply = m.receive(self._conn)
                    self._code = reply.code if isinstance(reply, m.Exit) else 1
                except ChannelError:
                    self._code = -signal.SIGKILL  # the zygote ended, and its ranks with it (PR_SET_PDEATHSIG)
                self._conn.close()
            return self._code


Connected = tuple[socket.socket, Connection]
"""A socket to a zygote and the authenticated connection over it."""


def fork_rank(
    connect: Callable[[], Connected | None], argv: list[str], env: Mapping[str, str], echo_to: int | None
) -> ZygoteRank | None:
    """The rank `argv` with `env`, forked by the zygote `connect` reaches; None when no zygote can serve (the
    caller starts the rank cold)."""
    try:
        connected = connect()
        if connected is None:
            return None
        return ZygoteRank(*connected, argv, env, echo_to)
    except Exception as exc:  # (a broken handshake included) whatever it was, the rank can still start cold
        log.warning("the zygote could not start a rank (it starts cold): %s", exc)
        return None


def abstract_socket(name: str) -> str:
    """A zygote socket in Linux's abstract namespace for `name` (no file anywhere; the key authenticates who
    connects), written ``@name`` (an environment variable holds no NUL): the driver's zygotes'."""
    return "@sparkrunner-zygote-" + hashlib.sha256(name.encode()).hexdigest()[:24]


def is_abstract(path: str) -> bool:
    return path.startswith("@")


def socket_address(path: str) -> str:
    """What `socket.bind` and `connect` take for a zygote socket `path` (an abstract one's leading NUL)."""
    return "\0" + path[1:] if is_abstract(path) else path


def named_socket(name: str) -> str:
    """A zygote socket's path for `name` in this user's sockets' folder, short enough for a Unix socket's 108
    bytes wherever the temp folder is."""
    folder = os.path.join(tempfile.gettempdir(), f"sparkrunner-zygotes-{os.getuid()}")
    if len(folder) > 60:
        folder = f"/tmp/sparkrunner-zygotes-{os.getuid()}"
    return os.path.join(folder, f"{hashlib.sha256(name.encode()).hexdigest()[:24]}.sock")


def made_in_sockets_folder(path: str, make: Callable[[str], T]) -> T:
    """`make(path)` (a socket or lock file), making the sockets' folder first. An ending zygote removes the folder
    once empty (`remove_sockets_folder`): when that came between the two, the folder is made again, once."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    try:
        return make(path)
    except FileNotFoundError:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        return make(path)


def remove_sockets_folder(path: str) -> None:
    """Remove the folder of socket `path` if no other zygote's files are in it (rmdir refuses a folder in use)."""
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(path))


def process_identity(pid: int) -> str:
    """ "pid:start ticks" of `pid`: what a zygote watches (it ends with that process, not with a reused pid)."""
    stat = processes.proc_stat(pid)
    return f"{pid}:{stat.start_ticks if stat is not None else 0}"


def connect(path: str, key: bytes) -> Connected | None:
    """An authenticated connection to the zygote at `path`; None when none listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(HANDSHAKE_TIMEOUT_S)
    try:
        sock.connect(socket_address(path))
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    try:
        return sock, client_handshake(sock, key)
    except Exception:
        sock.close()
        raise


def start_zygote(env: Mapping[str, str], key: bytes) -> subprocess.Popen[bytes] | None:
    """A zygote started with `env` (its socket, lease and modules named there) and `key`, once it listens; None
    (and nothing left running) when it does not within `ZYGOTE_START_WAIT_S`."""
    zygote = subprocess.Popen(
        [sys.executable, "-m", "sparkrunner.ranks.zygote", " " * 64],  # (room for a rank's argv)
        env=dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    with contextlib.suppress(OSError):
        zygote.stdin.write(key)
    with contextlib.suppress(OSError):
        zygote.stdin.close()
    if readable(zygote.stdout, ZYGOTE_START_WAIT_S) and zygote.stdout.readline() == m.ZYGOTE_READY:
        zygote.stdout.close()
        return zygote
    log.warning("a zygote did not start within %s s: the ranks start cold", ZYGOTE_START_WAIT_S)
    processes.kill_tree(zygote.pid)
    zygote.wait()
    zygote.stdout.close()
    return None


def imports_environment(rank_env: Mapping[str, str]) -> dict[str, str]:
    """What of a rank's environment a zygote takes before importing: the variables read at import
    (`IMPORT_VARIABLES`, `IMPORT_PREFIXES`: the PYTHONPATH and thread counts among them)."""
    return {
        name: value
        for name, value in sorted(rank_env.items())
        if name in IMPORT_VARIABLES or name.startswith(IMPORT_PREFIXES)
    }


def zygote_variables(spec: ZygoteSpec, path: str, watched: str) -> dict[str, str]:
    """The zygote's own variables: its socket `path`, its lease, the process it ends with (`watched`, "pid:start
    ticks"), its modules, and room for a forked rank's environment."""
    return {
        Env.ZYGOTE_SOCKET: path,
        Env.ZYGOTE_LEASE: f"{spec.lease[0]}:{spec.lease[1]}",
        Env.ZYGOTE_WATCH: watched,
        Env.ZYGOTE_MODULES: ",".join(spec.modules),
        Env.ZYGOTE_WARM: ",".join(spec.warm),
        Env.ZYGOTE_ROOM: " " * _ROOM,
        "PYTHONUNBUFFERED": "1",
    }
