"""The wire protocol in one place: the kinds of the messages on sparkrunner's channels.

Every module that sends or receives one of these uses the names here, never a bare string.
"""

from __future__ import annotations

from typing import Any

TaskEntries = list[dict[str, Any]]
"""One barrier task's entries: one {"host", "ports", "gpus"} per rank it starts."""


class Message:
    """Kinds of the messages framed by `sparkrunner.channel` (``conn.send(kind, data)``)."""

    # rank -> driver
    HELLO = "hello"  # {"rank", "host", "pid", "task"}: the first message of every rank
    OUTPUT_STREAM = "output_stream"  # {"rank"}: first message of a rank's output relay (its own connection)
    OUTPUT = "output"  # (stream name, [line, ...]): lines the rank printed (one message per read)
    OUTPUT_UPDATE = "output_update"  # (stream name, text): the latest `\r`-terminated progress update
    STACKS = "stacks"  # {"request", "pid", "host", "threads"}: the answer to DUMP_STACKS
    LOG = "log"  # str: `log_to_driver`
    WARNING = "warning"  # str: something the person should know (e.g. a host's GPUs left unused)
    PROGRESS = "progress"  # dict: `report_progress`
    FILE = "file"  # {"name", "data"}: `send_file_to_driver`
    RESULT = "result"  # pickled return value (rank 0) or None
    ERROR = "error"  # `payload.RemoteError`
    # driver -> rank
    PAYLOAD = "payload"  # the pickled (fn, args, kwargs)
    ACK = "ack"  # the driver has the rank's outcome: the rank may exit
    ABORT = "abort"  # the run is over: the rank kills itself and its children now
    STOP = (
        "stop"  # the attempt is ending: the rank gets SIGTERM, `stopping()` turns true, then a grace period
    )
    DUMP_STACKS = "dump_stacks"  # {"request": int}: send the Python stack of every thread (STACKS)
    # a barrier task -> driver (its own connection, no HELLO)
    TASK_REPORT = "task_report"  # {"task", "host", "launcher", "exit_code", "tail" | "traceback"}
    JOIN = "join"  # {"task", "tasks", "spark_task_id", "entries": [{"host", "ports", "gpus"} per rank]}
    # driver -> a barrier task
    TOPOLOGY = "topology"  # [entries of task 0, of task 1, ...]: every task's JOIN, once all of them joined
    # mpirun's rsh agent <-> a barrier task's agent
    EXEC = "exec"  # {"argv"}: run this command on the agent's host
    EXIT = "exit"  # {"code", "tail"}: how that command ended
    # a barrier task <-> barrier task 0 (mpirun launcher)
    WAIT = "wait"  # tell me when the run's mpirun has ended; answered with EXIT {"code", "tail"}
