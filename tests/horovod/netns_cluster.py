"""A real multi-host Spark standalone cluster on one machine: one network namespace per worker host.

Layout (all addresses in 10.213.<net>.0/24, a private range used only inside what this module creates):
a bridge in the root namespace holds .1 (the Spark master and the driver); each namespace gets a veth into
the bridge with its own address (.11, .12, ...) and runs one Spark standalone worker bound to it. Everything
started here is stopped, and every namespace and link deleted, by `close()`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyspark

SPARK_CLASS = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
START_TIMEOUT_S = 90.0
# Spark's environment for one daemon -> the command that runs spark-class with it (the host's pyspark by default;
# tests/image runs the daemons from the sparkrunner image instead).
SparkClassCommand = Callable[[dict[str, str]], list[str]]


def host_spark_class(env: dict[str, str]) -> list[str]:
    """spark-class of this interpreter's pyspark (the environment reaches it through the process's own)."""
    return [SPARK_CLASS]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class NetnsCluster:
    """A Spark master in the root namespace and one worker per namespace, each with its own address."""

    def __init__(
        self, hosts: int, cores_per_host: int, spark_class: SparkClassCommand = host_spark_class
    ) -> None:
        tag = os.getpid() % 10000
        self.master_host = f"10.213.{tag % 250}.1"
        self._prefix = f"10.213.{tag % 250}"
        self._bridge = f"srbr{tag}"
        self.namespaces = [f"srns{tag}-{i}" for i in range(hosts)]
        self.worker_hosts = [f"{self._prefix}.{11 + i}" for i in range(hosts)]
        self._procs: list[subprocess.Popen[bytes]] = []
        self._links: list[str] = []
        self._cores = cores_per_host
        self._spark_class = spark_class
        self.logs = Path(f"/tmp/sparkrunner-netns-{tag}")

    def start(self) -> str:
        """Create the namespaces, start master and workers; returns the master URL."""
        self.logs.mkdir(exist_ok=True)
        _ip("link", "add", self._bridge, "type", "bridge")
        self._links.append(self._bridge)
        _ip("addr", "add", f"{self.master_host}/24", "dev", self._bridge)
        _ip("link", "set", self._bridge, "up")
        for i, (ns, host) in enumerate(zip(self.namespaces, self.worker_hosts, strict=True)):
            outer, inner = f"{self._bridge}v{i}", f"{self._bridge}p{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            self._links.append(outer)
            _ip("link", "set", inner, "netns", ns)
            _ip("link", "set", outer, "master", self._bridge)
            _ip("link", "set", outer, "up")
            _ip("-n", ns, "addr", "add", f"{host}/24", "dev", inner)
            _ip("-n", ns, "link", "set", inner, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        url = f"spark://{self.master_host}:7077"
        self._spawn(
            [],
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            self.master_host,
            "--port",
            "7077",
            "--webui-port",
            "0",
        )
        self._wait_port(self.master_host, 7077)
        for i, (ns, host) in enumerate(zip(self.namespaces, self.worker_hosts, strict=True)):
            # a host of its own: network namespace + its own hostname (MPI tells nodes apart by name)
            hostname = f"srhost{i}"
            in_host = [
                "ip",
                "netns",
                "exec",
                ns,
                "unshare",
                "--uts",
                "sh",
                "-c",
                f'hostname {hostname} && exec "$@"',
                "-",
            ]
            self._spawn(
                in_host,
                f"worker-{host}",
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                host,
                "--cores",
                str(self._cores),
                "--memory",
                "1g",
                "--webui-port",
                "0",
                local_ip=host,
            )
        return url

    def _spawn(self, prefix: list[str], name: str, *spark_args: str, local_ip: str | None = None) -> None:
        spark_env = {"PYSPARK_PYTHON": sys.executable, "SPARK_NO_DAEMONIZE": "1"}
        spark_env["SPARK_LOCAL_IP"] = local_ip or self.master_host
        spark_env["SPARK_WORKER_DIR"] = str(self.logs / f"work-{name}")
        command = [*prefix, *self._spark_class(spark_env), *spark_args]
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child
        self._procs.append(
            subprocess.Popen(
                command, env={**os.environ, **spark_env}, stdout=log, stderr=log, start_new_session=True
            )
        )

    def _wait_port(self, host: str, port: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
                return
            time.sleep(0.5)
        raise TimeoutError(f"the Spark master did not listen on {host}:{port}; see {self.logs}")

    def pids_in(self, ns: str) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def close(self) -> None:
        """Stop every process started here (and their children), then delete namespaces and links."""
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        for ns in self.namespaces:
            for pid in self.pids_in(ns):  # executors run in their own sessions
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for link in self._links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        shutil.rmtree(self.logs, ignore_errors=True)


def can_create_namespaces() -> str | None:
    """None when this machine lets us create network namespaces, else the reason it does not."""
    probe = f"srprobe{os.getpid() % 100000}"
    try:
        result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    except FileNotFoundError:
        return "the `ip` command (iproute2) is not installed"
    if result.returncode != 0:
        return f"cannot create network namespaces here: {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None
