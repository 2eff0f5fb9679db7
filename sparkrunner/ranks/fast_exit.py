"""End a rank process without the interpreter's teardown.

Once a rank has reported, only its exit is left, and mpirun (or the barrier task) waits for it. With torch or
TensorFlow loaded, Python's module teardown takes seconds (measured 5-6 s against 0.2 s for a bare
`mpirun -np 2` of a torch+Horovod rank on a loaded 2-core machine). Everything a normal exit does that anyone
can observe still happens, in the same order: non-daemon threads are joined, atexit handlers run (Horovod's
shutdown among them), MPI is finalized for mpi4py, and stdio is flushed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading


def _join_non_daemon_threads() -> None:
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()


def _finalize_mpi4py() -> None:
    """mpi4py finalizes MPI in a C-level exit hook that os._exit skips; mpirun counts a rank that exits
    without MPI_Finalize as failed."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()


def exit_now(code: int) -> None:
    """Exit with `code` after what a normal exit does that others can see, skipping module teardown."""
    _join_non_daemon_threads()
    atexit._run_exitfuncs()
    _finalize_mpi4py()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
