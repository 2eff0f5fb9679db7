"""A rank stand-in for tests/ranks/test_zygote.py, run as ``python -m tests.ranks.zygote_child CODE``: prints
its pid, its parent, a variable of its environment and whether it found tests/ranks/zygote_warm_probe.py imported
(by the zygote that forked it), stays up until its marker file exists, exits with CODE."""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__":
    warm = "tests.ranks.zygote_warm_probe" in sys.modules
    print(
        f"pid={os.getpid()} ppid={os.getppid()} marker={os.environ['ZYGOTE_TEST_MARKER']} warm={warm}",
        flush=True,
    )
    deadline = time.monotonic() + 60
    while not os.path.exists(os.environ["ZYGOTE_TEST_MARKER"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    sys.exit(int(sys.argv[1]))
