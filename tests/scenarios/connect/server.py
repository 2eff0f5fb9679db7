"""A real Spark Connect server for the tests: a `local[2]` Spark driver serving Connect on a free port, in a driver
program of its own (tests/programs/connect_server.py), shared by the Connect tests' client programs.

A Connect server must not share the pytest process with the classic session of the other tests; its clients are
separate driver programs too (tests.helpers.start_driver), which reach it at its `sc://` URL.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers import start_driver, wait_for_line

START_S = 300
"""A bound, not a timing: a loaded machine starts the server's JVM in tens of seconds."""


def serve(master: str = "local[2]") -> tuple[Any, str]:
    """(the server's classic session, its Connect URL): a Spark driver in this process serving Connect."""
    from sparkrunner.system.network import free_ports

    for tries_left in reversed(range(3)):
        port = free_ports(1)[0]  # free on every interface: the Connect service binds 0.0.0.0
        try:
            server = _server_session(master, port)
            break
        except Exception as exc:  # another process took the port between the probe and the bind
            if "BindException" not in str(exc) or not tries_left:
                raise
    server.sparkContext.setLogLevel("ERROR")
    return server, f"sc://localhost:{port}"


def _server_session(master: str, port: int) -> Any:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
        .config("spark.connect.grpc.binding.port", str(port))
        .getOrCreate()
    )


class ConnectServer:
    """The server program, started on first use of `url` and ended by `stop`; `log` keeps what its Spark driver
    printed (its answers come on the program's stdout alone, so its logs never fill an unread pipe)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._proc: subprocess.Popen[str] | None = None
        self._url = ""

    @property
    def url(self) -> str:
        """The server's `sc://localhost:PORT`, its program started first where it is not running."""
        if self._proc is None:
            self._proc = start_driver("connect_server", str(self.log), stdin=subprocess.PIPE)
            self._url = self._answer("URL", seconds=START_S)
        return self._url

    def active_jobs(self) -> list[int]:
        """The ids of the Spark jobs running on the server now (its SparkContext's status tracker)."""
        assert self._proc is not None and self._proc.stdin is not None, "the Connect server is not running"
        self._proc.stdin.write("jobs\n")
        self._proc.stdin.flush()
        return list(json.loads(self._answer("JOBS", seconds=60)))

    def stop(self) -> None:
        """End the server program (its stdin closed), if it runs."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        try:  # communicate closes its stdin
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()

    def _answer(self, key: str, seconds: float) -> str:
        assert self._proc is not None
        try:
            line = wait_for_line(self._proc, f"{key} ", seconds=seconds)[-1]
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nthe server's log:\n{self.log.read_text()}") from None
        return line.split(" ", 1)[1].strip()
