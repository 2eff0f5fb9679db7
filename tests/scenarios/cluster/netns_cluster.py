"""A real multi-host Spark standalone cluster on one machine: one network namespace per worker host.

Layout (addresses in 10.213.<net>.0/24, a private range used only by what this module creates): a bridge in
the root namespace holds .1 (the Spark master and the driver); each host is a network namespace with a veth
into the bridge (.11, .12, ...), its own hostname (resolvable everywhere through /etc/hosts entries that
`close()` removes) and a Spark standalone worker whose executors Spark reports by that hostname. Each host
also has a decoy interface (docker0: a bridge with no ports), listed before the real one, whose address (the same on every host, like
docker0) reaches no other host: a naive "first non-loopback interface" choice picks it and fails.

Every name carries a random tag; `close()` removes everything, even when a step of it fails. A cluster holds a
lease (a locked file) while it lives: `start()` first removes what clusters of killed test runs left behind
(their lease is no longer locked), so an interrupted run never leaves the next one to clean up by hand.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from tests.waiting import accepts_connections, poll_until

# (Spark's environment for one daemon, its hostname or None) -> the command that runs spark-class with them:
# this interpreter's pyspark by default; tests/scenarios/image runs the daemons from the sparkrunner image instead.
SparkClassCommand = Callable[[dict[str, str], "str | None"], list[str]]


def host_spark_class(env: dict[str, str], hostname: str | None) -> list[str]:
    """spark-class of this interpreter's pyspark (the environment reaches it through the process's own).

    pyspark is imported here, not at module level: the Petastorm environment loads this plugin without it."""
    import pyspark

    return [str(Path(pyspark.__file__).parent / "bin" / "spark-class")]


START_TIMEOUT_S = 120.0
HOSTS_FILE = Path("/etc/hosts")
DECOY_LINK = "docker0"  # a bridge without ports, as docker leaves one on every host
_MARKER = "sparkrunner-netns-"
_LEASES = Path("/run/lock/sparkrunner-netns")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _edit_hosts_file(keep: object) -> None:
    """Rewrite /etc/hosts in place (it may be a bind mount) keeping the lines for which `keep(line)` holds."""
    with open(HOSTS_FILE, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        lines = f.read().splitlines(keepends=True)
        kept = [line for line in lines if keep(line)]  # type: ignore[operator]
        if kept != lines:
            f.seek(0)
            f.write("".join(kept))
            f.truncate()


def _add_hosts_entries(entries: dict[str, str], owner: str) -> None:
    with open(HOSTS_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write("".join(f"{address} {name}  # {_MARKER}{owner}\n" for name, address in entries.items()))


def _owner_of_hosts_line(line: str) -> str | None:
    match = re.search(rf"# {_MARKER}(\w+)$", line.strip())
    return match.group(1) if match else None


def _free_subnet_octet(second: int) -> int:
    """A third octet for 10.<second>.X.0/24 that no interface here uses (other test sessions' clusters)."""
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    taken = {int(x) for x in re.findall(rf"inet 10\.{second}\.(\d+)\.", used)}
    free = [x for x in range(1, 250) if x not in taken]
    return secrets.choice(free)


def _namespace_pids(ns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _delete_namespace(ns: str) -> None:
    for pid in _namespace_pids(ns):  # executors and ranks run in sessions of their own
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _kill_daemons_of(owner: str) -> None:
    """SIGKILL every Spark daemon a cluster started (they run in sessions of their own, so outlive pytest)."""
    marker = f"SPARK_WORKER_DIR=/tmp/{_MARKER}{owner}/".encode()
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            if entry.name.isdigit() and marker in (entry / "environ").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)


def _remove_everything_of(owner: str) -> None:
    """Remove what the cluster tagged `owner` made; each step runs even when an earlier one failed."""
    _kill_daemons_of(owner)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for ns in re.findall(rf"^(srns{owner}-\d+)", listed, re.MULTILINE):
        _delete_namespace(ns)
    subprocess.run(["ip", "link", "del", f"srb{owner}"], capture_output=True)
    _edit_hosts_file(lambda line: _owner_of_hosts_line(line) != owner)
    shutil.rmtree(f"/tmp/{_MARKER}{owner}", ignore_errors=True)


def _sweep_stale_clusters() -> None:
    """Remove the clusters whose lease nobody holds any more (their test process was killed)."""
    for lease in _LEASES.glob("*.lock"):
        with contextlib.suppress(OSError), open(lease, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live cluster
            _remove_everything_of(lease.stem)
            lease.unlink()


class NetnsCluster:
    """A Spark master in the root namespace and one worker per namespace ("host"), each with its own address,
    hostname, `slots` task slots and a decoy interface."""

    def __init__(
        self,
        hosts: int,
        slots_per_host: int,
        variant: int = 0,
        private_tmp: bool = False,
        spark_class: SparkClassCommand = host_spark_class,
    ) -> None:
        """`variant` (0-9) tells apart clusters one test process runs at the same time; `private_tmp` gives each
        host a mount namespace of its own with an empty tmpfs on /tmp, as on machines that share no disk;
        `spark_class` runs the Spark daemons (tests/scenarios/image: from the sparkrunner image)."""
        if private_tmp:
            _refuse_environments_under_tmp()
        self._spark_class = spark_class
        # test sessions may run in separate pid namespaces: a random tag, not the pid, keeps names apart
        self._owner = name = f"{secrets.token_hex(3)}{variant}"
        octet = _free_subnet_octet(213 + 2 * variant)
        net = f"10.{213 + 2 * variant}.{octet}"
        self.master_host = f"{net}.1"
        self.decoy_address = f"10.{214 + 2 * variant}.{octet}.1"
        self._bridge = f"srb{name}"
        self.namespaces = [f"srns{name}-{i}" for i in range(hosts)]
        self.worker_addresses = [f"{net}.{11 + i}" for i in range(hosts)]
        self.hostnames = [f"srhost{name}-{i}" for i in range(hosts)]
        self.slots_per_host = slots_per_host
        self._private_tmp = private_tmp
        self.logs = Path(f"/tmp/sparkrunner-netns-{name}")
        self._procs: list[subprocess.Popen[bytes]] = []
        self.started_workers: set[int] = set()
        self._lease: IO[str] | None = None

    @property
    def url(self) -> str:
        return f"spark://{self.master_host}:7077"

    def start(self, workers: int | None = None) -> str:
        """Create every host, start the master and the first `workers` workers (all by default); returns the
        master URL. On failure, call `close()`: it removes whatever was made."""
        _LEASES.mkdir(parents=True, exist_ok=True)
        _sweep_stale_clusters()
        self._lease = open(_LEASES / f"{self._owner}.lock", "a")  # noqa: SIM115 - held while the cluster lives
        fcntl.flock(self._lease, fcntl.LOCK_EX)
        self.logs.mkdir(exist_ok=True)
        _ip("link", "add", self._bridge, "type", "bridge")
        _ip("addr", "add", f"{self.master_host}/24", "dev", self._bridge)
        _ip("link", "set", self._bridge, "up")
        for i in range(len(self.namespaces)):
            self._make_host(i)
        _add_hosts_entries(dict(zip(self.hostnames, self.worker_addresses, strict=True)), self._owner)
        self._spawn([], "master", "org.apache.spark.deploy.master.Master", "--host", self.master_host,
                    "--port", "7077", "--webui-port", "0", local_ip=self.master_host)  # fmt: skip
        self._wait_port(self.master_host, 7077)
        for i in range(len(self.namespaces) if workers is None else workers):
            self.start_worker(i)
        return self.url

    def _make_host(self, i: int) -> None:
        ns, outer, inner = self.namespaces[i], f"{self._bridge}v{i}", f"{self._bridge}p{i}"
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        # the decoy first, so that it comes before the real interface in every listing
        _ip("-n", ns, "link", "add", DECOY_LINK, "type", "bridge")
        _ip("-n", ns, "addr", "add", f"{self.decoy_address}/24", "dev", DECOY_LINK)
        _ip("-n", ns, "link", "set", DECOY_LINK, "up")
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", ns)
        _ip("link", "set", outer, "master", self._bridge)
        _ip("link", "set", outer, "up")
        _ip("-n", ns, "addr", "add", f"{self.worker_addresses[i]}/24", "dev", inner)
        _ip("-n", ns, "link", "set", inner, "up")

    def start_worker(self, i: int) -> None:
        """Start host i's Spark worker, reported (with its executors) by the host's name."""
        self.started_workers.add(i)
        hostname = self.hostnames[i]
        # a host of its own: network namespace + its own hostname (MPI tells nodes apart by name)
        own_tmp = ["--mount", "--propagation", "private"] if self._private_tmp else []
        mount_tmp = 'mount -t tmpfs tmpfs /tmp && mkdir -p "$SPARK_WORKER_DIR" && ' if own_tmp else ""
        in_host = ["ip", "netns", "exec", self.namespaces[i], "unshare", "--uts", *own_tmp, "sh", "-c",
                   f'hostname {hostname} && {mount_tmp}exec "$@"', "-"]  # fmt: skip
        self._spawn(in_host, f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                    "--host", hostname, "--cores", str(self.slots_per_host), "--memory", "1g",
                    "--webui-port", "0", local_ip=self.worker_addresses[i], hostname=hostname)  # fmt: skip

    def _spawn(
        self, prefix: list[str], name: str, *args: str, local_ip: str, hostname: str | None = None
    ) -> None:
        spark_env = {"PYSPARK_PYTHON": sys.executable, "SPARK_NO_DAEMONIZE": "1", "SPARK_LOCAL_IP": local_ip}
        if hostname is not None:
            spark_env["SPARK_LOCAL_HOSTNAME"] = hostname
        spark_env["SPARK_WORKER_DIR"] = str(self.logs / f"work-{name}")
        command = [*prefix, *self._spark_class(spark_env, hostname), *args]
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child
        self._procs.append(
            subprocess.Popen(
                command, env={**os.environ, **spark_env}, stdout=log, stderr=log, start_new_session=True
            )
        )

    def _wait_port(self, host: str, port: int) -> None:
        if not poll_until(lambda: accepts_connections(host, port), START_TIMEOUT_S):
            raise TimeoutError(f"the Spark master did not listen on {host}:{port}; see {self.logs}")

    def pids_in(self, ns: str) -> list[int]:
        return _namespace_pids(ns)

    def host_of(self, pid: int) -> int:
        """The host (its index) whose network namespace process `pid` runs in."""
        return next(i for i, ns in enumerate(self.namespaces) if pid in _namespace_pids(ns))

    def cut_off(self, i: int, seconds: float) -> None:
        """Host i loses its link to every other host (and the master) for `seconds`, then gets it back."""
        link = f"{self._bridge}v{i}"
        _ip("link", "set", link, "down")
        try:
            time.sleep(seconds)
        finally:
            _ip("link", "set", link, "up")

    def run_in(self, i: int, argv: list[str]) -> str:
        """Run a command on host i (its network namespace) and return its stdout."""
        done = subprocess.run(
            ["ip", "netns", "exec", self.namespaces[i], *argv], capture_output=True, text=True
        )
        return done.stdout

    def close(self) -> None:
        """Stop every process started here (and their children), then delete namespaces, links, host names;
        each step runs even when an earlier one failed."""
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        _remove_everything_of(self._owner)
        if self._lease is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._lease.name)
            self._lease.close()


def can_create_namespaces() -> str | None:
    """None when this machine lets us create network namespaces, else the reason it does not."""
    probe = f"srprobe{secrets.token_hex(3)}"
    try:
        result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    except FileNotFoundError:
        return "the `ip` command (iproute2) is not installed"
    if result.returncode != 0:
        return f"cannot create network namespaces here (needs root or CAP_NET_ADMIN): {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if not os.access(HOSTS_FILE, os.W_OK):
        return f"cannot give the namespace hosts names: {HOSTS_FILE} is not writable"
    return None


def _refuse_environments_under_tmp() -> None:
    """Hosts with a private /tmp cannot see a Python environment, Spark or a checkout under /tmp: say so at
    once, rather than let their executors fail to start until a timeout."""
    import pyspark

    needed = {
        "the Python environment": sys.prefix,
        "the Python interpreter": os.path.realpath(sys.executable),
        "pyspark": os.path.dirname(os.path.realpath(pyspark.__file__)),
        "this checkout": str(Path(__file__).resolve().parents[3]),
    }
    under_tmp = {what: path for what, path in needed.items() if Path(path).resolve().is_relative_to("/tmp")}
    if under_tmp:
        raise RuntimeError(
            f"hosts with a private /tmp cannot see {under_tmp}: keep the clone and $SPARKRUNNER_CACHE (the "
            f"environments) outside /tmp to run this test"
        )
