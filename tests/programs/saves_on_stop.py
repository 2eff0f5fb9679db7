"""A driver whose rank 0 alone saves in `on_stop` (tests/recovery/stop_saves.py), for Ctrl-C tests.

Usage: ``saves_on_stop.py NP LAUNCHER CHECKPOINT_DIR STARTED`` (NP < 0: on this machine). The driver prints
``RAISED <type>`` for what the run raised.
"""

import sys
from typing import cast

from sparkrunner import Runner
from sparkrunner.options import LauncherName
from tests.recovery.stop_saves import rank0_saves_on_stop

np, launcher, checkpoint_dir, started = (
    int(sys.argv[1]),
    cast(LauncherName, sys.argv[2]),
    sys.argv[3],
    sys.argv[4],
)
try:
    Runner(
        np=np,
        launcher=launcher,
        checkpoint_dir=checkpoint_dir,
        stop_grace_s=20,
        tracking=False,
        progress=False,
    ).run(rank0_saves_on_stop, started)
except BaseException as exc:
    print(f"RAISED {type(exc).__name__}", flush=True)
    raise
