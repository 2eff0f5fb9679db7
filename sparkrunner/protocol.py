"""The wire protocol in one place: message kinds on sparkrunner's channels and its environment variables.

Every module that sends, receives or sets one of these uses the names here, never a bare string.
"""

from __future__ import annotations


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


class Env:
    """Environment variables sparkrunner sets for the processes it starts."""

    RUN_ID = "SPARKRUNNER_RUN_ID"  # on every process of a run: how leftovers are found
    DRIVER = "SPARKRUNNER_DRIVER"  # "host:port" of the driver channel
    SECRET_DIR = "SPARKRUNNER_SECRET_DIR"  # folder of one-shot secret files (`handover.py`); holds no secret
    ECHO_OUTPUT = "SPARKRUNNER_ECHO_OUTPUT"  # "1": also copy the rank's output to its own stdout/stderr
    TOPOLOGY = "SPARKRUNNER_TOPOLOGY"  # set by the mpirun launcher: peers in mpirun's rank order
    TASK_AGENTS = "SPARKRUNNER_TASK_AGENTS"  # {host: port} of the task agents (mpirun's rsh agent reads it)
    STARTED_BY_TASK = "SPARKRUNNER_STARTED_BY_TASK"  # index of the barrier task (Spark partition id, never a
    # rank) that started it, whose clean-up ends it: the task's own ranks, its mpirun and what that starts
    # locally, or what its task agent started; ranks send it in HELLO, so causes name that task
    TASK_GPUS = "SPARKRUNNER_TASK_GPUS"  # Spark runs only: its task's GPUs (device ids, comma-separated)
    USE_GPU = "SPARKRUNNER_USE_GPU"  # Runner(use_gpu=...): "auto", "1" or "0"
    ATTEMPT = "SPARKRUNNER_ATTEMPT"  # 0 on the first attempt of a run, then 1, 2, ... (max_failures)
    CHECKPOINT_DIR = "SPARKRUNNER_CHECKPOINT_DIR"  # where save_checkpoint/load_checkpoint write and read
    CHECKPOINT_PROBE = "SPARKRUNNER_CHECKPOINT_PROBE"  # a file the driver wrote there: ranks must see it
    STOP_GRACE_S = "SPARKRUNNER_STOP_GRACE_S"  # seconds between SIGTERM (stop) and the rank killing itself
    DRIVER_HOST = "SPARKRUNNER_DRIVER_HOST"  # set by the user: the driver address ranks dial (Spark Connect)
    RESULTS = "SPARKRUNNER_RESULTS"  # "all": every rank sends its return value (run_all); else rank 0 only
    PORT_RANGE = "SPARKRUNNER_PORT_RANGE"  # "LOW-HIGH": every port sparkrunner opens comes from this range
