"""Time a rank's waits in collectives, without a change to its code: torch DDP, torch.distributed, Horovod.

Patched when (and if) the rank imports the framework, so a rank that never does pays nothing:

- torch DDP: a communication hook around the default allreduce (or around the user's own hook, when `main`
  registers one). Buckets are reduced in the background while backward still computes; what the rank waits
  for is the time from its last bucket being ready (its backward is done) to that bucket's reduction being
  done, which is what is counted. A built-in C++ hook (``register_builtin_comm_hook``) cannot be timed.
- ``torch.distributed``'s blocking collectives (``all_reduce``, ``broadcast``, ``barrier``, ...): their call.
- Horovod (``horovod.torch``): ``synchronize``, where the optimizer and blocking collectives wait.

TensorFlow's collectives run inside its graph, where Python cannot see them: their time counts as compute.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from sparkrunner.frameworks.after_import import after_import

Record = Callable[[float], None]

_C10D = "torch.distributed.distributed_c10d"
_DDP = "torch.nn.parallel.distributed"
_HOROVOD = "horovod.torch.mpi_ops"
_BLOCKING = ("all_reduce", "broadcast", "barrier", "all_gather", "all_gather_into_tensor", "reduce_scatter",
             "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "reduce", "gather", "scatter")  # fmt: skip


def install(record: Record) -> None:
    """Report every collective wait to `record(seconds)` from now on."""
    patches = {_C10D: _patch_c10d, _DDP: _patch_ddp, _HOROVOD: _patch_horovod}
    for name, patch in patches.items():
        after_import(name, functools.partial(patch, record=record))


def _timed(call: Callable[..., Any], record: Record, blocking: Callable[..., bool]) -> Callable[..., Any]:
    """`call`, with the time of each call for which ``blocking(*args, **kwargs)`` reported to `record`."""

    @functools.wraps(call)
    def timed(*args: Any, **kwargs: Any) -> Any:
        if not blocking(*args, **kwargs):
            return call(*args, **kwargs)
        started = time.monotonic()
        try:
            return call(*args, **kwargs)
        finally:
            record(time.monotonic() - started)

    return timed


def _not_async(*args: Any, async_op: bool = False, **kwargs: Any) -> bool:
    return not async_op


def _patch_c10d(module: ModuleType, record: Record) -> None:
    for name in _BLOCKING:
        if hasattr(module, name):
            setattr(module, name, _timed(getattr(module, name), record, _not_async))


def _patch_horovod(module: ModuleType, record: Record) -> None:
    module.synchronize = _timed(module.synchronize, record, lambda *a, **k: True)  # type: ignore[attr-defined]


def _patch_ddp(module: ModuleType, record: Record) -> None:
    """DDP: time the user's hook if `main` registers one, else register a timed default allreduce at the
    first forward (hooks must be in place before the first backward)."""
    ddp = module.DistributedDataParallel
    register, forward = ddp.register_comm_hook, ddp.forward

    def register_comm_hook(self: Any, state: object, hook: Callable[..., Any]) -> None:
        self._sparkrunner_timed = True
        register(self, state, _timed_hook(hook, record))

    def timed_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "_sparkrunner_timed", False):
            self._sparkrunner_timed = True
            if not self._comm_hooks and getattr(self, "reducer", None) is not None:
                register(self, self.process_group, _timed_mean_allreduce(record))
        return forward(self, *args, **kwargs)

    builtin = ddp._register_builtin_comm_hook

    def register_builtin_comm_hook(self: Any, comm_hook_type: Any) -> None:
        self._sparkrunner_timed = True  # a C++ hook cannot be wrapped, and a DDP takes one hook only
        builtin(self, comm_hook_type)

    ddp.register_comm_hook = functools.wraps(register)(register_comm_hook)
    ddp._register_builtin_comm_hook = functools.wraps(builtin)(register_builtin_comm_hook)
    ddp.forward = functools.wraps(forward)(timed_forward)


def leave_untimed(ddp: Any) -> None:
    """Keep DDP's own C++ reduction for the DistributedDataParallel `ddp` (call before its first forward): no
    Python hook runs, and its waits count as compute. The anatomy's overhead bench compares the two paths."""
    ddp._sparkrunner_timed = True


def _timed_mean_allreduce(record: Record) -> Callable[..., Any]:
    """DDP's default reduction (the bucket's mean over the group, as ``default_hooks.allreduce_hook``) in one
    collective and one callback per bucket, reporting the rank's wait for its last bucket: the hook runs every
    step, so it calls the process group directly, without `torch.distributed`'s checks or a second callback."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    @functools.wraps(default_hooks.allreduce_hook)  # its signature: DDP checks a hook's annotations
    def hook(group: Any, bucket: Any) -> Any:
        ready, last = time.monotonic(), bucket.is_last()
        future = group.allreduce([bucket.buffer().div_(group.size())]).get_future()

        def done(reduced: Any) -> Any:
            if last:
                record(max(time.monotonic() - ready, 0.0))
            return reduced.value()[0]

        return future.then(done)

    return hook


def _timed_hook(hook: Callable[..., Any], record: Record) -> Callable[..., Any]:
    """A DDP communication hook like `hook` that reports the rank's wait for its last bucket's reduction."""

    def done(future: Any, ready: float) -> Any:
        record(max(time.monotonic() - ready, 0.0))
        return future.value()

    @functools.wraps(hook)
    def timed(state: object, bucket: Any) -> Any:
        ready, last = time.monotonic(), bucket.is_last()
        future = hook(state, bucket)
        return future.then(functools.partial(done, ready=ready)) if last else future

    return timed
