"""Request times of ``mlflow models serve`` on a logged model (``--env-manager local``: this environment, no
network): the median milliseconds of one ``/invocations`` request of a few rows, after one warm-up request."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

START_TIMEOUT_S = 300
"""How long the server may take to answer /ping (it imports MLflow, the model's framework, then loads it)."""


def request_ms(
    uri: str, width: int, rows: tuple[int, ...] = (1, 1000), repeats: int = 20
) -> dict[int, float]:
    """{rows: median ms of a request of that many rows of `width` floats in column ``x``} from a server of
    `uri` started (one worker) and stopped here."""
    with tempfile.TemporaryFile() as log, serving(uri, log) as base:
        return {n: _median_ms(f"{base}/invocations", _body(n, width), repeats) for n in rows}


@contextlib.contextmanager
def serving(uri: str, log: IO[bytes], start_timeout_s: float = START_TIMEOUT_S) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of ``mlflow models serve -m uri`` (this environment: --env-manager local; one
    worker), once it answers /ping; its output goes to `log`; the server and its workers are stopped after."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bin_dir = os.path.dirname(sys.executable)  # mlflow execs uvicorn from the environment's bin
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    command = [f"{bin_dir}/mlflow", "models", "serve", "-m", uri, "--env-manager", "local", "-h", "127.0.0.1",
               "-p", str(port), "-w", "1"]  # fmt: skip
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(f"{base}/ping", server, log, start_timeout_s)
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)


def _body(rows: int, width: int) -> bytes:
    x = np.random.default_rng(0).random((rows, width), dtype=np.float32)
    return json.dumps({"dataframe_split": {"columns": ["x"], "data": [[row] for row in x.tolist()]}}).encode()


def _median_ms(url: str, body: bytes, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        post(url, body)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times[1:])


def post(url: str, body: bytes) -> Any:
    """The JSON answer to `body` (JSON) posted to `url`."""
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


def _wait_ready(url: str, server: subprocess.Popen[bytes], log: IO[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            log.seek(0)
            raise RuntimeError(
                f"mlflow models serve ended ({server.returncode}): {log.read().decode()[-2000:]}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"mlflow models serve did not answer {url} within {timeout_s} s")
