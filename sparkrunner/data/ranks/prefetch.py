"""Run an iterator in a background thread with at most `depth` items waiting, and stop it cleanly."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from sparkrunner.timeouts import PREFETCH_JOIN_S, PREFETCH_POLL_S

T = TypeVar("T")

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def prefetched(produce: Callable[[], Iterator[T]], depth: int) -> Iterator[T]:
    """Yield what `produce()` yields, read ahead by a thread holding at most `depth` items in memory.

    When the consumer stops early (break, exception, close) the thread is told to stop and is joined before
    this generator returns; an exception in the producer is re-raised in the consumer.
    """
    items: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    thread = threading.Thread(
        target=_fill, args=(produce, items, stop), name="sparkrunner-prefetch", daemon=True
    )
    thread.start()
    try:
        while True:
            item = items.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stop.set()
        _drain(items)
        thread.join(PREFETCH_JOIN_S)


def _fill(produce: Callable[[], Iterator[Any]], items: queue.Queue[Any], stop: threading.Event) -> None:
    source = produce()
    try:
        for item in source:
            if not _put(items, item, stop) or stop.is_set():
                return
        _put(items, _DONE, stop)
    except BaseException as error:
        _put(items, _Failure(error), stop)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def _put(items: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
    """Wait for room in the queue unless the consumer has gone; False when it has."""
    while not stop.is_set():
        try:
            items.put(item, timeout=PREFETCH_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _drain(items: queue.Queue[Any]) -> None:
    while True:
        try:
            items.get_nowait()
        except queue.Empty:
            return
