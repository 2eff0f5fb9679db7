"""The driver's side of a run's zygotes (`sparkrunner.ranks.zygote`): which runs get them, and their lease.

A run whose attempts may start again (`max_failures > 0`, or an np range) under the direct launcher on Spark
forks its ranks from one zygote per executor, so a retried or resized attempt does not import torch again. Each
zygote stays connected to the run's lease server here, authenticated with the run's zygote key; closing the
lease when the run ends (success, failure, cancel) ends every zygote of the run, on every executor.
"""

from __future__ import annotations

import logging
from typing import Any

from sparkrunner.channel import ChannelServer, Connection, new_secret
from sparkrunner.launch import processes
from sparkrunner.launch.driver.code_imports import imported_modules
from sparkrunner.launch.network import server_port
from sparkrunner.launch.zygote_client import PRELOADABLE, WARM_LATER, ZygoteSpec
from sparkrunner.options import RunOptions
from sparkrunner.timeouts import SWEEP_GRACE_S

log = logging.getLogger(__name__)


def wants_zygotes(options: RunOptions, launcher: str) -> bool:
    """Direct-launched Spark runs that may start again: a retry (`max_failures`) or a resize (an np range)."""
    return (
        launcher == "direct" and options.np > 0 and (options.max_failures > 0 or options.np_range is not None)
    )


class ZygoteLease:
    """The run's zygote key and the server its zygotes stay connected to (started with the first attempt)."""

    def __init__(self, run_id: str, main: Any) -> None:
        self.run_id = f"{run_id}-zygote"
        self._key = new_secret()
        imported = imported_modules(main) or frozenset()
        self._modules = tuple(name for name in PRELOADABLE if name in imported)
        later = (module for name in sorted(imported) for module in WARM_LATER.get(name, ()))
        self._warm = tuple(dict.fromkeys(later))
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
        return ZygoteSpec(self.run_id, self._key, (driver_host, self._server.port), modules, warm)

    def close(self) -> None:
        """End every zygote of the run: they hang up with the lease (and on this machine, wait for them)."""
        if self._server is not None:
            self._server.close()
            leftover = processes.sweep_run(self.run_id, grace_s=SWEEP_GRACE_S)
            if leftover:
                log.warning("killed %d zygote(s) of run %s still up", len(leftover), self.run_id)


def _ignore(conn: Connection, *message: Any) -> None:
    """A zygote sends nothing on its lease; it only stays connected."""
