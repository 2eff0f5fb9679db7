"""The rank bootstrap (`python -m sparkrunner.worker`): fetch the payload, run it, report back.

The worker streams its own stdout/stderr (file descriptors 1 and 2, so C libraries are included) to the
driver line by line, and kills itself and its children when the driver says abort or disappears.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

import cloudpickle

from sparkrunner import channel, diagnostics, fast_exit, frameworks, gpus, handover, network, processes, rank
from sparkrunner.errors import CheckpointDirError
from sparkrunner.frameworks import horovod_env, jax_env
from sparkrunner.output_relay import OutputRelay
from sparkrunner.payload import RemoteError, loads
from sparkrunner.protocol import Env, Message
from sparkrunner.recovery import graceful_stop
from sparkrunner.recovery.checkpoint_dir import verify_on_rank
from sparkrunner.topology import Topology

_ACK_TIMEOUT_S = 30.0


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
                kind, data = self._conn.recv()
                if kind == Message.ACK:
                    self.acknowledged.set()
                    return
                if kind == Message.ABORT:
                    _die(1)
                if kind == Message.STOP:
                    graceful_stop.request_stop()
                if kind == Message.DUMP_STACKS:
                    self._conn.send(Message.STACKS, {**data, **diagnostics.thread_dump()})
        except channel.ChannelError:
            if not self.acknowledged.is_set():
                _die(1)


def _load_call(payload: bytes) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    try:
        return loads(payload)
    except Exception as exc:
        raise RuntimeError(
            f"the training function could not be loaded on this rank ({type(exc).__name__}: {exc}). Functions "
            f"from your own modules are pickled by reference: make that module importable where the ranks run "
            f"(e.g. SparkContext.addPyFile), or define the function in the notebook or main script."
        ) from exc


def _outcome(payload: bytes, returns_value: bool) -> tuple[str, Any]:
    try:
        verify_on_rank()
        main, args, kwargs = _load_call(payload)
    except (RuntimeError, CheckpointDirError) as exc:
        return Message.ERROR, RemoteError.capture(exc)
    try:
        value = main(*args, **kwargs)
    except BaseException as exc:  # report everything, SystemExit and KeyboardInterrupt included
        return Message.ERROR, RemoteError.capture_user_error(exc)
    if not returns_value:
        return Message.RESULT, None
    try:
        return Message.RESULT, cloudpickle.dumps(value)
    except Exception as exc:
        note = TypeError(f"the return value (a {type(value).__name__}) cannot be pickled: {exc}")
        return Message.ERROR, RemoteError.capture(note)


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


def main() -> int:
    graceful_stop.install(_die)
    rank.adopt_mpi_environment()
    _wire_frameworks_under_mpirun()
    gpu_warning = gpus.pin_rank_gpus(os.environ)
    jax_env.register_on_import()
    me = rank.rank_context()
    host, port = os.environ[Env.DRIVER].rsplit(":", 1)
    secret = handover.take_run_secret(me.local_rank)
    relay = OutputRelay((host, int(port)), secret, me.rank, echo=os.environ.get(Env.ECHO_OUTPUT) == "1")
    conn = channel.connect((host, int(port)), secret)
    task = os.environ.get(Env.STARTED_BY_TASK)
    hello = {"rank": me.rank, "host": socket.gethostname(), "pid": os.getpid(), "task": task and int(task)}
    conn.send(Message.HELLO, hello)
    if gpu_warning:
        conn.send(Message.WARNING, gpu_warning)
    kind, payload = conn.recv()
    while kind == Message.DUMP_STACKS:  # asked before the payload came: nothing of the user's runs yet
        kind, payload = conn.recv()
    if kind != Message.PAYLOAD:
        return 1
    watch = DriverWatch(conn)
    rank.attach(conn)
    try:
        kind, data = _outcome(payload, me.rank == 0 or os.environ.get(Env.RESULTS) == "all")
        timeline = horovod_env.finish_timeline()
        if timeline is not None:
            rank.send_file_to_driver(timeline)
    finally:
        relay.stop()
    conn.send(kind, data)
    watch.acknowledged.wait(_ACK_TIMEOUT_S)
    rank.attach(None)
    conn.close()
    return 0 if kind == Message.RESULT else 1


if __name__ == "__main__":
    fast_exit.exit_now(main())  # reported already: skip the seconds of module teardown mpirun would wait for
