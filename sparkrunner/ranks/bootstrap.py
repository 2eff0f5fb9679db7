"""The rank bootstrap (`python -m sparkrunner.ranks.bootstrap`): fetch the payload, run it, report back.

The worker streams its own stdout/stderr (file descriptors 1 and 2, so C libraries are included) to the
driver line by line, and kills itself and its children when the driver says abort or disappears.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import cloudpickle

from sparkrunner import channel, frameworks
from sparkrunner.channel import launch_times
from sparkrunner.channel import messages as m
from sparkrunner.channel.payload import RemoteError, loads, user_frames
from sparkrunner.common import import_began, version
from sparkrunner.common.checkpoint_dir import verify_on_rank
from sparkrunner.common.environment import Env
from sparkrunner.errors import CheckpointDirError, ResultNotPicklableError
from sparkrunner.frameworks import deepspeed_env, horovod_env, jax_env, tf_env
from sparkrunner.ranks import (
    anatomy,
    barrier_context,
    checkpoints,
    fast_exit,
    graceful_stop,
    torch_guard,
    trainer_progress,
    warm,
)
from sparkrunner.ranks import api as rank
from sparkrunner.ranks.output_relay import OutputRelay
from sparkrunner.ranks.thread_dump import thread_dump
from sparkrunner.ranks.warm_relay import WarmRelay
from sparkrunner.system import gpus, network, processes, secret_files
from sparkrunner.timeouts import RESULT_ACK_TIMEOUT_S
from sparkrunner.topology import Topology

OpenRelay = Callable[[tuple[str, int], bytes], OutputRelay | WarmRelay]
"""Start forwarding this rank's output to the run's channel; the relay's `stop()` waits until all was sent."""


def _die(code: int) -> None:
    """Take this rank and everything it started down at once."""
    processes.kill_all(processes.descendants(os.getpid()))
    os._exit(code)


class DriverWatch:
    """Reads driver messages in the background: an abort or a lost driver ends this rank at once."""

    def __init__(self, conn: channel.Connection) -> None:
        self._conn = conn
        self.acknowledged = threading.Event()
        threading.Thread(target=self._watch, name="sparkrunner-driver-watch", daemon=True).start()

    def _watch(self) -> None:
        try:
            while True:
                match message := m.receive(self._conn):
                    case m.Ack():
                        self.acknowledged.set()
                        return
                    case m.Abort():
                        _die(1)
                    case m.Stop(reason=reason, peers_save=peers_save):
                        graceful_stop.request_stop(reason, peers_save)
                    case m.DumpStacks(request=request):
                        m.send(self._conn, m.Stacks(request=request, **thread_dump()))
                    case m.BarrierRelease():
                        barrier_context.deliver(message)
        except channel.ChannelError:
            if not self.acknowledged.is_set():
                _die(1)


_SPARKRUNNER_MISSING = re.compile(r"(?:module|No module named) 'sparkrunner[.']")
"""How unpickling names a sparkrunner module, or a module's attribute, that this rank's sparkrunner lacks."""


def _load_call(payload: bytes) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    try:
        return loads(payload)
    except Exception as exc:
        raise RuntimeError(
            f"the training function could not be loaded on this rank ({type(exc).__name__}: {exc}). "
            + _why_unloadable(exc)
        ) from exc


def _why_unloadable(exc: Exception) -> str:
    """Advice for a payload this rank cannot unpickle: another sparkrunner than the driver's, or a user module
    the rank cannot import."""
    if _SPARKRUNNER_MISSING.search(str(exc)):
        return (
            f"The driver's sparkrunner differs from this rank's ({version.__version__} at "
            f"{os.path.dirname(os.path.dirname(version.__file__))}): install the same sparkrunner on the driver and on every "
            "executor (a cluster image or library built from the driver's version)."
        )
    return (
        "Functions from your own modules are pickled by reference: make that module importable where the ranks "
        "run (e.g. SparkContext.addPyFile), or define the function in the notebook or main script."
    )


def _outcome(payload: bytes, returns_value: bool) -> m.Result | m.Error:
    try:
        verify_on_rank()
        main, args, kwargs = _load_call(payload)
    except (RuntimeError, CheckpointDirError) as exc:
        return m.Error(RemoteError.capture(exc))
    try:
        value = main(*args, **kwargs)
        checkpoints.wait_for_background_save(graceful_stop.grace_seconds())  # its error is the rank's
    except BaseException as exc:  # report everything, SystemExit and KeyboardInterrupt included
        _finish_background_save()
        exc = exc.with_traceback(user_frames(exc.__traceback__))
        return m.Error(RemoteError.capture_user_error(tf_env.explained(exc)))
    if not returns_value:
        return m.Result(None)
    try:
        return m.Result(cloudpickle.dumps(value))
    except Exception as exc:
        note = ResultNotPicklableError(
            f"the return value (a {type(value).__name__}) cannot be pickled: {exc}"
        )
        return m.Error(RemoteError.capture(note))


def _finish_background_save() -> None:
    """`main` failed: its checkpoint save in flight is still written (the next attempt resumes from it); the
    error reported stays `main`'s."""
    try:
        checkpoints.wait_for_background_save(graceful_stop.grace_seconds())
    except CheckpointDirError as exc:
        rank.log_to_driver(f"the checkpoint being saved when main failed was lost: {exc}")


def _wire_frameworks_under_mpirun() -> None:
    """mpirun gives every rank the same environment: derive this rank's TF_CONFIG, torch variables, GPUs..."""
    encoded = os.environ.get(Env.TOPOLOGY)
    if encoded:
        topology = Topology.from_json(encoded)
        index = rank.rank_context().rank
        os.environ.update(frameworks.mpi_rank_environment(topology, index))
        if Env.TASK_GPUS in os.environ:  # a Spark run: this rank's own task's GPUs, not its host's
            os.environ[Env.TASK_GPUS] = ",".join(topology.peers[index].gpus)
        for name, value in network.socket_environment(topology.peers[index].host).items():
            os.environ.setdefault(name, value)  # an interface the user or the cluster chose wins


def _die_with_launcher() -> None:
    """End with the process that started this rank: mpirun does not take its ranks down when it is killed
    (a lost executor kills it), and an orphaned rank would outlive its run (direct ranks are armed already)."""
    processes.die_with_parent()


def main() -> int:
    imports_done = time.monotonic()
    _die_with_launcher()
    graceful_stop.install(
        _die, lambda: rank.send_to_driver(m.GraceWanted()), checkpoints.wait_for_background_save
    )
    rank.adopt_mpi_environment()
    _wire_frameworks_under_mpirun()
    gpu_warning = gpus.pin_rank_gpus(os.environ)
    jax_env.register_on_import()
    deepspeed_env.remove_stale_build_locks_on_import()
    barrier_context.install_on_import()
    trainer_progress.install()
    torch_guard.install()
    me = rank.rank_context()
    tf_env.announce_legacy_keras(me.rank, rank.log_to_driver)
    host, port = os.environ[Env.DRIVER].rsplit(":", 1)
    secret = secret_files.take_run_secret(me.local_rank)
    task = os.environ.get(Env.STARTED_BY_TASK)
    launch = launch_times.rank_launch(import_began.AT, imports_done)
    hello = m.Hello(me.rank, socket.gethostname(), os.getpid(), int(task) if task else None, launch)
    echo = os.environ.get(Env.ECHO_OUTPUT) == "1"
    if os.environ.get(Env.WARM) == "1":  # a warm session's rank: DRIVER is the session's home
        relays = WarmRelay(me.rank, echo)
        run = functools.partial(_run_once, hello=hello, gpu_warning=gpu_warning, open_relay=relays.open_run)
        return warm.serve((host, int(port)), secret, hello, run, _die)
    cold = functools.partial(OutputRelay, rank=me.rank, echo=echo)
    return _run_once((host, int(port)), secret, hello, gpu_warning, cold)


def _run_once(
    driver: tuple[str, int], secret: bytes, hello: m.Hello, gpu_warning: str | None, open_relay: OpenRelay
) -> int:
    """One run: connect to its driver channel, fetch the payload, run it, report back; the exit code."""
    relay = open_relay(driver, secret)
    conn = channel.connect(driver, secret)
    m.send(conn, launch_times.at_connect(hello))
    if gpu_warning:
        m.send(conn, m.RankWarning(gpu_warning))
    first = m.receive(conn)
    while isinstance(first, m.DumpStacks):  # asked before the payload came: nothing of the user's runs yet
        first = m.receive(conn)
    if not isinstance(first, m.Payload):
        return 1
    barrier_context.new_run()
    watch = DriverWatch(conn)
    rank.attach(conn)
    anatomy.start()
    try:
        outcome = _outcome(first.call, hello.rank == 0 or os.environ.get(Env.RESULTS) == "all")
        anatomy.finish()
        timeline = horovod_env.finish_timeline()
        if timeline is not None:
            rank.send_file_to_driver(timeline)
    finally:
        relay.stop()
    m.send(conn, outcome)
    watch.acknowledged.wait(RESULT_ACK_TIMEOUT_S)
    rank.attach(None)
    conn.close()
    return 0 if isinstance(outcome, m.Result) else 1


if __name__ == "__main__":
    fast_exit.exit_now(main())  # reported already: skip the seconds of module teardown mpirun would wait for
