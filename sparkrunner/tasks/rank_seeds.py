"""A barrier task's ranks forked from the task's own Python worker, for a direct run without an executor zygote.

Spark's Python worker has imported pyspark, cloudpickle and sparkrunner's task side, and runs one thread, when a
barrier task begins. The task forks one seed per rank there, before it opens anything of the run (held ports, its
channel connections, its threads), and each seed imports sparkrunner's rank side while the task exchanges
addresses. Given its rank's argv and environment, a seed becomes the rank (`system.forked_rank.become_rank`), as
a zygote's fork does: a rank starts in milliseconds instead of a Python start and its imports (docs/benchmarks.md,
the launch anatomy). A seed dies with its worker, and one that is not needed is killed when the task ends.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any

from sparkrunner.channel import messages as m
from sparkrunner.system import gpus, processes
from sparkrunner.system.forked_rank import become_rank, forget_sparkrunner
from sparkrunner.timeouts import TIMINGS

RANK_MODULE = "sparkrunner.ranks.bootstrap"
"""What a seed imports while it waits: the module a rank runs (named, not imported, here: a task loads no rank
code)."""


_IMPORT_BEGAN = "sparkrunner.common.import_began"
_NOT_IN_A_RANK = (
    *("tasks", "workers", "driver", "placement", "observe", "compat"),  # folders
    *("runner", "cli", "check", "options"),  # top-level modules
)
"""Where sparkrunner's task- and driver-side modules are (their folder or module name): a rank loads none."""


def import_time_variables(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of `env` that sparkrunner's modules read when imported (its timings' overrides)."""
    return {timing.env: env[timing.env] for timing in TIMINGS.values() if timing.env in env}


class RankSeeds:
    """`count` seeds forked now, each waiting to become one rank of this task (`take`); `close` ends the rest.
    `imports_env`: the ranks' import-time variables (`import_time_variables`), under which the seeds import."""

    def __init__(self, count: int, imports_env: dict[str, str]) -> None:
        self._seeds: list[tuple[int, int, int]] = []
        """Each seed's pid, the control pipe's write end and the output's read end."""
        for _ in range(count):
            earlier = [fd for _, control, output in self._seeds for fd in (control, output)]
            self._seeds.append(_fork_seed(imports_env, earlier))

    def take(self, argv: list[str], env: Mapping[str, str], echo_to: int | None) -> SeededRank | None:
        """A seed made the rank `argv` with `env` (in this process's working folder); None when none is left."""
        if not self._seeds:
            return None
        pid, control, output = self._seeds.pop(0)
        request = {"argv": list(argv), "env": dict(env), "cwd": os.getcwd()}
        try:
            with os.fdopen(control, "wb") as pipe:
                pipe.write(json.dumps(request).encode())
        except OSError:  # the seed is gone (killed with its memory?): this rank starts cold
            _end_seed(pid, output)
            return None
        return SeededRank(pid, processes.OutputTail(output, echo_to))

    def close(self) -> None:
        """Kill the seeds no rank took (the task failed before its ranks started, or started them otherwise)."""
        while self._seeds:
            pid, control, output = self._seeds.pop()
            os.close(control)
            _end_seed(pid, output)


def _end_seed(pid: int, output: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    os.close(output)


def _fork_seed(imports_env: dict[str, str], earlier: list[int]) -> tuple[int, int, int]:
    """A seed forked now; `earlier`: this task's ends of the seeds forked before, which it closes (a seed still
    holding another's control pipe would keep that one from seeing its request end)."""
    control_read, control_write = os.pipe()
    output_read, output_write = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            for fd in (control_write, output_read, *earlier):
                os.close(fd)
            code = _seed(parent, control_read, output_write, imports_env)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(control_read)
    os.close(output_write)
    return pid, control_write, output_read


def can_seed() -> bool:
    """Whether this Python worker may fork seeds: it runs one thread (a fork copies only the calling one; a
    library imported by an earlier task, TensorFlow say, may have started more) and no task of it initialised CUDA
    (a forked child cannot use it then)."""
    return processes.native_threads() == 1 and not gpus.cuda_initialised()


def _seed(parent: int, control: int, output: int, imports_env: dict[str, str]) -> int:
    """In the forked seed: leave the worker's state, import the rank's side, wait for the rank to become."""
    processes.die_with_parent()
    if os.getppid() != parent:  # the worker died before the line above
        return 0
    _leave_the_worker()
    _import_rank_side(imports_env)
    request = _read_request(control)
    if request is None:
        return 0
    same = import_time_variables(request.env) == imports_env
    if same:
        began: Any = sys.modules[_IMPORT_BEGAN]  # the rank starts now (the worker imported it long ago)
        began.AT = time.monotonic()
    return become_rank(request, output, forget=not same)


def _leave_the_worker() -> None:
    """What of Spark's Python worker a rank started cold would not have: its signal handlers, its fault handler
    (writing to the worker's log) and its task context (whose socket is the worker's)."""
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as the interpreter sets it
    faulthandler.disable()
    taskcontext = sys.modules.get("pyspark.taskcontext")
    if taskcontext is not None:
        taskcontext.TaskContext._taskContext = None
        taskcontext.BarrierTaskContext._taskContext = None


def _import_rank_side(imports_env: dict[str, str]) -> None:
    """Import what the rank's module imports. The worker's sparkrunner modules stay when the worker imported them
    under the ranks' import-time variables (the usual case: no timing is overridden), but for the task's and the
    driver's, which no rank loads; otherwise all go, and are imported again under the ranks' variables."""
    if import_time_variables(os.environ) == imports_env:
        forget_sparkrunner(_NOT_IN_A_RANK)
    else:
        for name in {timing.env for timing in TIMINGS.values()}:
            os.environ.pop(name, None)
        os.environ.update(imports_env)
        forget_sparkrunner()
    importlib.import_module(RANK_MODULE)
    del sys.modules[
        RANK_MODULE
    ]  # what it imported stays; the rank runs it as __main__, anew (as runpy wants)


def _read_request(control: int) -> m.Fork | None:
    """The rank to become, once the task wrote it and closed the pipe; None when it closed it empty."""
    data = b""
    while chunk := os.read(control, 1 << 16):
        data += chunk
    os.close(control)
    if not data:
        return None
    request = json.loads(data)
    return m.Fork(request["argv"], request["env"], request["cwd"])


class SeededRank(processes.LocalRank):
    """A rank a seed became, a child of this task's process: its exit status is this process's to collect."""

    def __init__(self, pid: int, output: processes.OutputTail) -> None:
        self.pid, self.output = pid, output
        self._code: int | None = None
        self._polling = threading.Lock()

    def poll(self) -> int | None:
        with self._polling:
            if self._code is None:
                done, status = os.waitpid(self.pid, os.WNOHANG)
                if done:
                    self._code = os.waitstatus_to_exitcode(status)
            return self._code
