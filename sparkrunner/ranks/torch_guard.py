"""A guard against a deadlock of torch's at the end of a Gloo process group (torch >= 2.12), installed in every rank.

Every ``backward()`` stashes a copy of the Python context in the calling thread's C++ thread-local store
(``torch.autograd.graph._engine_run_backward``: ``_stash_obj_in_tls("context", ...)``) and removes it when the backward
ends. A collective launched during the backward (DDP's gradient all-reduce on Gloo) captures that store with its work,
so its copy can be the context's last reference once the backward removed its own: the Gloo worker thread that drops
the finished work then drops the Python object, which takes the GIL. When the process group goes at that moment from
a thread that holds the GIL (the DDP model's reducer freed as the function returns: ``~ProcessGroupGloo`` joins its
workers without releasing it), neither thread moves: the rank hangs in its last line, after its collectives. Measured
(torch 2.13, gloo, one process, 30 process groups a loop): 1-3 loops of 5 hung; more often when torch._dynamo was
imported before the process group, as in a rank forked from a zygote that preloaded it. Upstream: pytorch #180700,
#182083 (the same race with the autograd device threads).

The guard keeps the main thread's stashed context until its next backward replaces it: then the thread that drops
the context's last reference is the main thread, holding the GIL already, never a Gloo worker. Other threads remove
theirs as torch does (a C++ thread's thread-local store outlives its Python thread, and its end would take the GIL).
"""

from __future__ import annotations

import threading
from types import ModuleType

from sparkrunner.frameworks.after_import import after_import


def install() -> None:
    """Guard torch's backward once the rank imports torch (now, if it has: a rank forked from a zygote)."""
    after_import("torch", _keep_main_thread_backward_context)


def _keep_main_thread_backward_context(torch: ModuleType) -> None:
    native = torch._C
    remove = getattr(native, "_remove_obj_from_tls", None)
    if remove is None or getattr(remove, "sparkrunner_guard", False):  # a torch without the stash, or guarded
        return

    def remove_off_the_main_thread(key: str) -> None:
        if threading.current_thread() is not threading.main_thread():
            remove(key)

    remove_off_the_main_thread.sparkrunner_guard = True  # type: ignore[attr-defined]
    native._remove_obj_from_tls = remove_off_the_main_thread
