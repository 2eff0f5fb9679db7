"""The environment variables sparkrunner sets for the processes it starts, in one place.

Every module that sets or reads one of these uses the names here, never a bare string. The timings' overrides,
``SPARKRUNNER_<NAME>_S``, are named by `sparkrunner.timeouts` (its `Timing.env`).
"""

from __future__ import annotations


class Env:
    """Environment variables sparkrunner sets for the processes it starts."""

    RUN_ID = "SPARKRUNNER_RUN_ID"  # on every process of a run: the run's id (`RunRecord.run_id`)
    ATTEMPT_ID = "SPARKRUNNER_ATTEMPT_ID"  # on every process of an attempt: its id, how leftovers are found
    ZYGOTE_LEASE_ID = (
        "SPARKRUNNER_ZYGOTE_LEASE_ID"  # on an executor's zygote: its lease's id, how it is swept
    )
    DRIVER = "SPARKRUNNER_DRIVER"  # "host:port" of the driver channel
    SECRET_DIR = "SPARKRUNNER_SECRET_DIR"  # one-shot secret files' folder (`secret_files`); holds no secret
    ECHO_OUTPUT = "SPARKRUNNER_ECHO_OUTPUT"  # "1": also copy the rank's output to its own stdout/stderr
    TOPOLOGY = "SPARKRUNNER_TOPOLOGY"  # set by the mpirun launcher: peers in mpirun's rank order
    TASK_AGENTS = "SPARKRUNNER_TASK_AGENTS"  # {host: port} of the task agents (mpirun's rsh agent reads it)
    STARTED_BY_TASK = "SPARKRUNNER_STARTED_BY_TASK"  # index of the barrier task (Spark partition id, never a
    # rank) that started it, whose clean-up ends it: the task's own ranks, its mpirun and what that starts
    # locally, or what its task agent started; ranks send it in HELLO, so causes name that task
    EXECUTOR = "SPARKRUNNER_EXECUTOR"  # beside STARTED_BY_TASK: the id of that task's Spark executor
    BARRIER_STAGE = "SPARKRUNNER_BARRIER_STAGE"  # Spark runs only: the barrier stage's facts (JSON) that
    # `BarrierTaskContext.get()` answers from in the rank (`sparkrunner.channel.barrier_stage`)
    TASK_GPUS = "SPARKRUNNER_TASK_GPUS"  # Spark runs only: its task's GPUs (device ids, comma-separated)
    USE_GPU = "SPARKRUNNER_USE_GPU"  # Runner(use_gpu=...): "auto", "1" or "0"
    ATTEMPT = "SPARKRUNNER_ATTEMPT"  # 0 on the first attempt of a run, then 1, 2, ... (max_failures)
    CHECKPOINT_DIR = "SPARKRUNNER_CHECKPOINT_DIR"  # where save_checkpoint/load_checkpoint write and read
    CHECKPOINT_PROBE = "SPARKRUNNER_CHECKPOINT_PROBE"  # a file the driver wrote there: ranks must see it
    STOP_GRACE_S = "SPARKRUNNER_STOP_GRACE_S"  # seconds between SIGTERM (stop) and the rank killing itself
    DRIVER_HOST = "SPARKRUNNER_DRIVER_HOST"  # set by the user: the driver address ranks dial (Spark Connect)
    WARM = "SPARKRUNNER_WARM"  # "1": a warm session's rank, serving run after run (`sparkrunner.ranks.warm`)
    RESULTS = "SPARKRUNNER_RESULTS"  # "all": every rank sends its return value (run_all); else rank 0 only
    PORT_RANGE = "SPARKRUNNER_PORT_RANGE"  # "LOW-HIGH": every port sparkrunner opens comes from this range
    CACHE_MAX_BYTES = "SPARKRUNNER_CACHE_MAX_BYTES"  # set by the user: the materialize cache's size limit
    ANATOMY = "SPARKRUNNER_ANATOMY"  # set by the user: "0" turns the step anatomy (and straggler alerts) off
    REPORT_DIR = "SPARKRUNNER_REPORT_DIR"  # set by the user: where the driver saves each run's HTML report
    DATA_CACHE = "SPARKRUNNER_DATA_CACHE"  # set by the user: where materialize writes (default ~/.cache/...)
    ZYGOTE_SOCKET = "SPARKRUNNER_ZYGOTE_SOCKET"  # a zygote's Unix socket path (`sparkrunner.ranks.zygote`)
    ZYGOTE_LEASE = (
        "SPARKRUNNER_ZYGOTE_LEASE"  # "host:port" of the driver's run-long lease; the zygote ends with it
    )
    ZYGOTE_WATCH = (
        "SPARKRUNNER_ZYGOTE_WATCH"  # "pid:start ticks" of the executor's Python daemon; ends with it
    )
    ZYGOTE_MODULES = "SPARKRUNNER_ZYGOTE_MODULES"  # comma-separated modules the zygote imports before forking
    ZYGOTE_WARM = "SPARKRUNNER_ZYGOTE_WARM"  # comma-separated modules it imports later, once idle
    ZYGOTE_ROOM = "SPARKRUNNER_ZYGOTE_ROOM"  # padding: room in the zygote's environ block for a rank's own
    LEGACY_KERAS = "SPARKRUNNER_LEGACY_KERAS"  # "1": TF_USE_LEGACY_KERAS=1 is sparkrunner's choice (tf_env)
    LAUNCH_TIMES = "SPARKRUNNER_LAUNCH_TIMES"  # set as a launcher starts a rank: its task's times and the
    # spawn's (`sparkrunner.channel.launch_times`), which the rank sends on in HELLO
    DRIVER_ZYGOTE = (
        "SPARKRUNNER_DRIVER_ZYGOTE"  # "pid:start ticks" of the driver that keeps this import zygote
    )


CUDA_VISIBLE = "CUDA_VISIBLE_DEVICES"  # the GPUs a rank may see, as torchrun sets it
GLOO_VARIABLES = (  # what Horovod's Gloo wiring (`frameworks.horovod_env`) sets: this run's rendezvous and this rank's place in it
    "HOROVOD_GLOO_RENDEZVOUS_ADDR",
    "HOROVOD_GLOO_RENDEZVOUS_PORT",
    "HOROVOD_RANK",
    "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK",
    "HOROVOD_LOCAL_SIZE",
    "HOROVOD_CROSS_RANK",
    "HOROVOD_CROSS_SIZE",
    "HOROVOD_HOSTNAME",
)
