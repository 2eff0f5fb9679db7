"""Which address and interface ranks use to reach each other, and which ports sparkrunner may open.

Spark may know an executor by a hostname, and a host may have several interfaces (docker0, VPNs) of which
only one reaches the other hosts: ranks use the address Spark reaches the executor at when this machine holds
it, otherwise the address this machine routes to the driver from, and name that address's interface to MPI,
Gloo and NCCL.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from dataclasses import dataclass

from sparkrunner.common.checks import PortRange
from sparkrunner.common.environment import Env
from sparkrunner.errors import InvalidArgumentError

SOCKET_INTERFACE_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
OOB_PORTS = 2


@dataclass(frozen=True)
class Interface:
    name: str
    network: str  # CIDR, e.g. "10.0.0.0/24"


def local_interface(address: str) -> Interface | None:
    """The local interface that holds the IPv4 `address`; None when none does."""
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if a.family == socket.AF_INET and a.address == address and a.netmask:
                return Interface(name, str(ipaddress.ip_interface(f"{a.address}/{a.netmask}").network))
    return None


def _resolve(host: str) -> str | None:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return None


def _route_source(destination: str) -> str:
    """The local address the kernel sends from to reach `destination` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((destination, 9))
        return str(probe.getsockname()[0])


def peer_address(spark_host: str, driver_host: str) -> str:
    """This task's IPv4 address that its peers can reach.

    Spark's own address for the executor (a hostname is resolved) when this machine holds it and it is not
    loopback (unless the driver is local too); otherwise the address this machine reaches the driver from.
    """
    address = _resolve(spark_host)
    driver = _resolve(driver_host)
    loopback_ok = driver is None or ipaddress.ip_address(driver).is_loopback
    usable = address is not None and (loopback_ok or not ipaddress.ip_address(address).is_loopback)
    if usable and local_interface(address) is not None:  # type: ignore[arg-type]
        return address  # type: ignore[return-value]
    if driver is None:  # the driver's name does not resolve here: the rank will say it cannot reach it
        return address or spark_host
    return _route_source(driver)


def socket_environment(address: str) -> dict[str, str]:
    """Gloo's and NCCL's interface variables for a rank whose peers reach it at `address` (on its host)."""
    interface = local_interface(address)
    if interface is None:
        return {}
    return {name: interface.name for name in SOCKET_INTERFACE_VARIABLES}


def own_ports(port_range: PortRange | None) -> PortRange | None:
    """The lower half of the range: the ports sparkrunner reserves (driver channel, topology ports)."""
    if port_range is None:
        return None
    low, high = port_range
    return low, (low + high) // 2


def mpi_ports(port_range: PortRange) -> PortRange:
    """The upper half: MPI binds its own listeners there, so they never take a port sparkrunner reserved."""
    low, high = port_range
    return (low + high) // 2 + 1, high


def mpi_port_split(port_range: PortRange) -> tuple[PortRange, PortRange]:
    """(MPI's data ports, its daemons' control ports) within the upper half. Open MPI's daemons (mpirun,
    orted) listen on every free port of the control block, so it is kept to the last `OOB_PORTS`; each rank
    takes one data port."""
    low, high = mpi_ports(port_range)
    return (low, high - OOB_PORTS), (high - OOB_PORTS + 1, high)


def server_port(host: str, port_range: PortRange | None) -> int:
    """The port for a server sparkrunner opens at `host`: one free a moment ago at the top of the range's own
    (lower) half, away from the barrier tasks' probes that start at its bottom; 0 (the kernel picks) without
    a range."""
    own = own_ports(port_range)
    return free_ports(1, host, own, slot=-1)[0] if own else 0


class HeldPorts:
    """Ports bound (not listening) by the process that chose them, until `close()`: the kernel hands none of
    them to another socket that binds port 0 or to an outgoing connection, and a plain `bind` to one fails.

    Each is bound exclusively, then given SO_REUSEADDR, and never listens, so the rank's own server (torch's TCP store, TF's and
    JAX's gRPC servers, sparkrunner's and Horovod's servers: all set SO_REUSEADDR) can bind and listen on it
    while it is held; that is what lets the holder keep it until the rank has taken it over."""

    def __init__(self, sockets: list[socket.socket]) -> None:
        self._sockets = sockets
        self.ports = tuple(int(s.getsockname()[1]) for s in sockets)

    def close(self) -> None:
        for s in self._sockets:
            s.close()

    def __enter__(self) -> HeldPorts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def hold_ports(count: int, port_range: PortRange | None = None, slot: int = 0) -> HeldPorts:
    """Hold `count` distinct free ports on every interface (see `HeldPorts`)."""
    return _bind_ports(count, "", port_range, slot)


def free_ports(
    count: int, host: str = "", port_range: PortRange | None = None, slot: int = 0
) -> tuple[int, ...]:
    """`count` distinct ports of `host` that were free a moment ago, for a server that binds at once; a port a
    rank listens on later is held instead (`hold_ports`)."""
    with _bind_ports(count, host, port_range, slot) as bound:
        return bound.ports


def _bind_ports(count: int, host: str, port_range: PortRange | None, slot: int) -> HeldPorts:
    """`count` distinct ports bound at `host`: any port, or ones in `port_range`, tried from position
    `slot * count` on (so tasks that choose at once on one host, each with its own slot, do not pick the same
    ports; slot -1 starts from the top)."""
    socks: list[socket.socket] = []
    candidates = _candidates(port_range, slot * count)
    try:
        while len(socks) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((host, next(candidates)))  # exclusive: fails on a port another holder holds
            except OSError:
                s.close()
                continue
            except StopIteration:
                s.close()
                raise InvalidArgumentError(
                    f"the port range {port_range} has fewer than {count} free ports on {host or 'this host'}; "
                    f"widen it ({Env.PORT_RANGE} or Runner(port_range=...))"
                ) from None
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # from now on, a listener may join
            socks.append(s)
    except BaseException:
        HeldPorts(socks).close()
        raise
    return HeldPorts(socks)


def _candidates(port_range: PortRange | None, offset: int) -> Iterator[int]:
    if port_range is None:
        while True:
            yield 0  # the kernel picks
    low, high = port_range
    ports = list(range(low, high + 1))
    start = offset % len(ports)
    yield from ports[start:] + ports[:start]
