"""Where is this rank? Every thread's Python stack, formatted for the driver's `dump_stacks` and hang errors.

`thread_dump` formats `sys._current_frames()`. It answers from a background thread, so a main thread blocked in
C code that released the GIL (sleep, a Gloo/NCCL collective) is still seen.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import traceback
from types import FrameType
from typing import Any

_OWN_THREAD_PREFIX = "sparkrunner-"
_SPARKRUNNER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """The standard library's and the installed packages' folders (found when first asked: a rank's start
    does not need them)."""
    import sysconfig

    return tuple(
        {os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    )


def _is_user_file(filename: str) -> bool:
    """True for the user's code: not the standard library, not an installed package, not sparkrunner."""
    if filename.startswith("<"):
        return False
    path = os.path.realpath(filename)
    return not path.startswith(_library_dirs()) and not path.startswith(_SPARKRUNNER_DIR)


def _short(filename: str) -> str:
    return filename if _is_user_file(filename) else os.path.join(*filename.split(os.sep)[-3:])


def _frames(frame: FrameType) -> list[traceback.FrameSummary]:
    """The frames of one thread, outermost first, from the first user frame on (no bootstrap frames)."""
    stack = list(traceback.extract_stack(frame))
    first_user = next((i for i, f in enumerate(stack) if _is_user_file(f.filename)), 0)
    return stack[first_user:]


def where(frames: list[traceback.FrameSummary]) -> str:
    """One line: the innermost frame, and the innermost user frame that led there when they differ."""
    if not frames:
        return "no Python frame"
    inner = frames[-1]
    text = f"in {inner.name} ({_short(inner.filename)}:{inner.lineno})"
    users = [f for f in frames if _is_user_file(f.filename)]
    if users and users[-1] is not inner:
        text += f", called from {users[-1].name} ({users[-1].filename}:{users[-1].lineno})"
    return text


def thread_dump() -> dict[str, Any]:
    """Every thread's stack as text (the main thread and the user's threads first) and where main is."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main_id = threading.main_thread().ident
    entries = []
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue  # this answering thread
        name = names.get(ident, f"thread {ident}")
        frames = _frames(frame)
        order = 0 if ident == main_id else 2 if name.startswith(_OWN_THREAD_PREFIX) else 1
        entries.append((order, name, frames))
    entries.sort(key=lambda e: e[0])
    blocks = [
        f'Thread "{name}"{" (runs your function)" if order == 0 else ""}, most recent call last:\n'
        + "".join(traceback.format_list(frames))
        for order, name, frames in entries
        if order < 2
    ]
    own = [name for order, name, _ in entries if order == 2]
    if own:
        blocks.append(f"(sparkrunner's own threads, not shown: {', '.join(own)})\n")
    main_frames = next((frames for order, _, frames in entries if order == 0), [])
    return {"threads": "\n".join(blocks), "where": where(main_frames), "pid": os.getpid()}
