"""A rank function that leaves daemons behind: shared by the launcher-parity test and `bench/daemon_end.py`."""

from __future__ import annotations

import os
from pathlib import Path


def ranks_leave_daemons(folder: str, seconds: float) -> str:
    """Each rank leaves a daemon (a session of its own) that would leave a file in `folder` after `seconds`,
    writes the daemon's pid to `pid-N`, prints its last line (the daemons hold its output pipes) and, last, writes
    the time it returns to `returned-N`.

    Rank 0's daemon is a program started with the rank's output (it holds the output relay's pipes); rank 1's is
    a bare fork of the rank, which also holds the launcher's own output pipe (mpirun's, in barrier task 0)."""
    import subprocess
    import sys
    import time

    rank = os.environ["RANK"]
    mark = os.path.join(folder, f"daemon-of-rank-{rank}")
    if rank == "1":
        if os.fork() == 0:
            os.setsid()
            if (daemon := os.fork()) == 0:
                time.sleep(seconds)
                Path(mark).touch()
            else:
                Path(folder, f"pid-{rank}").write_text(str(daemon))
            os._exit(0)
        os.wait()
    else:
        code = f"import pathlib, time; time.sleep({seconds}); pathlib.Path({mark!r}).touch()"
        daemon = subprocess.Popen([sys.executable, "-c", code], start_new_session=True).pid
        Path(folder, f"pid-{rank}").write_text(str(daemon))
    print(f"rank {rank} returns", flush=True)
    Path(folder, f"returned-{rank}").write_text(repr(time.monotonic()))
    return rank
