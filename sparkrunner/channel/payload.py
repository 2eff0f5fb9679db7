"""Cloudpickle envelopes for the training function, its arguments, results and exceptions."""

from __future__ import annotations

import inspect
import io
import os
import pickle
import pickletools
import runpy
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import CodeType, TracebackType
from typing import Any

import cloudpickle

from sparkrunner.errors import DoNotRetry, InvalidArgumentError, NotPicklableError, RankFailedError

_HINTS = {
    "SparkSession": "a SparkSession lives only on the driver; pass data paths or values instead",
    "SparkContext": "a SparkContext lives only on the driver; pass data paths or values instead",
    "DataFrame": "a Spark DataFrame lives on the driver; materialize it (sparkrunner.data) and pass the handle",
    "lock": "locks cannot cross processes; create it inside the function",
    "RLock": "locks cannot cross processes; create it inside the function",
    "socket": "sockets cannot cross processes; open it inside the function",
}


_FILE_SENT_APART = "<sparkrunner: file sent beside the code>"


class _SourcePickler(cloudpickle.Pickler):
    """Cloudpickle that keeps the file of every code object it sends by value (cloudpickle >= 3.1.3 writes
    "<dynamic-code>" there), so tracebacks and stack dumps from the ranks show the user's file and lines."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is CodeType and obj.co_filename != _FILE_SENT_APART:
            return _with_file, (obj.replace(co_filename=_FILE_SENT_APART), obj.co_filename)
        return super().reducer_override(obj)


def _with_file(code: CodeType, filename: str) -> CodeType:
    """On the rank: the unpickled code object with its own file again (its nested code came back the same way)."""
    return code.replace(co_filename=filename)


def dumps_call(main: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """Serialize ``main(*args, **kwargs)``; a `main` that is no function, or an object that cannot be pickled, is
    refused by name."""
    if not callable(main):
        raise InvalidArgumentError(
            f"main must be a function to run on every rank (or a script's path), not a {type(main).__name__}"
        )
    try:
        buffer = io.BytesIO()
        _SourcePickler(buffer, protocol=pickle.DEFAULT_PROTOCOL).dump((main, args, kwargs))
        return buffer.getvalue()
    except Exception as exc:
        culprit = _find_culprit(main, args, kwargs)
        raise NotPicklableError(_explain(culprit, exc)) from exc


def loads(data: bytes) -> Any:
    return pickle.loads(data)


def pickled_type_name(pickled: bytes) -> str:
    """The class a pickled value names first (its own, or its first element's): ``module.Name``; what the driver
    says of a result it cannot unpickle."""
    strings: list[str] = []
    try:
        for opcode, arg, _ in pickletools.genops(pickled):
            if opcode.name in ("GLOBAL", "INST"):
                return str(arg).replace(" ", ".")
            if opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                return f"{strings[-2]}.{strings[-1]}"
            if isinstance(arg, str):
                strings.append(arg)
    except Exception:  # not a pickle this can read: say so rather than guess
        pass
    return "value whose type its pickle does not name"


def _explain(culprit: tuple[str, Any] | None, exc: Exception) -> str:
    if culprit is None:
        return f"the training function cannot be pickled: {exc}"
    where, obj = culprit
    type_name = type(obj).__name__
    hint = _HINTS.get(type_name, "create it inside the function, or pass something that can be pickled")
    return f"{where} (a {type_name}) cannot be pickled and sent to the ranks: {exc}. Hint: {hint}."


def _candidates(
    main: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Iterator[tuple[str, Any]]:
    for i, value in enumerate(args):
        yield f"positional argument {i}", value
    for key, value in kwargs.items():
        yield f"argument {key!r}", value
    try:
        closure = inspect.getclosurevars(main)
    except (TypeError, ValueError):
        return
    for name, value in closure.nonlocals.items():
        yield f"variable {name!r} captured by {getattr(main, '__name__', 'the function')}", value
    for name, value in closure.globals.items():
        yield f"global {name!r} used by {getattr(main, '__name__', 'the function')}", value


def _find_culprit(
    main: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, Any] | None:
    for where, value in _candidates(main, args, kwargs):
        if inspect.ismodule(value):
            continue
        try:
            cloudpickle.dumps(value)
        except Exception:
            return where, value
    return None


# sparkrunner's own files, and runpy (script mode), as they appear in code objects ("<frozen runpy>" on 3.11+)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OWN_CODE = (_PACKAGE_DIR + os.sep, str(runpy.__file__), "<frozen runpy>")


def user_frames(tb: TracebackType | None) -> TracebackType | None:
    """`tb` without its leading sparkrunner (and runpy) frames; the last frame stays if all are ours."""
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename.startswith(_OWN_CODE):
        tb = tb.tb_next
    return tb


@dataclass(frozen=True)
class RemoteError:
    """An exception raised on a rank, in a form that always crosses the wire."""

    exc_type: str
    message: str
    traceback: str
    pickled: bytes | None

    @classmethod
    def capture(cls, exc: BaseException) -> RemoteError:
        try:
            pickled: bytes | None = cloudpickle.dumps(exc)
        except Exception:  # a DoNotRetry must reach the driver as one (it is matched by type): keep its text
            pickled = cloudpickle.dumps(DoNotRetry(str(exc))) if isinstance(exc, DoNotRetry) else None
        kind = type(exc)
        name = (
            kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        )
        return cls(name, str(exc), "".join(traceback.format_exception(exc)), pickled)

    @classmethod
    def capture_user_error(cls, exc: BaseException) -> RemoteError:
        """Like `capture`, minus sparkrunner's own leading frames, so the traceback starts in the user's code."""
        return cls.capture(exc.with_traceback(user_frames(exc.__traceback__)))

    def to_error(self, rank: int) -> RankFailedError:
        original: BaseException | None = None
        if self.pickled is not None:
            try:
                original = pickle.loads(self.pickled)
            except Exception:
                original = None
        return RankFailedError(rank, self.exc_type, self.message, self.traceback, original)
