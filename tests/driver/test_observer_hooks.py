"""A real `AttemptChannel` hands what a rank sends to an observer's typed hooks (a rank played by this test)."""

from __future__ import annotations

import os
import shutil
from typing import Any

from sparkrunner.channel import connect
from sparkrunner.channel import messages as m
from sparkrunner.channel.payload import RemoteError, dumps_call
from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.errors import RankFailedError
from sparkrunner.observe.events import ProgressEvent
from sparkrunner.observe.observers import Observers, RunObserver


class Calls(RunObserver):
    """Records every typed hook call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_rank_start(self, rank: int) -> None:
        self.calls.append(("start", rank))

    def on_progress(self, rank: int, progress: ProgressEvent) -> None:
        self.calls.append(("progress", rank, progress))

    def on_rank_output(self, rank: int, stream: str, lines: list[str]) -> None:
        self.calls.append(("output", rank, stream, lines))

    def on_rank_log(self, rank: int, text: str) -> None:
        self.calls.append(("log", rank, text))

    def on_file(self, rank: int, name: str, path: str) -> None:
        with open(path, "rb") as f:
            self.calls.append(("file", rank, name, f.read()))
        shutil.rmtree(os.path.dirname(path))

    def on_rank_exit(self, rank: int, error: RankFailedError | None) -> None:
        self.calls.append(("exit", rank, error and (error.rank, error.exc_type)))


class Broken(RunObserver):
    def on_progress(self, rank: int, progress: ProgressEvent) -> None:
        raise RuntimeError("observer bug")


def test_each_rank_message_reaches_its_typed_hook_in_order() -> None:
    calls = Calls()
    session = AttemptChannel(
        dumps_call(print, (), {}), 2, "log_callback_only", "127.0.0.1", Observers([Broken(), calls])
    )
    progress = m.Progress(step=1, epoch=0, total=10, samples=8, t=1.5, metrics={"loss": 2.0})
    rank = connect(("127.0.0.1", session.port), session.secret)
    try:
        m.send(rank, m.Hello(rank=1, host="h", pid=os.getpid(), task=None))
        assert isinstance(m.receive(rank), m.Payload)
        for message in (
            m.Output("stdout", ["a", "b"]),
            progress,
            m.Log("note"),
            m.File("t.json", b"{}"),
            m.Error(RemoteError.capture(KeyError("k"))),
        ):
            m.send(rank, message)
        assert m.receive(rank) == m.Ack()  # sent after the last hook ran
    finally:
        rank.close()
        session.close()
    assert calls.calls == [
        ("start", 1),  # its Hello
        ("output", 1, "stdout", ["a", "b"]),
        ("progress", 1, ProgressEvent(step=1, epoch=0, total=10, samples=8, t=1.5, metrics={"loss": 2.0})),
        ("log", 1, "note"),
        ("file", 1, "t.json", b"{}"),
        ("exit", 1, (1, "KeyError")),
    ]
    # observers get the public event type, not the wire message (a protocol change is not an API change)
    assert type(calls.calls[2][2]) is ProgressEvent
