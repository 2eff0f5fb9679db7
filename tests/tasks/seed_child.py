"""A rank stand-in for tests/tasks/test_rank_seeds.py, run by a seed as ``python -m tests.tasks.seed_child CODE``:
prints its pid and parent, the result-ack timing its sparkrunner imported, whether any task-side module is loaded,
whether the kernel's view of its environment (/proc/self/environ) names its attempt, and exits with CODE. With
SEED_TEST_TOUCH it makes that file first; with SEED_TEST_WAIT_FOR it waits up to 20 s for that file, and exits 9
without it."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    from sparkrunner import timeouts

    if "SEED_TEST_TOUCH" in os.environ:
        Path(os.environ["SEED_TEST_TOUCH"]).touch()
    if "SEED_TEST_WAIT_FOR" in os.environ:
        deadline = time.monotonic() + 20
        while not Path(os.environ["SEED_TEST_WAIT_FOR"]).exists():
            if time.monotonic() > deadline:
                sys.exit(9)
            time.sleep(0.02)

    with open("/proc/self/environ", "rb") as f:
        environ = f.read().split(b"\0")
    attempt = f"SPARKRUNNER_ATTEMPT_ID={os.environ['SPARKRUNNER_ATTEMPT_ID']}".encode()
    tasks_loaded = any(".tasks" in name for name in sys.modules if name.startswith("sparkrunner"))
    print(
        f"pid={os.getpid()} ppid={os.getppid()} ack={timeouts.RESULT_ACK_TIMEOUT_S} "
        f"tasks_loaded={tasks_loaded} attempt_in_proc={attempt in environ}",
        flush=True,
    )
    sys.exit(int(sys.argv[1]))
