"""Horovod Elastic's own code (``@hvd.elastic.run``, ``hvd.elastic.TorchState``, ``ObjectState``) on sparkrunner's
restarts, in each rank of `sparkrunner.compat.horovod_spark.run_elastic`.

Horovod keeps a committed state in host memory and, when a worker is lost or added, rendezvouses again in place
and restores it. Here a lost rank ends the attempt and the run starts again at the size the cluster has now, so
the state has to outlive the processes: `state.commit()` also writes the committed state as the run's
checkpoint, and when ``@hvd.elastic.run`` starts on a state in a later attempt the last commit is restored from
it and the reset callbacks are called (`hvd.size()` is then the new size), before Horovod syncs it from rank 0.
A commit while the driver asks the ranks to stop for a rescale ends the function on every rank (rank 0
decides, by Horovod's own broadcast), and the run restarts at the larger size from that commit.
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
    """While the function runs: Horovod's `State.commit` is `_commit`; the registration of a state with the worker
    notification manager (the first thing ``@hvd.elastic.run`` does, before it syncs the state) restores the
    last commit first; and the manager's service (Horovod's elastic driver's channel to the workers) is not
    started."""
    from horovod.common.elastic import State
    from horovod.runner.elastic.worker import WorkerNotificationManager

    originals = {
        (State, "commit"): State.commit,
        (WorkerNotificationManager, "init"): WorkerNotificationManager.init,
        (WorkerNotificationManager, "register_listener"): WorkerNotificationManager.register_listener,
    }
    State.commit = _commit
    WorkerNotificationManager.init = lambda self, *args, **kwargs: None
    WorkerNotificationManager.register_listener = _restoring(WorkerNotificationManager.register_listener)
    try:
        yield
    finally:
        for (owner, name), original in originals.items():
            setattr(owner, name, original)


def _commit(state: Any) -> None:
    """Horovod's commit (save to host memory, check for host updates), then the saved state as the run's
    checkpoint; a rescale asked for (as rank 0 saw it, on every rank) ends the function after it."""
    state.save()
    save_checkpoint(_snapshot(state), background=True)  # copied now, written while training goes on
    state.check_host_updates()
    if state._bcast_object(stopping()):
        raise _Rescale()


def _restoring(register: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """Horovod's `register_listener`, after restoring the state from an earlier attempt's last commit (once per
    state object)."""

    def restored_first(manager: Any, state: Any) -> None:
        if not getattr(state, "_sparkrunner_restored", False):
            state._sparkrunner_restored = True
            _restore(state)
        register(manager, state)

    return restored_first


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
