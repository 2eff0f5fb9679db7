"""Every Runner option in one frozen dataclass, checked before anything starts, and the checks it is made of."""

from __future__ import annotations

import os
import textwrap
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from sparkrunner import timeouts
from sparkrunner.common.checkpoint_folder import folder_at
from sparkrunner.common.checks import PortRange, check_choice, check_number, configured_port_range
from sparkrunner.common.environment import CUDA_VISIBLE, GLOO_VARIABLES, Env
from sparkrunner.errors import CheckpointDirError, InvalidArgumentError

LauncherName = Literal["auto", "direct", "mpirun"]
Verbosity = Literal["all", "log_callback_only"]
OnStall = Literal["warn", "fail"]
VERBOSITIES: tuple[str, ...] = get_args(Verbosity)


@dataclass(frozen=True)
class SizeRange:
    """The ranks an elastic run may have, ``least <= size <= most`` (both > 0); `local` for ``np < 0``."""

    least: int
    most: int
    local: bool = False


def parse_np(np: Any) -> tuple[int, SizeRange | None]:
    """``np`` as `Runner` takes it: an int, or ``(min, max)``; returns the fixed np (``max`` for a range,
    negative for a local range) and the range, or a clear error naming what is wrong."""
    if not isinstance(np, tuple | list):
        return np, None
    if len(np) != 2 or any(isinstance(n, bool) or not isinstance(n, int) for n in np):
        raise InvalidArgumentError(f"np=(min, max) takes two ints, not {np!r}")
    least, most = np
    if least == 0 or most == 0 or (least > 0) != (most > 0):
        raise InvalidArgumentError(
            f"np={tuple(np)!r}: min and max must both be > 0 (Spark) or both < 0 (local processes, which "
            f"always run |max|)"
        )
    if abs(least) > abs(most):
        raise InvalidArgumentError(f"np={tuple(np)!r}: min ({least}) is larger than max ({most})")
    local = most < 0
    return most, SizeRange(abs(least), abs(most), local)


def check_range(size: SizeRange, per_task: int | None, checkpoint_dir: Any) -> None:
    """An elastic Spark run restarts from checkpoints, and every size must fill whole tasks."""
    if size.local:
        return
    if checkpoint_dir is None:
        raise InvalidArgumentError(
            f"np=({size.least}, {size.most}) resizes the run by restarting it from its checkpoints: pass "
            f"checkpoint_dir='s3://bucket/prefix' (or a folder every executor and the driver can read)"
        )
    if per_task is not None and (size.least % per_task or size.most % per_task):
        raise InvalidArgumentError(
            f"np=({size.least}, {size.most}): min and max must be multiples of ranks_per_task={per_task}"
        )


def check_checkpoint_dir(np: int, max_failures: int, checkpoint_dir: str | None) -> None:
    """Refuse, before anything starts, a Spark run that must resume but has nowhere to keep checkpoints."""
    if np > 0 and max_failures > 0 and checkpoint_dir is None:
        raise CheckpointDirError(
            f"max_failures={max_failures} resumes failed attempts from checkpoints, which np > 0 runs keep where "
            f"the driver and every executor can read: pass checkpoint_dir='s3://bucket/prefix' (or gs://, "
            f"abfss://, hdfs://, a mounted file system such as NFS, /dbfs/... on Databricks)"
        )
    if checkpoint_dir is None:
        return
    if not isinstance(checkpoint_dir, (str, os.PathLike)) or not str(checkpoint_dir):
        raise CheckpointDirError(f"checkpoint_dir must be a folder path or a URI, not {checkpoint_dir!r}")
    folder_at(os.fspath(checkpoint_dir))  # a scheme nothing here opens fails now, naming what to install


@dataclass(frozen=True)
class FromText:
    """How a shell gives an option whose type says nothing of it: `parse` turns the flag's text into the value."""

    parse: Callable[[str], Any]
    metavar: str


def option(
    default: Any = None,
    doc: str = "",
    *,
    factory: Any = None,
    timing: str | None = None,
    shell: FromText | bool = True,
) -> Any:
    """A `RunOptions` field and its documentation (what users read in `help(Runner)` and docs/options.md);
    `timing` names the `sparkrunner.timeouts` entry whose value (its environment override included) is the default.
    `shell`: True, a ``sparkrunner run`` flag read as the field's type says (`shell_flags`); a `FromText` for a
    type a shell cannot spell; False for a Python object, which no flag can give."""
    metadata = {"doc": doc, "shell": shell}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    if timing is not None:
        return field(default=timeouts.TIMINGS[timing].value, metadata={**metadata, "timing": timing})
    return field(default=default, metadata=metadata)


def np_from_text(text: str) -> int | tuple[int, int]:
    """``np`` as a shell gives it: ``N``, or ``MIN:MAX`` for an elastic run (checked by `parse_np`)."""
    least, sep, most = text.partition(":")
    try:
        return (int(least), int(most)) if sep else int(text)
    except ValueError:
        raise InvalidArgumentError(
            f"np takes N or MIN:MAX (whole numbers, e.g. 4, -2 or 2:4), not {text!r}"
        ) from None


def tracking_from_text(text: str) -> bool | str:
    """``tracking`` as a shell gives it: ``true``, ``false``, or an MLflow tracking URI."""
    return {"true": True, "false": False}.get(text.lower(), text)


def pair_from_text(text: str) -> tuple[str, str]:
    """One ``NAME=VALUE`` entry (an ``env`` variable, a Spark setting)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise InvalidArgumentError(f"takes NAME=VALUE, not {text!r}")
    return name, value


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
            *GLOO_VARIABLES,
        ),
        _TOPOLOGY,
    ),
    **dict.fromkeys(
        (
            Env.RUN_ID,
            Env.ATTEMPT_ID,
            Env.ZYGOTE_LEASE_ID,
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
            Env.LEGACY_KERAS,
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


def check_tracking(tracking: Any) -> None:
    """`tracking` is one of the kinds `Runner` takes (whether MLflow is installed is checked where it is used)."""
    if tracking is None or isinstance(tracking, bool) or (isinstance(tracking, str) and tracking):
        return
    if not callable(getattr(tracking, "on_start", None)):  # a `sparkrunner.MlflowTracking`
        raise InvalidArgumentError(
            f"tracking must be None, True, False, an MLflow tracking URI or a sparkrunner.MlflowTracking, not "
            f"{tracking!r}"
        )


def check_observers(observers: Any) -> None:
    """`observers` is a list (or tuple) of observer instances: a lone observer, or a class, is refused."""
    if not isinstance(observers, list | tuple):
        raise InvalidArgumentError(
            f"observers must be a list of RunObserver instances, not {type(observers).__name__}: "
            f"observers=[MyObserver()]"
        )
    for observer in observers:
        if isinstance(observer, type) or not callable(getattr(observer, "on_start", None)):
            what = f"the class {observer.__name__}" if isinstance(observer, type) else repr(observer)
            raise InvalidArgumentError(
                f"observers takes RunObserver instances (subclass sparkrunner.RunObserver), not {what}"
            )


@dataclass(frozen=True)
class RunOptions:
    """Every `Runner` option: declared, documented and checked here, once (`__post_init__`, before anything
    starts). `Runner`'s docstring and docs/options.md are made from these fields' docs.

    ``Runner(np=(min, max))`` arrives as ``np=max`` (negative for a local range) and `np_range` (`parse_np`);
    `port_range` is resolved against ``SPARKRUNNER_PORT_RANGE`` and `env` made a plain str -> str dict.
    """

    np: int = option(
        MISSING,
        "``> 0``: one Spark barrier stage of ``np`` tasks on the given SparkSession (classic or Spark Connect). "
        "``< 0``: ``abs(np)`` processes on the driver machine, no Spark at all. ``(min, max)``: an elastic run, sized "
        "by the slots there are (docs/elastic.md).",
        shell=FromText(np_from_text, "N|MIN:MAX"),
    )
    spark: Any = option(
        None,
        "the SparkSession for ``np > 0``; defaults to this thread's active one, else the process's default one, so "
        "runs started from worker threads (Optuna, Hyperopt, thread pools) find it too.",
        shell=False,
    )
    launcher: LauncherName = option(
        "auto",
        '``"direct"``: every task spawns its ranks (torch.distributed, TensorFlow, Horovod over Gloo). '
        '``"mpirun"``: task 0 runs ``mpirun`` across the barrier tasks, no ssh (Horovod over MPI, mpi4py). '
        '``"auto"``: ``mpirun`` for code that imports mpi4py or Horovod (or says ``horovod=True``) when ``mpirun`` and '
        "Horovod with MPI are installed and ``HOROVOD_CONTROLLER`` is not ``gloo``, else ``direct`` (mpirun only adds "
        "start-up to code without MPI); the log line and ``last_run.launcher`` say which it picked and why.",
    )
    driver_log_verbosity: Verbosity = option(
        "all",
        '``"all"``: every rank\'s stdout and stderr appear on the driver, line by line, prefixed ``[rank N]``. '
        '``"log_callback_only"``: only ``log_to_driver(...)`` messages.',
    )
    start_timeout: float = option(
        timing="START_TIMEOUT_S",
        doc="seconds to wait for enough task slots (then `NotEnoughSlotsError` says how many there were), then again "
        "for every rank to start and connect (then `StartTimeoutError` says how many did).",
    )
    timeout: float | None = option(
        None,
        "seconds for the whole run, counted from the call (its checks, every attempt and retry together); past it "
        "`RunTimeoutError` shows where each rank was. None: no limit.",
    )
    env: Mapping[str, str] = option(doc="extra environment variables for every rank.", factory=dict)
    tracking: Any = option(
        None,
        "record every run in MLflow: None (on when mlflow is installed), False, True, a tracking URI, or a "
        "`sparkrunner.MlflowTracking`.",
        shell=FromText(tracking_from_text, "true|false|URI"),
    )
    progress: bool = option(
        True, "show a live progress bar (tqdm, terminal or notebook) while ranks call `report_progress`."
    )
    observers: Sequence[Any] = option(
        (), "your own `RunObserver` instances, which follow every run.", shell=False
    )
    max_failures: int = option(
        0,
        "failed attempts to retry: each retry starts every rank again (a new barrier stage) and ``main`` resumes "
        "from `sparkrunner.load_checkpoint()`. 0: the first failure ends the run (docs/recovery.md).",
    )
    checkpoint_dir: str | None = option(
        None,
        "where `sparkrunner.save_checkpoint` writes: a folder or a URI (``s3://``, ``gs://``, ``abfss://``, "
        "``hdfs://``, any fsspec scheme). ``np < 0``: by default a folder made for the run (removed at its end). "
        "``np > 0``: a location the driver and every executor can read; required when ``max_failures > 0``.",
    )
    stop_grace_s: float = option(
        timing="STOP_GRACE_S",
        doc="seconds a stopping rank gets (SIGTERM, `sparkrunner.stopping()` true) before SIGKILL.",
    )
    retry_if: Any = option(
        None,
        "``retry_if(error) -> bool`` decides whether a failed attempt is retried (default: yes). Never retried, and "
        "never asked about: the errors another attempt cannot fix, which docs/recovery.md lists (bad arguments, "
        "`NotEnoughSlotsError`, `RunTimeoutError`, `RunCancelledError`, `DoNotRetry`, ...).",
        shell=False,
    )
    stall_timeout: float | None = option(
        None,
        "seconds without any rank printing or reporting progress after which every rank's Python stack is shown "
        "(None: off). Set it well above the longest quiet stretch of a healthy run (docs/diagnostics.md).",
    )
    on_stall: OnStall = option(
        "warn", '``"warn"`` shows the stacks and keeps running; ``"fail"`` stops the run with `StallError`.'
    )
    horovod: bool | None = option(
        None,
        "whether the direct launcher hosts Horovod's Gloo rendezvous beside rank 0: None whenever Horovod is "
        "installed, False never (no listening port), True always (a port it cannot listen on fails the run). "
        'For ``launcher="auto"``, True or False says whether the code uses Horovod (None: read from its imports).',
    )
    use_gpu: bool | None = option(
        None,
        "None: each rank gets its task's GPUs, with a `SparkRunnerWarning` naming a host whose GPUs Spark gave "
        "none of its tasks. True: refuse to start (`GpuUnavailableError`) unless Spark assigns GPUs to tasks "
        "(``np < 0``: unless this machine has one). False: hide every GPU from the ranks (CPU training).",
    )
    ranks_per_task: int | None = option(
        None,
        "ranks each Spark task starts (``np / ranks_per_task`` barrier tasks, the task's GPUs split among them). "
        "None: the task's GPU count when Spark gives tasks more than one GPU, else 1.",
    )
    port_range: PortRange | None = option(
        None,
        "``(low, high)``: every port sparkrunner opens (driver channel, rendezvous, task agents, torch/TF/MPI "
        f"listening ports) comes from it, for firewalls and network policies. Default: ``{Env.PORT_RANGE}`` "
        '(``"low-high"``) when set, else any free port (docs/networking.md).',
    )
    cold_start: bool = option(
        False,
        "``np < 0`` with the direct launcher: False forks each rank from an import zygote this driver process keeps "
        "between runs (numpy, scipy, torch, torchvision imported once, when the function imports them), so a later "
        "run or a retry does not import them again; True starts every rank as a new interpreter (docs/elastic.md, "
        '"Local runs start warm"). Other launchers, Spark runs and warm sessions ignore it.',
    )
    np_range: SizeRange | None = option(
        None, "(set from ``np=(min, max)``, not given by the user)", shell=False
    )

    def __post_init__(self) -> None:
        self._check_np()
        if self.np_range is not None:
            check_range(self.np_range, self.ranks_per_task, self.checkpoint_dir)
        check_choice("launcher", self.launcher, LauncherName)
        check_choice("driver_log_verbosity", self.driver_log_verbosity, Verbosity)
        check_choice("on_stall", self.on_stall, OnStall)
        for name in ("start_timeout", "timeout", "stall_timeout"):
            if name == "start_timeout" or getattr(self, name) is not None:
                check_number(name, getattr(self, name), 0, integer=False, above=True)
        check_number("max_failures", self.max_failures, 0, note=" (failed attempts to retry)")
        check_number("stop_grace_s", self.stop_grace_s, 0, integer=False)
        if self.retry_if is not None and not callable(self.retry_if):
            raise InvalidArgumentError(f"retry_if must be a function(error) -> bool, not {self.retry_if!r}")
        check_checkpoint_dir(self.np, self.max_failures, self.checkpoint_dir)
        check_choice("cold_start", self.cold_start, (True, False))
        for name in ("horovod", "use_gpu"):
            check_choice(name, getattr(self, name), (None, True, False))
        self._check_ranks_per_task()
        check_tracking(self.tracking)
        check_observers(self.observers)
        object.__setattr__(self, "port_range", configured_port_range(self.port_range))
        object.__setattr__(self, "env", {str(k): str(v) for k, v in (self.env or {}).items()})
        check_user_env(self.env, self.np > 0, self.use_gpu)

    def _check_np(self) -> None:
        check_number("np", self.np, note=" (ranks)")
        if self.np == 0:
            raise InvalidArgumentError(
                "np=0 starts no rank. Use np > 0 for a Spark barrier stage of np tasks, or np < 0 to run |np| "
                "processes on the driver."
            )

    def _check_ranks_per_task(self) -> None:
        per_task = self.ranks_per_task
        if per_task is None:
            return
        check_number("ranks_per_task", per_task, 1, note=" or None")
        if self.np < 0 and per_task != 1:
            raise InvalidArgumentError(
                "ranks_per_task applies to Spark runs (np > 0); np < 0 runs |np| local ranks"
            )
        if self.np > 0 and self.np % per_task and self.np_range is None:
            raise InvalidArgumentError(
                f"np={self.np} is not a multiple of ranks_per_task={per_task}: every task starts the same number "
                f"of ranks"
            )


def option_docs() -> dict[str, str]:
    """Each user-facing option and its documentation, in `Runner`'s order."""
    return {f.name: f.metadata["doc"] for f in _user_fields()}


def _user_fields() -> list[Field[Any]]:
    return [f for f in fields(RunOptions) if f.name != "np_range"]


@dataclass(frozen=True)
class ShellFlag:
    """A `RunOptions` field as a ``sparkrunner run`` flag, made from its declaration (`shell_flags`)."""

    option: str
    flag: str
    help: str
    default: Any
    parse: Callable[[str], Any] | None
    """The flag's text -> the option's value; None for an on/off option (``--name`` / ``--no-name``)."""
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    repeated: bool = False
    """Given once per entry (``--env A=1 --env B=2``), each parsed on its own."""
    required: bool = False

    @property
    def usage(self) -> str:
        """How docs/options.md shows the flag."""
        if self.parse is None:
            return f"{self.flag}, --no-{self.flag.removeprefix('--')}"
        value = self.metavar or "{" + ",".join(self.choices) + "}"
        return f"{self.flag} {value}" + (" (repeated)" if self.repeated else "")


def shell_flags() -> list[ShellFlag]:
    """The flags of ``sparkrunner run`` that give `Runner`'s options, in its order: every option a shell can
    spell, read from the field's type (a `Literal`: its choices; bool: on/off; a mapping: repeated
    ``NAME=VALUE``) unless its declaration says otherwise (`option`'s `shell`)."""
    hints = get_type_hints(RunOptions)
    flags = (_shell_flag(f, hints[f.name]) for f in _user_fields())
    return [flag for flag in flags if flag is not None]


def _shell_flag(declared: Field[Any], hint: Any) -> ShellFlag | None:
    shell = declared.metadata["shell"]
    if shell is False:
        return None
    name = declared.name
    doc = declared.metadata["doc"].replace("``", "`")
    default = declared.default_factory() if declared.default_factory is not MISSING else declared.default
    required = default is MISSING
    shown = "" if required else f" Default: {_default_markdown(declared).replace('`', '')}."
    flag = ShellFlag(
        name,
        "--" + name.replace("_", "-"),
        doc + shown,
        None if required else default,
        parse=str,
        required=required,
    )
    if isinstance(shell, FromText):
        return replace(flag, parse=shell.parse, metavar=shell.metavar)
    kind = _without_none(hint)
    if kind is bool:
        return replace(flag, parse=None)
    if get_origin(kind) is Literal:
        return replace(flag, choices=get_args(kind))
    if get_origin(kind) is Mapping:
        return replace(flag, parse=pair_from_text, metavar="NAME=VALUE", repeated=True)
    if get_origin(kind) is tuple:  # a (low, high) range: "LOW-HIGH", which the option takes as it is
        return replace(flag, metavar="LOW-HIGH")
    readers: dict[Any, tuple[Callable[[str], Any], str]] = {
        int: (int, "N"),
        float: (float, "SECONDS"),
        str: (str, "PATH"),
    }
    if kind not in readers:
        raise TypeError(
            f"option {name}: no shell flag reads {hint}; declare it with shell=FromText(...) or False"
        )
    return replace(flag, parse=readers[kind][0], metavar=readers[kind][1])


def _without_none(hint: Any) -> Any:
    """``X | None`` -> X (an optional option's flag reads X; leaving the flag out keeps None)."""
    if get_origin(hint) in (Union, types.UnionType):
        kinds = [kind for kind in get_args(hint) if kind is not type(None)]
        return kinds[0] if len(kinds) == 1 else hint
    return hint


def options_docstring() -> str:
    """The options as a docstring's ``Args:`` section (appended to `Runner`'s)."""
    lines = ["", "    Args:"]
    for name, doc in option_docs().items():
        lines += textwrap.wrap(f"{name}: {doc}", 108, initial_indent=" " * 8, subsequent_indent=" " * 12)
    return "\n".join(lines) + "\n"


def _default_markdown(declared: Any) -> str:
    """An option's default as docs/options.md shows it: the declared value (a timing's with its variable)."""
    timing = declared.metadata.get("timing")
    if timing is not None:
        entry = timeouts.TIMINGS[timing]
        return f"`{entry.default:g}` (`{entry.env}`)"
    if declared.default_factory is not MISSING:
        return f"`{declared.default_factory()!r}`"
    if declared.default is MISSING:
        return "required"
    value = declared.default
    return f'`"{value}"`' if isinstance(value, str) else f"`{value!r}`"


def options_markdown() -> str:
    """The options as the table of docs/options.md (the docs test keeps that file equal to this), with each
    option's ``sparkrunner run`` flag (`shell_flags`)."""
    flags = {flag.option: f"`{flag.usage}`" for flag in shell_flags()}
    rows = [
        f"| `{f.name}` | {_default_markdown(f)} | {f.metadata['doc'].replace('``', '`')} | {flags.get(f.name, '-')} |"
        for f in _user_fields()
    ]
    return "\n".join(["| option | default | meaning | `sparkrunner run` flag |", "|---|---|---|---|", *rows])
