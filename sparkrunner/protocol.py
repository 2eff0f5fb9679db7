"""The wire protocol in one place: message kinds on sparkrunner's channels and its environment variables.

Every module that sends, receives or sets one of these uses the names here, never a bare string.
"""

from __future__ import annotations


class Message:
    """Kinds of the messages framed by `sparkrunner.channel` (``conn.send(kind, data)``)."""

    # rank -> driver
    HELLO = "hello"  # {"rank", "host", "pid"}: the first message of every rank
    OUTPUT = "output"  # (stream name, line): a line the rank printed
    LOG = "log"  # str: `log_to_driver`
    PROGRESS = "progress"  # dict: `report_progress`
    FILE = "file"  # {"name", "data"}: `send_file_to_driver`
    RESULT = "result"  # pickled return value (rank 0) or None
    ERROR = "error"  # `payload.RemoteError`
    # driver -> rank
    PAYLOAD = "payload"  # the pickled (fn, args, kwargs)
    ACK = "ack"  # the driver has the rank's outcome: the rank may exit
    ABORT = "abort"  # the run is over: the rank kills itself and its children now
    # mpirun's rsh agent <-> a barrier task's agent
    EXEC = "exec"  # {"argv"}: run this command on the agent's host
    EXIT = "exit"  # {"code", "tail"}: how that command ended


class Env:
    """Environment variables sparkrunner sets for the processes it starts."""

    RUN_ID = "SPARKRUNNER_RUN_ID"  # on every process of a run: how leftovers are found
    DRIVER = "SPARKRUNNER_DRIVER"  # "host:port" of the driver channel
    SECRET_DIR = "SPARKRUNNER_SECRET_DIR"  # folder of one-shot secret files (`handover.py`); holds no secret
    ECHO_OUTPUT = "SPARKRUNNER_ECHO_OUTPUT"  # "1": also copy the rank's output to its own stdout/stderr
    TOPOLOGY = "SPARKRUNNER_TOPOLOGY"  # set by the mpirun launcher: peers in mpirun's rank order
    TASK_AGENTS = "SPARKRUNNER_TASK_AGENTS"  # {host: port} of the task agents (mpirun's rsh agent reads it)
    STARTED_BY_TASK = "SPARKRUNNER_STARTED_BY_TASK"  # index of the barrier task that started it (its clean-up
    # ends it): the task's own rank, its mpirun and what that starts locally, or what its task agent started
    PORT_RANGE = "SPARKRUNNER_PORT_RANGE"  # "LOW-HIGH": every port sparkrunner opens comes from this range
