"""The typed wire protocol: every message kind survives encode/decode, and bad wire input is a ChannelError."""

from __future__ import annotations

import pickle
import queue
import threading

import pytest

from sparkrunner.channel import ChannelServer, Connection, connect, new_secret
from sparkrunner.channel import messages as m
from sparkrunner.channel.payload import RemoteError
from sparkrunner.errors import ChannelError

ENTRIES = [m.RankAddress("10.0.0.7", (40001, 40002), ("0",))]

SAMPLES: list[m.Message] = [
    m.Hello(rank=3, host="worker-1", pid=4242, task=1, launch=m.RankLaunch(1.0, 1.5, 2.0, 2.25, 2.5, 2.75)),
    m.Hello(rank=0, host="driver", pid=7, task=None),
    m.OutputStream(rank=2),
    m.Output(stream="stderr", lines=["loss 0.5", "", "épsilon ✓"]),
    m.OutputUpdate(stream="stdout", text="50%|#####     |"),
    m.Stacks(request=9, pid=4242, threads='Thread "MainThread"...', where="train.py:12 in step"),
    m.Log(text="hello from rank 1"),
    m.RankWarning(text="host h has 2 GPUs; 1 is unused"),
    m.Progress(step=5, epoch=None, total=100, samples=32, t=12.5, metrics={"loss": 0.25}),
    m.File(name="timeline.json", data=b"\x00\x01binary\xff"),
    m.Result(value=b"pickled"),
    m.Result(value=None),
    m.Error(error=RemoteError.capture(ValueError("bad shard"))),
    m.Payload(call=b"\x80\x05call"),
    m.Ack(),
    m.Abort(),
    m.Stop(),
    m.Stop(reason="rescale", peers_save=True),
    m.GraceWanted(),
    m.DumpStacks(request=9),
    m.TaskReport(task=1, host="worker-1", launcher="mpirun", exit_code=-9, tail="last line"),
    m.TaskReport(task=0, host="worker-0", launcher="direct", traceback="Traceback ...\nOSError: x"),
    m.Join(task=1, tasks=2, spark=m.SparkTask(17, 0, {"gpu": ["1"]}), entries=ENTRIES),
    m.Topology(tasks=[ENTRIES, ENTRIES], spark=[m.SparkTask(16, 0, {}), m.SparkTask(17, 0, {"gpu": ["1"]})]),
    m.BarrierJoin(round=3, partition=1, message="worker-1:2222"),
    m.BarrierRelease(round=3, messages=["worker-0:2222", "worker-1:2222"]),
    m.RunOver(),
    m.Exec(argv=["orted", "--daemonize"]),
    m.Exit(code=137, tail="killed"),
    m.Wait(),
    m.Fork(argv=["python", "-m", "sparkrunner.ranks.bootstrap"], env={"RANK": "1"}, cwd="/tmp"),
    m.Forked(pid=4242),
    m.StepAnatomy(
        window=3,
        steps=25,
        median={"step": 0.03, "data": 0.01, "comm": 0.005, "compute": 0.015, "own": 0.025},
        p95={"step": 0.05, "data": 0.02, "comm": 0.01, "compute": 0.02, "own": 0.04},
        host="worker-1",
        task=None,
        executor=None,
        final=False,
        span_s=0.8,
    ),
    m.Serve(driver="10.0.0.7:40001", secret=b"\x00secret", env={"MLFLOW_RUN_ID": "abc"}),
    m.StreamOpen(stream="s1", iteration=0, epoch=2, rank=1, world_size=4, rows_per_rank=96),
    m.StreamOpen("s1", 0, 2, 1, 4, 96, host="10.0.0.7", port=41234, token="9f2c"),
    m.StreamEnd(),
    m.StreamFailed(text="the feeder task of partition 2 failed"),
    m.StreamPassOver(),
    m.FeedStart(stream="s1", token="9f2c", partition=2, attempt=1),
    m.FeedBatch(offset=64, rows=32, ipc=b"ARROW1\x00"),
    m.FeedAck(),
    m.FeederStarted(stream="s1", pass_id=3, partition=2, attempt=1),
    m.FeederFinished(stream="s1", pass_id=3, partition=2),
]


def test_the_samples_cover_every_kind() -> None:
    """Independent oracle: the kinds are the subclasses of `Message`, not the codec's own table."""
    assert {type(s) for s in SAMPLES} == set(m.Message.__subclasses__())
    assert len({cls.kind for cls in m.Message.__subclasses__()}) == len(m.Message.__subclasses__())


@pytest.mark.parametrize("message", SAMPLES, ids=lambda s: f"{s.kind}")
def test_every_message_round_trips_through_the_wire_form(message: m.Message) -> None:
    kind, data = m.encode(message)
    assert kind == type(message).kind
    assert isinstance(data, dict)
    wire = pickle.loads(pickle.dumps((kind, data)))  # what the transport does with it
    decoded = m.decode(*wire)
    assert type(decoded) is type(message)
    assert decoded == message


def test_messages_are_frozen() -> None:
    with pytest.raises(AttributeError):
        m.Hello(rank=0, host="h", pid=1, task=None).rank = 1  # type: ignore[misc]


def test_an_unknown_kind_is_a_channel_error_naming_it() -> None:
    with pytest.raises(ChannelError, match="unknown kind 'shutdown_now'"):
        m.decode("shutdown_now", {})
    with pytest.raises(ChannelError, match="unknown kind 42"):
        m.decode(42, {})


@pytest.mark.parametrize(
    ("kind", "data", "named"),
    [
        ("hello", {"rank": 0, "host": "h", "pid": 1}, "'hello'.*fields \\['host', 'pid', 'rank'\\]"),
        (
            "hello",
            {"rank": 0, "host": "h", "pid": 1, "task": None, "launch": None, "extra": 1},
            "'hello'.*extra",
        ),
        ("hello", ("stdout", ["line"]), "'hello'.*fields tuple"),
        (
            "hello",
            {"rank": "0", "host": "h", "pid": 1, "task": None, "launch": None},
            "'hello'.*wrong type for rank",
        ),
        (
            "hello",
            {"rank": True, "host": "h", "pid": 1, "task": None, "launch": None},
            "'hello'.*wrong type for rank",
        ),
        ("output", {"stream": "stdout", "lines": "one line"}, "'output'.*wrong type for lines"),
        ("exit", {"code": None, "tail": ""}, "'exit'.*wrong type for code"),
        ("error", {"error": "ValueError: x"}, "'error'.*wrong type for error"),
        ("ack", None, "'ack'.*fields NoneType"),
    ],
)
def test_a_malformed_payload_is_a_channel_error_naming_the_kind(kind: str, data: object, named: str) -> None:
    with pytest.raises(ChannelError, match=named):
        m.decode(kind, data)


def test_int_fields_accept_no_float_but_float_fields_accept_int() -> None:
    progress = m.decode("progress", {**m.encode(SAMPLES[8])[1], "t": 3})
    assert isinstance(progress, m.Progress) and progress.t == 3
    with pytest.raises(ChannelError, match="wrong type for step"):
        m.decode("progress", {**m.encode(SAMPLES[8])[1], "step": 5.0})


class Inbox:
    """A typed server handler: every decoded message in a queue; answers `Wait` with `Exit`."""

    def __init__(self) -> None:
        self.received: queue.Queue[m.Message] = queue.Queue()
        self.disconnected = threading.Event()

    def handle(self, conn: Connection, message: m.Message) -> None:
        match message:
            case m.Wait():
                m.send(conn, m.Exit(code=0, tail="done"))
        self.received.put(message)

    def on_disconnect(self, conn: Connection) -> None:
        self.disconnected.set()


def test_messages_cross_a_real_encrypted_connection_both_ways() -> None:
    secret, inbox = new_secret(), Inbox()
    server = ChannelServer(secret, m.serving(inbox.handle), inbox.on_disconnect)
    conn = connect(("127.0.0.1", server.port), secret)
    try:
        sent = [s for s in SAMPLES if isinstance(s, (m.Progress, m.File, m.Error, m.Wait))]
        for message in sent:
            m.send(conn, message)
        assert m.receive(conn) == m.Exit(code=0, tail="done")
        assert [inbox.received.get(timeout=10) for _ in sent] == sent
    finally:
        conn.close()
        server.close()


def test_an_unknown_kind_on_a_real_connection_ends_that_connection_only() -> None:
    secret, inbox = new_secret(), Inbox()
    server = ChannelServer(secret, m.serving(inbox.handle), inbox.on_disconnect)
    conn = connect(("127.0.0.1", server.port), secret)
    other = connect(("127.0.0.1", server.port), secret)
    try:
        conn.send("no_such_kind", {"x": 1})
        assert inbox.disconnected.wait(10)
        with pytest.raises(ChannelError):
            conn.recv()  # the server hung up on it
        m.send(other, m.Wait())
        assert m.receive(other) == m.Exit(code=0, tail="done")
        assert inbox.received.get(timeout=10) == m.Wait()
        assert inbox.received.empty()
    finally:
        conn.close()
        other.close()
        server.close()
