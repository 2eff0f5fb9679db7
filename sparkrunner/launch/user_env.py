"""Whose value a rank's environment variable takes: the user's explicit one, or the one only sparkrunner can know.

A rank starts from the environment of the process that spawns it (the driver for np < 0; the executor, with
Spark's ``spark.executorEnv.*``, for np > 0), then `Runner(env=...)`. Variables that describe this run (ranks,
addresses, ports, the driver channel) are sparkrunner's alone: `Runner(env=...)` naming one is refused before
anything starts. Every other variable sparkrunner sets is a default that an explicit value overrides, and
PYTHONPATH is merged (the user's entries first). The table is docs/environment.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping

from sparkrunner.channel.environment import Env
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.frameworks import horovod_env
from sparkrunner.launch.gpus import CUDA_VISIBLE

_TOPOLOGY = "sparkrunner sets it for each rank from where the run's ranks are placed"
RUN_VARIABLES: dict[str, str] = {
    **dict.fromkeys(
        (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "GROUP_RANK",
            "NODE_RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
            "TF_CONFIG",
            "JAX_COORDINATOR_ADDRESS",
            "JAX_COORDINATOR_BIND_ADDRESS",
            *horovod_env.GLOO_VARIABLES,
        ),
        _TOPOLOGY,
    ),
    **dict.fromkeys(
        (
            Env.RUN_ID,
            Env.DRIVER,
            Env.SECRET_DIR,
            Env.ECHO_OUTPUT,
            Env.TOPOLOGY,
            Env.TASK_AGENTS,
            Env.STARTED_BY_TASK,
            Env.EXECUTOR,
            Env.TASK_GPUS,
            Env.WARM,
            Env.RESULTS,
            Env.CHECKPOINT_PROBE,
            Env.ATTEMPT,
        ),
        "sparkrunner sets it for each run",
    ),
    Env.USE_GPU: "pass Runner(use_gpu=...) instead",
    Env.STOP_GRACE_S: "pass Runner(stop_grace_s=...) instead",
    Env.CHECKPOINT_DIR: "pass Runner(checkpoint_dir=...) instead",
    Env.PORT_RANGE: "pass Runner(port_range=...) instead",
}
"""Variables `Runner(env=...)` may not set, and what to do instead."""


def check_user_env(env: Mapping[str, str], in_spark: bool, use_gpu: bool | None) -> None:
    """Refuse `Runner(env=...)` entries that sparkrunner must set itself, naming each conflict."""
    conflicts = [f"{name} ({RUN_VARIABLES[name]})" for name in env if name in RUN_VARIABLES]
    if CUDA_VISIBLE in env and in_spark:
        conflicts.append(
            f"{CUDA_VISIBLE} (in a Spark run each rank gets its barrier task's GPUs, as Spark assigned them: "
            "set spark.task.resource.gpu.amount, or pass Runner(use_gpu=False) to train on CPU)"
        )
    elif CUDA_VISIBLE in env and use_gpu is False:
        conflicts.append(f"{CUDA_VISIBLE} (Runner(use_gpu=False) hides every GPU: drop one of the two)")
    if conflicts:
        raise InvalidArgumentError(
            "Runner(env=...) sets variables whose value sparkrunner must choose: "
            + "; ".join(conflicts)
            + ". "
            "Remove them from env= (docs/environment.md lists what env= may set)."
        )


def python_path(explicit: Iterable[str | None]) -> str:
    """PYTHONPATH for a rank: the entries of the `explicit` values (the user's env=, then the inherited one)
    first, then what the spawning interpreter imports from (py-files, notebook folders); each entry once."""
    entries = [p for value in explicit if value for p in value.split(os.pathsep)]
    return os.pathsep.join(dict.fromkeys(p for p in [*entries, *sys.path] if p))
