"""The wire protocol in one place: one frozen dataclass per message kind, encoded and decoded here only.

A message travels as ``(kind, {field: value})`` over a `Connection` (which stays generic: it frames and
encrypts whatever it is given). Senders build a message and call `send`; readers get one from `receive` (or
`serving` for a `ChannelServer`) and dispatch on its class with ``match``. A kind nobody knows, or fields
that do not fit the kind, raise `ChannelError` naming them, which ends that connection.
"""

from __future__ import annotations

import contextlib
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import MISSING, FrozenInstanceError, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from sparkrunner.channel.payload import RemoteError
from sparkrunner.channel.transport import Connection, Handler, pickled
from sparkrunner.errors import ChannelError

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda decorator: decorator


class _Record:
    """The methods every message (and record a message carries) shares: `__init__`, `__repr__`, `__eq__` and
    `__hash__` as a frozen dataclass has them, and no assignment after `__init__`."""

    _names: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        if len(args) > len(cls._names):
            raise TypeError(f"{cls.__name__}() takes {len(cls._names)} arguments, got {len(args)}")
        values = dict(zip(cls._names, args, strict=False))
        for name, value in kwargs.items():
            if name not in cls._names or name in values:
                raise TypeError(f"{cls.__name__}() got an unexpected or repeated argument {name!r}")
            values[name] = value
        for name in cls._names:
            if name not in values:
                if name not in cls._defaults:
                    raise TypeError(f"{cls.__name__}() is missing argument {name!r}")
                values[name] = cls._defaults[name]
        self.__dict__.update((name, values[name]) for name in cls._names)

    def _values(self) -> tuple[Any, ...]:
        return tuple(self.__dict__[name] for name in self._names)

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}={value!r}" for name, value in zip(self._names, self._values(), strict=True)
        )
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # (same class)

    def __hash__(self) -> int:
        return hash(self._values())

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")


R = TypeVar("R", bound=type)


@dataclass_transform(frozen_default=True)
def record(cls: R) -> R:
    """A frozen dataclass of the protocol (`dataclasses.fields`, `replace` and ``match`` work on it) whose
    methods are `_Record`'s: `@dataclass(frozen=True)` compiles six methods for each of the protocol's ~40
    classes, a third of a rank's imports (2026-11-28); this generates none."""
    made: Any = dataclass(init=False, repr=False, eq=False)(cls)  # the same class, its fields noted
    found = fields(made)
    made._names = tuple(f.name for f in found)
    made._defaults = {f.name: f.default for f in found if f.default is not MISSING}
    return cls


@record
class RankAddress(_Record):
    """Where one rank of a barrier task can be reached: the address its peers dial, its ports, its GPUs."""

    host: str
    ports: tuple[int, ...]
    gpus: tuple[str, ...]


TaskEntries = list[RankAddress]
"""One barrier task's entries: one `RankAddress` per rank it starts."""


@record
class SparkTask(_Record):
    """What Spark tells one barrier task about itself, passed on to the ranks' `BarrierTaskContext.get()`."""

    task_attempt_id: int
    attempt_number: int
    resources: dict[str, list[str]]
    """Resource name -> Spark's addresses of it (e.g. ``{"gpu": ["0"]}``)."""


_KINDS: dict[str, type[Message]] = {}
_FIELD_TYPES: dict[str, dict[str, Any]] = {}


class Message(_Record):
    """Base of every message; a subclass names its wire kind: ``class Hello(Message, kind="hello")``."""

    kind: ClassVar[str]

    def __init_subclass__(cls, kind: str, **rest: Any) -> None:
        super().__init_subclass__(**rest)
        if kind in _KINDS:
            raise TypeError(f"two messages of kind {kind!r}")
        cls.kind = kind
        _KINDS[kind] = cls


@record
class RankLaunch(_Record):
    """When a rank's start passed each point, in seconds of its host's `time.monotonic()` (one clock for every
    process of a Linux host): compare them with each other, or with another process's on the same host only.
    None where the point did not happen (no barrier task on the driver, np < 0). A warm session's rank says when
    its process started, before its first run."""

    task_entered: float | None
    """Its barrier task's function began (Spark runs)."""
    addresses_exchanged: float | None
    """The task learnt every rank's address (the address exchange over the driver channel)."""
    spawned: float | None
    """Its launcher asked for the rank's process (a new interpreter, or a fork of a zygote)."""
    interpreter_up: float
    """The process ran the first line of sparkrunner (its package's import began)."""
    imports_done: float
    """The bootstrap's imports were done (`sparkrunner.ranks.bootstrap.main` began)."""
    connected: float
    """Its output relay and its channel connection were open, just before it sent `Hello`."""


# rank -> driver


@record
class Hello(Message, kind="hello"):
    """The first message of every rank on its own connection."""

    rank: int
    host: str
    pid: int
    task: int | None
    """The barrier task that started the rank (None on the driver, np < 0)."""
    launch: RankLaunch | None = None
    """When the rank's start passed each point; None from a sender that does not time it."""


@record
class OutputStream(Message, kind="output_stream"):
    """The first message of a rank's output relay (its own connection)."""

    rank: int


@record
class Output(Message, kind="output"):
    """Lines the rank printed on `stream` ("stdout" or "stderr"), one message per read."""

    stream: str
    lines: list[str]


@record
class OutputUpdate(Message, kind="output_update"):
    """The latest ``\\r``-terminated progress update the rank printed on `stream`."""

    stream: str
    text: str


@record
class Stacks(Message, kind="stacks"):
    """The answer to `DumpStacks`: every thread's stack and where the main thread is."""

    request: int
    pid: int
    threads: str
    where: str


@record
class Log(Message, kind="log"):
    """`log_to_driver`: shown on the driver whatever the verbosity."""

    text: str


@record
class RankWarning(Message, kind="warning"):
    """Something the person should know (e.g. a host's GPUs left unused)."""

    text: str


@record
class Progress(Message, kind="progress"):
    """`report_progress`: one training step finished, timed with the rank's own monotonic clock `t`."""

    step: int
    epoch: int | None
    total: int | None
    samples: int | None
    t: float
    metrics: dict[str, float]


@record
class StepAnatomy(Message, kind="step_anatomy"):
    """Where one rank's steps went over a window of steps (`final`: over the whole run), sent once per window.

    `median` and `p95` map each part ("step", "data", "comm", "compute", "own") to seconds; `host`, `task`
    and `executor` name where the rank runs (None for the last two: on the driver, np < 0), for the driver's
    straggler warning. `span_s`: seconds from the start of the first step it covers to its sending, so the
    driver places the window (and the run's first step) on its own clock.
    """

    window: int
    steps: int
    median: dict[str, float]
    p95: dict[str, float]
    host: str
    task: int | None
    executor: str | None
    final: bool
    span_s: float


@record
class File(Message, kind="file"):
    """`send_file_to_driver`: a file's name and content."""

    name: str
    data: bytes


@record
class BarrierJoin(Message, kind="barrier_join"):
    """`BarrierTaskContext.get().barrier()` / `.allGather(message)` in a rank: the `round`-th call of this rank
    (from 0), by a rank of barrier task `partition`."""

    round: int
    partition: int
    message: str


@record
class GraceWanted(Message, kind="grace_wanted"):
    """`main` handles stops (it called `stopping()` or `on_stop()`): a stop gives this rank its grace period."""


@record
class Result(Message, kind="result"):
    """The rank's function returned: its pickled value (rank 0, or all ranks with `run_all`), else None."""

    value: bytes | None


@record
class Error(Message, kind="error"):
    """The rank's function (or its loading) raised."""

    error: RemoteError


# driver -> rank


@record
class Payload(Message, kind="payload"):
    """The pickled ``(fn, args, kwargs)`` to run."""

    call: bytes


@record
class Ack(Message, kind="ack"):
    """The driver has the rank's outcome: the rank may exit."""


@record
class Abort(Message, kind="abort"):
    """The run is over: the rank kills itself and its children now."""


@record
class Stop(Message, kind="stop"):
    """The attempt is ending: the rank gets SIGTERM, `stopping()` turns true, then a grace period."""

    reason: str = "stop"
    """``"stop"`` (cancel, timeout, a peer's failure) or ``"rescale"`` (an elastic run changes its size)."""
    peers_save: bool = False
    """Some rank asked for a grace period (`GraceWanted`): under mpirun, where one rank's exit ends the job, a
    rank that did not ask waits instead of ending at once, so that the ranks that save are not killed mid-save."""


@record
class DumpStacks(Message, kind="dump_stacks"):
    """Send the Python stack of every thread (`Stacks`), tagged with `request`."""

    request: int


@record
class BarrierRelease(Message, kind="barrier_release"):
    """Every rank reached barrier `round`: their messages, in partition order (then rank order)."""

    round: int
    messages: list[str]


# a warm session's home (driver) -> its long-lived ranks (`sparkrunner.ranks.warm`)


@record
class Serve(Message, kind="serve"):
    """Run the next run of the session: connect to its driver channel at `driver` ("host:port") with `secret`,
    its environment variables `env` set for the run's duration."""

    driver: str
    secret: bytes
    env: dict[str, str]


# a barrier task -> driver (its own connection, no Hello)


@record
class TaskReport(Message, kind="task_report"):
    """How a barrier task ended: its process's exit code and last output, or the task's own traceback."""

    task: int
    host: str
    launcher: str
    exit_code: int | None = None
    tail: str = ""
    traceback: str | None = None


@record
class Join(Message, kind="join"):
    """A barrier task's entries in the address exchange."""

    task: int
    tasks: int
    spark: SparkTask
    entries: TaskEntries


# driver -> a barrier task


@record
class Topology(Message, kind="topology"):
    """Every task's `Join` entries and Spark facts, in task order, once all of them joined."""

    tasks: list[TaskEntries]
    spark: list[SparkTask]


@record
class RunOver(Message, kind="run_over"):
    """Every rank of the run reported and hung up: what still runs need not be waited for (mpirun held up by a
    daemon a rank forked). The driver's answer to a barrier task's `Wait`."""


# mpirun's rsh agent <-> a barrier task's agent; a barrier task <-> barrier task 0 (mpirun launcher)


@record
class Exec(Message, kind="exec"):
    """Run this command on the agent's host."""

    argv: list[str]


@record
class Exit(Message, kind="exit"):
    """How a command (or the run's mpirun) ended."""

    code: int
    tail: str


@record
class Wait(Message, kind="wait"):
    """Tell me when the run is over: asked of barrier task 0, once its mpirun ended (answered with `Exit`);
    asked of the driver, once every rank reported and hung up (answered with `RunOver`)."""


# a barrier task <-> its executor's zygote (`sparkrunner.ranks.zygote`), over a Unix socket


ZYGOTE_READY = b"ready\n"
"""What a zygote writes on its stdout once it listens (its starting task waits for it)."""
ZYGOTE_LOCK_SUFFIX = ".lock"
"""Beside a zygote's socket: the file its executor's tasks lock to start one zygote; the zygote removes both."""


@record
class Fork(Message, kind="fork"):
    """Fork a rank: run `argv` (``python -m module args...``) with `env` in `cwd`. The file descriptor for its
    stdout and stderr follows this message as SCM_RIGHTS ancillary data; answered with `Forked`, then `Exit`."""

    argv: list[str]
    env: dict[str, str]
    cwd: str


@record
class Forked(Message, kind="forked"):
    """The rank runs as process `pid` (a child of the zygote); its `Exit` follows on this connection."""

    pid: int


# `sparkrunner.data.stream`: a rank <-> the driver's stream broker (the coordinator; no rows pass through it)


@record
class StreamOpen(Message, kind="stream_open"):
    """A rank starts a pass over the stream: its share is planned from these numbers, as on every rank, and the
    feeders push it to the rank's own server at `host`:`port`, naming the pass by `token`."""

    stream: str
    iteration: int
    """How many passes this rank's loader made before (the same on every rank)."""
    epoch: int
    rank: int
    world_size: int
    rows_per_rank: int
    host: str = ""
    port: int = 0
    token: str = ""
    """Set by `stream_reader` once the rank's server listens."""


@record
class StreamEnd(Message, kind="stream_end"):
    """The rank has every row of its share for this pass (so its leaving does not cancel the feeders)."""


@record
class StreamFailed(Message, kind="stream_failed"):
    """The broker to a rank: the pass failed (a feeder failed for good, a partition gave other rows than
    counted), why in words."""

    text: str


@record
class StreamPassOver(Message, kind="stream_pass_over"):
    """The broker to a rank: its share is whole, and every feeder of the pass finished having given exactly
    the rows counted, so no row of the pass went to nobody."""


# a Spark feeder task -> a rank's stream server


@record
class FeedStart(Message, kind="feed_start"):
    """The first message of a feeder task: which pass of the rank (its token), partition and Spark attempt."""

    stream: str
    token: str
    partition: int
    attempt: int


@record
class FeedBatch(Message, kind="feed_batch"):
    """The partition's rows ``[offset, offset + rows)`` as one Arrow IPC record batch; each is answered by a
    FeedAck."""

    offset: int
    rows: int
    ipc: bytes


@record
class FeedAck(Message, kind="feed_ack"):
    """The rank holds a batch: the feeder may send one more (the ack waits while the rank lags)."""


# a Spark feeder task -> the stream's broker (driver): so that a failed job names the partition that failed


@record
class FeederStarted(Message, kind="feeder_started"):
    """A feeder task began: its pass, its partition and Spark's attempt number of the task."""

    stream: str
    pass_id: int
    partition: int
    attempt: int


@record
class FeederFinished(Message, kind="feeder_finished"):
    """The feeder task of `partition` pushed all of its rows."""

    stream: str
    pass_id: int
    partition: int


def encode(message: Message) -> tuple[str, dict[str, Any]]:
    """The wire form of `message`: its kind and its fields."""
    return message.kind, {f.name: getattr(message, f.name) for f in fields(message)}  # type: ignore[arg-type]


def decode(kind: Any, data: Any) -> Message:
    """The message of wire form ``(kind, data)``; `ChannelError` when the kind or its fields do not fit."""
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ChannelError(f"a message of unknown kind {kind!r} arrived; dropping the connection")
    hints = _field_types(cls)
    if not isinstance(data, dict) or data.keys() != hints.keys():
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ChannelError(f"a malformed {kind!r} message arrived: fields {got}, expected {sorted(hints)}")
    wrong = [name for name, hint in hints.items() if not _conforms(data[name], hint)]
    if wrong:
        raise ChannelError(f"a malformed {kind!r} message arrived: wrong type for {', '.join(wrong)}")
    return cls(**data)


def _field_types(cls: type[Message]) -> dict[str, Any]:
    """Field name -> its resolved annotation, computed once per kind."""
    if cls.kind not in _FIELD_TYPES:
        hints = typing.get_type_hints(cls)
        _FIELD_TYPES[cls.kind] = {f.name: hints[f.name] for f in fields(cls)}  # type: ignore[arg-type]
    return _FIELD_TYPES[cls.kind]


def _conforms(value: Any, hint: Any) -> bool:
    """A shallow type check: the value's outer type fits the field's annotation."""
    if hint is Any:
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_conforms(value, option) for option in typing.get_args(hint))
    outer = typing.get_origin(hint) or hint
    if isinstance(value, bool) and outer is not bool:
        return False
    if outer is float:
        return isinstance(value, (int, float))
    return isinstance(value, outer)


def send(conn: Connection, message: Message) -> None:
    """Send one message on `conn`."""
    conn.send(*encode(message))


def send_to_all(conns: Iterable[Connection], message: Message) -> None:
    """Send one message to many connections, pickled once; connections already gone are skipped."""
    body = pickled(*encode(message))
    for conn in conns:
        with contextlib.suppress(ChannelError):
            conn.send_pickled(body, message.kind)


def receive(conn: Connection) -> Message:
    """Block for the next message on `conn`."""
    return decode(*conn.recv())


def serving(handler: Callable[[Connection, Message], None]) -> Handler:
    """A `ChannelServer` handler that decodes every message for `handler` (a bad one ends its connection)."""
    return lambda conn, kind, data: handler(conn, decode(kind, data))
