"""Barrier task 0 of an mpirun run ends mpirun once the driver says the run is over.

mpirun exits only when the output pipes of its local ranks are closed, and a daemon that a rank made with a
bare `os.fork()` holds its rank's pipe for as long as it lives. Task 0 cannot tell on its own whether the
ranks on other hosts are done, but the driver can. So task 0 asks the driver (`Wait`), and the driver answers
`RunOver` once every rank has reported and hung up. mpirun then gets `RUN_OVER_EXIT_WAIT_S` to exit on its
own. After that its process tree is ended, as on a timeout, and the task's sweep takes the daemon. When the driver
aborts the ranks instead (a failure, a timeout, a cancelled job: the cause is already known), mpirun's tree is
ended at once.
"""

from __future__ import annotations

import logging
import subprocess
import threading

from sparkrunner import channel
from sparkrunner.channel import messages as m
from sparkrunner.system.processes import RankProcess
from sparkrunner.timeouts import RUN_OVER_EXIT_WAIT_S

log = logging.getLogger(__name__)


class RunOverWatch:
    """While task 0's mpirun (`proc`) runs: ends it when the driver says every rank is done and it lingers."""

    def __init__(self, driver: tuple[str, int], secret: bytes, proc: RankProcess) -> None:
        self.ended_mpirun = False
        """True once this watch ended mpirun: its exit code then tells nothing about the ranks."""
        self._proc = proc
        self._conn: channel.Connection | None = None
        try:
            self._conn = channel.connect(driver, secret)
            m.send(self._conn, m.Wait())
        except channel.ChannelError as exc:
            log.debug("task 0 cannot hear when the run is over (mpirun then ends on its own): %s", exc)
            return
        threading.Thread(
            target=self._watch, args=(self._conn,), name="sparkrunner-run-over", daemon=True
        ).start()

    def _watch(self, conn: channel.Connection) -> None:
        try:
            while not isinstance(message := m.receive(conn), (m.RunOver, m.Abort)):
                pass  # what the driver tells every connection (Stop) is for the ranks
        except channel.ChannelError:
            return  # closed: mpirun ended first, or the driver is gone
        if isinstance(message, m.Abort):
            # the driver gave up on the ranks and has told why: mpirun must not outlive them (a cancelled
            # task's Python worker, and with it mpirun, may be left running by Spark)
            self.ended_mpirun = True
            self._proc.kill()
            return
        try:
            self._proc.wait(RUN_OVER_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            log.info(
                "every rank reported and hung up but mpirun is still up (a process a rank left holds it?): ending it"
            )
            self.ended_mpirun = True
            self._proc.kill()

    def close(self) -> None:
        """Stop listening (mpirun has ended)."""
        if self._conn is not None:
            self._conn.close()
