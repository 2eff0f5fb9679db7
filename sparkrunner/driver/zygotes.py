"""The driver's side of zygotes (`sparkrunner.ranks.zygote`): which runs fork their ranks, and the leases that
end the zygotes.

- A run whose attempts may start again (`max_failures > 0`, or an np range) under the direct launcher on Spark
  forks its ranks from one zygote per executor, so a retried or resized attempt does not import torch again.
  Each zygote stays connected to the run's lease server here, authenticated with the run's zygote key; closing
  the lease when the run ends (success, failure, cancel) ends every zygote of the run, on every executor.
- A direct np < 0 run (unless ``cold_start=True``) forks its ranks from an import zygote this driver process
  keeps between runs (`DriverZygotes`), so a notebook's second run of a torch function does not import torch
  again, nor does a retry. One zygote per environment that decides what a rank imports (`ImportsKey`); a few
  are kept (`KEPT`), the least recently used idle one closed beyond that. Each holds imports only: every run
  forks new ranks (a warm session's ranks are `Runner.session`'s, and start cold). A driver zygote ends with
  this process (its lease closes; it also watches this process's pid and start time), after
  `DRIVER_ZYGOTE_IDLE_S` without a run, or when closed here; its environment names this process
  (`Env.DRIVER_ZYGOTE`), not a run: it is no leftover of any run, and a sweep at exit finds it.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from sparkrunner.channel import ChannelServer, Connection, new_secret
from sparkrunner.common.environment import Env
from sparkrunner.common.rank_job import ZygoteSpec
from sparkrunner.driver.launcher_choice.code_imports import imported_modules
from sparkrunner.options import RunOptions
from sparkrunner.system import processes, zygote_link
from sparkrunner.system.network import server_port
from sparkrunner.system.rank_environment import local_imports_environment
from sparkrunner.system.zygote_link import PRELOADABLE, WARM_LATER
from sparkrunner.timeouts import DRIVER_ZYGOTE_IDLE_S, SWEEP_GRACE_S, TIMINGS

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
KEPT = 2
"""Driver zygotes kept at most (each holds its imports' memory, some hundreds of MB with torch): beyond it the
least recently used one without a run is closed."""


class Zygotes(Protocol):
    """What a run's controller asks of its zygotes: the spec each attempt's ranks fork from (None: they start
    cold), and their end with the run."""

    def spec(self, bind_host: str, driver_host: str, options: RunOptions) -> ZygoteSpec | None: ...
    def close(self) -> None: ...


def zygotes_for(run_id: str, main: Any, options: RunOptions, launcher: str) -> Zygotes | None:
    """The zygotes a run's ranks fork from: the driver's for a direct np < 0 run unless it starts cold, an
    executor's per run for a direct Spark run that may start again (a retry, a resize); else None."""
    if launcher != "direct":
        return None
    if options.np < 0:
        return None if options.cold_start else DriverZygoteUse(main, options)
    if options.max_failures > 0 or options.np_range is not None:
        return ZygoteLease(run_id, main)
    return None


def _preloads(main: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The modules a zygote imports for `main` before its first fork (those of `PRELOADABLE` it imports) and
    once idle after it (`WARM_LATER`)."""
    imported = imported_modules(main) or frozenset()
    return tuple(name for name in PRELOADABLE if name in imported), _warm_later(imported)


def _warm_later(imported: Iterable[str]) -> tuple[str, ...]:
    """What a zygote imports once idle for code that imports `imported` (`WARM_LATER`)."""
    return tuple(dict.fromkeys(module for name in sorted(imported) for module in WARM_LATER.get(name, ())))


class ZygoteLease:
    """The run's zygote key and the server its executors' zygotes stay connected to (started with the first
    attempt)."""

    def __init__(self, run_id: str, main: Any) -> None:
        self.run_id, self.lease_id = run_id, f"{run_id}-zygote"
        self._key = new_secret()
        self._modules, self._warm = _preloads(main)
        self._server: ChannelServer | None = None

    def spec(self, bind_host: str, driver_host: str, options: RunOptions) -> ZygoteSpec:
        """What the barrier tasks need to start or reach their executor's zygote. The first attempt's zygotes
        import the `warm` modules once idle; a later attempt's new zygote (on an executor that came back) imports
        them before its first fork, once for all its ranks, which would each import them at once."""
        first = self._server is None
        if self._server is None:
            port = server_port(bind_host, options.port_range)
            self._server = ChannelServer(self._key, _ignore, _ignore, bind_host, port)
        modules, warm = (self._modules, self._warm) if first else (self._modules + self._warm, ())
        return ZygoteSpec(
            self.lease_id, self._key, (driver_host, self._server.port), modules, warm, run_id=self.run_id
        )

    def close(self) -> None:
        """End every zygote of the run: they hang up with the lease (and on this machine, wait for them)."""
        if self._server is not None:
            self._server.close()
            leftover = processes.sweep(
                lambda: processes.processes_with(Env.ZYGOTE_LEASE_ID, self.lease_id), SWEEP_GRACE_S
            )
            if leftover:
                log.warning("killed %d zygote(s) of run %s still up", len(leftover), self.run_id)


@dataclass(frozen=True)
class ImportsKey:
    """Everything that decides what a local rank imports: the interpreter, the working folder (the first entry
    of a ``-m`` process's sys.path), the temp dir (torch._dynamo keeps its cache folder's path from there), the
    variables read at import that ranks get (`zygote_link.IMPORT_VARIABLES`: the PYTHONPATH, this process's
    sys.path included, the thread counts, torch's and the math libraries' switches; from the run's ``env=`` and
    this process's environment now), and the preloadable modules the function imports. Nothing else of the
    environment: a sweep's per-run ``env=`` values, and variables this process sets later, reach each forked rank
    in its own environment, as a cold rank's."""

    interpreter: str
    cwd: str
    temp_dir: str
    imports_env: tuple[tuple[str, str], ...]
    modules: tuple[str, ...]


class DriverZygote:
    """One import zygote this driver keeps: its lease server, key, socket and process."""

    def __init__(self, key: ImportsKey, options: RunOptions) -> None:
        self.key = key
        self.users = 0
        """Runs using it now: it is not closed under them."""
        secret = new_secret()
        self._server = ChannelServer(
            secret, _ignore, _ignore, LOOPBACK, server_port(LOOPBACK, options.port_range)
        )
        me = zygote_link.process_identity(os.getpid())
        path = zygote_link.abstract_socket(f"driver:{me}:{os.urandom(8).hex()}")
        # once idle it imports what its modules' users load on first use (torch._dynamo for DDP, FSDP and
        # torch.compile; the Hugging Face Trainer), for the next runs: a function of its own adds no zygote
        warm = _warm_later(key.modules)
        self.spec = ZygoteSpec("", secret, (LOOPBACK, self._server.port), key.modules, warm, socket=path)
        env = {
            **os.environ,
            **dict(key.imports_env),
            **zygote_link.zygote_variables(self.spec, path, me),
            Env.DRIVER_ZYGOTE: me,
            TIMINGS["ZYGOTE_IDLE_S"].env: str(DRIVER_ZYGOTE_IDLE_S),
        }
        self._process = zygote_link.start_zygote(env, secret)

    def serving(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def close(self) -> None:
        """End the zygote: it hangs up with its lease; killed (with anything it forked) if still up after
        `SWEEP_GRACE_S`."""
        self._server.close()
        if self._process is None:
            return
        try:
            self._process.wait(SWEEP_GRACE_S)
        except subprocess.TimeoutExpired:
            log.warning("killed the driver's zygote %d, still up after its lease closed", self._process.pid)
            processes.kill_tree(self._process.pid)
            self._process.wait()


class DriverZygotes:
    """The zygotes this driver process keeps, least recently used first; at most `KEPT` without a run."""

    def __init__(self) -> None:
        self._kept: OrderedDict[ImportsKey, DriverZygote] = OrderedDict()
        self._lock = threading.Lock()

    def acquire(self, key: ImportsKey, options: RunOptions) -> DriverZygote | None:
        """The zygote for `key`, started now when none serves (a run waits for another's start); None when it
        cannot start (the ranks start cold). Release it when the run ends."""
        with self._lock:
            zygote = self._kept.pop(key, None)
            if zygote is not None and not zygote.serving():  # it ended itself (idle), or was killed
                zygote.close()
                zygote = None
            if zygote is None:
                zygote = DriverZygote(key, options)
                if not zygote.serving():
                    zygote.close()
                    return None
            zygote.users += 1
            self._kept[key] = zygote
            self._close_beyond_kept()
            return zygote

    def release(self, zygote: DriverZygote) -> None:
        with self._lock:
            zygote.users -= 1
            self._close_beyond_kept()

    def _close_beyond_kept(self) -> None:
        idle = [key for key, zygote in self._kept.items() if zygote.users == 0]
        for key in idle[: max(0, len(self._kept) - KEPT)]:
            self._kept.pop(key).close()

    def close(self) -> None:
        """End every zygote (at this process's exit), and sweep any process still naming this driver."""
        with self._lock:
            while self._kept:
                self._kept.popitem()[1].close()
        me = zygote_link.process_identity(os.getpid())
        processes.kill_and_wait(processes.processes_with(Env.DRIVER_ZYGOTE, me))


DRIVER_ZYGOTES = DriverZygotes()
atexit.register(DRIVER_ZYGOTES.close)


class DriverZygoteUse:
    """A run's use of the driver's zygote (direct, np < 0): acquired by its first attempt, released at its end."""

    def __init__(self, main: Any, options: RunOptions) -> None:
        modules, _ = _preloads(main)
        imports_env = local_imports_environment(dict(options.env), abs(options.np))
        self._key = ImportsKey(
            sys.executable,
            os.getcwd(),
            tempfile.gettempdir(),
            tuple(sorted(imports_env.items())),
            modules,
        )
        self._zygote: DriverZygote | None = None
        self._asked = False

    def spec(self, bind_host: str, driver_host: str, options: RunOptions) -> ZygoteSpec | None:
        if not self._asked:
            self._asked = True
            self._zygote = DRIVER_ZYGOTES.acquire(self._key, options)
        return None if self._zygote is None else self._zygote.spec

    def close(self) -> None:
        if self._zygote is not None:
            DRIVER_ZYGOTES.release(self._zygote)
            self._zygote = None


def _ignore(conn: Connection, *message: Any) -> None:
    """A zygote sends nothing on its lease; it only stays connected."""
