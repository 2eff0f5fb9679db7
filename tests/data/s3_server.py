"""A real S3-API server for the tests: moto in server mode on 127.0.0.1 (or a fixture host), on a free port.

A test run starts one and publishes its endpoint in S3_ENDPOINT_ENV; test processes started from it (the
Petastorm environment's delegated cases) reuse that server instead of starting their own.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.waiting import accepts_connections, poll_until

ROOT = Path(__file__).resolve().parents[2]
MOTO_SERVER = ROOT / ".venv" / "bin" / "moto_server"
S3_ENDPOINT_ENV = "SPARKRUNNER_TEST_S3_ENDPOINT"
BUCKET = "sparkrunner-tests"
_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
_START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class S3Server:
    """Where the server listens, and the storage options that reach it from any process (Spark tasks too)."""

    endpoint: str  # http://host:port

    @property
    def storage_options(self) -> dict[str, Any]:
        return {
            "endpoint_override": self.endpoint.split("://", 1)[1],
            "scheme": "http",
            "access_key": _CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret_key": _CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "region": _CREDENTIALS["AWS_REGION"],
        }

    def filesystem(self) -> Any:
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(**self.storage_options, allow_bucket_creation=True)

    def new_prefix(self) -> str:
        """A fresh s3:// prefix in the test bucket (tests never share one)."""
        return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"

    def upload(self, local: Path, uri: str) -> None:
        import pyarrow.fs as pafs

        pafs.copy_files(str(local), uri.removeprefix("s3://"), destination_filesystem=self.filesystem())


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def s3_server(host: str = "127.0.0.1") -> Iterator[S3Server]:
    """The server this test run shares (started here, and stopped on exit, unless a parent process started it)."""
    given = os.environ.get(S3_ENDPOINT_ENV)
    if given and urllib.parse.urlsplit(given).hostname == host:  # one listening where this caller needs it
        yield S3Server(given)
        return
    port = free_port(host)
    process = subprocess.Popen(
        [str(MOTO_SERVER), "-H", host, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = S3Server(f"http://{host}:{port}")
    saved = {name: os.environ.get(name) for name in (*_CREDENTIALS, S3_ENDPOINT_ENV)}
    try:
        _wait_for(host, port, process)
        server.filesystem().create_dir(BUCKET)
        os.environ.update({**_CREDENTIALS, S3_ENDPOINT_ENV: server.endpoint})
        yield server
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def _wait_for(host: str, port: int, process: subprocess.Popen[bytes]) -> None:
    def listening() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited with {process.returncode} before listening")
        return accepts_connections(host, port)

    if not poll_until(listening, _START_TIMEOUT_S):
        raise TimeoutError(f"moto_server did not listen on {host}:{port} within {_START_TIMEOUT_S} s")
