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
    SECRET = "SPARKRUNNER_SECRET"  # the run secret (hex); the rank removes it from its environment
    ECHO_OUTPUT = "SPARKRUNNER_ECHO_OUTPUT"  # "1": also copy the rank's output to its own stdout/stderr
    TOPOLOGY = "SPARKRUNNER_TOPOLOGY"  # set by the mpirun launcher: peers in mpirun's rank order
    TASK_AGENTS = "SPARKRUNNER_TASK_AGENTS"  # {host: port} of the task agents (mpirun's rsh agent reads it)
    TASK_AGENT_KEY = "SPARKRUNNER_TASK_AGENT_KEY"  # the task agents' key (hex)
    STARTED_BY_TASK = "SPARKRUNNER_STARTED_BY_TASK"  # index of the barrier task whose agent started it
    DRIVER_HOST = "SPARKRUNNER_DRIVER_HOST"  # set by the user: the driver address ranks dial (Spark Connect)
    RESULTS = "SPARKRUNNER_RESULTS"  # "all": every rank sends its return value (run_all); else rank 0 only
