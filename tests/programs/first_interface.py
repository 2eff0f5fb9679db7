"""Prints the address a naive program would pick: the first IPv4 address of the first interface but lo
(tests/scenarios/cluster/test_fixture.py runs it inside a host's network namespace, where the decoy comes first)."""

import socket

import psutil

print(
    next(
        a.address
        for name, addrs in psutil.net_if_addrs().items()
        if name != "lo"
        for a in addrs
        if a.family == socket.AF_INET
    )
)
