"""The common pattern of a rank that saves when stopped: rank 0 alone registers `on_stop` (a save that takes
over a second), rank 1 registers nothing and trains on. Shared by the stop tests on the driver and on Spark."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import sparkrunner

SAVE_S = 1.5


def rank0_saves_on_stop(started: str) -> None:
    """Rank 0 saves in `on_stop` and returns once stopped; rank 1 never looks at stops."""
    me = sparkrunner.rank_context().rank
    steps = [0]
    if me == 0:

        def save() -> None:
            time.sleep(SAVE_S)  # a checkpoint that takes a while to write
            sparkrunner.save_checkpoint({"step": steps[0], "attempt": sparkrunner.rank_context().attempt})

        sparkrunner.on_stop(save)
    Path(f"{started}.{me}").touch()
    steps[0] += 1  # a step before the line the test stops on: a stop that comes at once still saves progress
    print("rank started", flush=True)
    while not (me == 0 and sparkrunner.stopping()):
        steps[0] += 1
        time.sleep(0.05)


def saved_state(folder: Path) -> dict[str, Any]:
    """The one checkpoint rank 0 wrote in `folder` (read with pickle: the test's own oracle)."""
    files = sorted(p for p in folder.iterdir() if p.name.startswith("checkpoint-"))
    assert len(files) == 1, f"rank 0 should have saved once on stop: {sorted(folder.iterdir())}"
    with open(files[0], "rb") as f:
        state: dict[str, Any] = pickle.load(f)
    return state
