"""Horovod Elastic's own code (``@hvd.elastic.run``, ``hvd.elastic.TorchState``, ``ObjectState``) on sparkrunner's
restarts, in each rank of `sparkrunner.compat.horovod_spark.run_elastic`.

Horovod keeps a committed state in host memory and, when a worker is lost or added, rendezvouses again in place
and restores it. Here a lost rank ends the attempt and the run starts again at the size the cluster has now, so
the state has to outlive the processes: `state.commit()` also writes the committed state as the run's
checkpoint, and the first ``sync`` of a state in a later attempt restores the last commit from it and calls the
reset callbacks (`hvd.size()` is then the new size) before Horovod syncs it from rank 0. A commit while the
driver asks the ranks to stop for a rescale ends the function on every rank (rank 0 decides, by Horovod's own
broadcast), and the run restarts at the larger size from that commit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from sparkrunner.ranks.checkpoints import load_checkpoint, save_checkpoint
from sparkrunner.ranks.graceful_stop import stopping


class _Rescale(Exception):
    """Raised by a commit that every rank saw with a rescale asked for: the function ends, the run restarts."""


def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with Horovod's elastic states tied to the run's checkpoints; None when the
    function ended at a commit for a rescale (the run goes on at the new size)."""
    with _hooked():
        try:
            return fn(*args, **kwargs)
        except _Rescale:
            return None


@contextlib.contextmanager
def _hooked() -> Iterator[None]:
    """Horovod's `State.commit` and `State.sync` replaced by `_commit` and `_sync` while the function runs, and
    its worker notification service (Horovod's elastic driver's channel to the workers) left unstarted."""
    from horovod.common.elastic import State
    from horovod.runner.elastic.worker import WorkerNotificationManager

    originals = {
        (State, "commit"): State.commit,
        (State, "sync"): State.sync,
        (WorkerNotificationManager, "init"): WorkerNotificationManager.init,
    }
    State.commit = _commit
    State.sync = _syncing(State.sync)
    WorkerNotificationManager.init = lambda self, *args, **kwargs: None
    try:
        yield
    finally:
        for (owner, name), original in originals.items():
            setattr(owner, name, original)


def _commit(state: Any) -> None:
    """Horovod's commit (save to host memory, check for host updates), then the saved state as the run's
    checkpoint; a rescale asked for (as rank 0 saw it, on every rank) ends the function after it."""
    state.save()
    # background=True once checkpoints save in the background
    save_checkpoint(_snapshot(state))
    state.check_host_updates()
    if state._bcast_object(stopping()):
        raise _Rescale()


def _syncing(sync: Callable[[Any], None]) -> Callable[[Any], None]:
    """Horovod's `sync`, first restoring the last commit of an earlier attempt (once per state object)."""

    def synced(state: Any) -> None:
        if not getattr(state, "_sparkrunner_restored", False):
            state._sparkrunner_restored = True
            _restore(state)
        sync(state)

    return synced


def _restore(state: Any) -> None:
    """The run's last commit into `state`, and its reset callbacks called, when an earlier attempt committed."""
    saved = load_checkpoint(map_location="cpu")
    if saved is None:
        return
    for name, handler in getattr(state, "_handlers", {}).items():
        handler.value.load_state_dict(saved["handlers"][name])
        handler.save()
    state._saved_state = saved["objects"]
    state.restore()
    state.on_reset()


def _snapshot(state: Any) -> dict[str, Any]:
    """What a commit saved: the plain objects (`ObjectState`) and each handled object's ``state_dict()``
    (`TorchState`'s models, optimizers and samplers)."""
    handlers = getattr(state, "_handlers", {})
    return {
        "objects": dict(state._saved_state),
        "handlers": {name: handler.value.state_dict() for name, handler in handlers.items()},
    }
