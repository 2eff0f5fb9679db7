"""Request times of ``mlflow models serve`` on a logged model (``--env-manager local``: this environment, no
network): the median milliseconds of one ``/invocations`` request of a few rows, after one warm-up request."""

from __future__ import annotations

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
from typing import Any

import numpy as np

START_TIMEOUT_S = 300
"""How long the server may take to answer /ping (it imports MLflow, the model's framework, then loads it)."""


def request_ms(
    uri: str, width: int, rows: tuple[int, ...] = (1, 1000), repeats: int = 20
) -> dict[int, float]:
    """{rows: median ms of a request of that many rows of `width` floats in column ``x``} from a server of
    `uri` started (one worker) and stopped here."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bin_dir = os.path.dirname(sys.executable)  # mlflow execs uvicorn from the environment's bin
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    command = [f"{bin_dir}/mlflow", "models", "serve", "-m", uri, "--env-manager", "local", "-h", "127.0.0.1",
               "-p", str(port), "-w", "1"]  # fmt: skip
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            _wait_ready(f"http://127.0.0.1:{port}/ping", server, log)
            url = f"http://127.0.0.1:{port}/invocations"
            return {n: _median_ms(url, _body(n, width), repeats) for n in rows}
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
        _post(url, body)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times[1:])


def _post(url: str, body: bytes) -> Any:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


def _wait_ready(url: str, server: subprocess.Popen[bytes], log: Any) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
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
    raise TimeoutError(f"mlflow models serve did not answer {url} within {START_TIMEOUT_S} s")
