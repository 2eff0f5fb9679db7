"""A rank stand-in for tests/tasks/test_rank_seeds.py, run by a seed as ``python -m tests.tasks.seed_child CODE``:
prints its pid and parent, the result-ack timing its sparkrunner imported, whether any task-side module is loaded,
whether the kernel's view of its environment (/proc/self/environ) names its attempt, and exits with CODE."""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    from sparkrunner import timeouts

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
