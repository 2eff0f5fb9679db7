"""A hostile client for the flood tests, run as its own process: `python flooder.py MODE COUNT READY_FILE`.

Reads a port from stdin, then either holds COUNT idle connections to it ("idle") or connects and closes COUNT
times ("scan"), writes how many connections it made into READY_FILE, and (idle) holds them until stdin closes.
"""

from __future__ import annotations

import resource
import socket
import sys


def main(mode: str, count: int, ready_file: str) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 256)), hard))
    port = int(sys.stdin.readline())
    held = []
    made = 0
    for _ in range(count):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            continue
        made += 1
        if mode == "idle":
            held.append(sock)
        else:
            sock.close()
    with open(ready_file, "w") as f:
        f.write(str(made))
    sys.stdin.read()  # hold the connections until the test is done
    for sock in held:
        sock.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
