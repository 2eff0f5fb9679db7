"""Script mode: run a training script, or a module (``python -m`` style), as ``__main__`` on every rank.

The script's source and an optional directory of helper modules (zipped) travel inside the payload, so
neither has to exist where the ranks run. A script that exits with a non-zero code fails its rank.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import os
import runpy
import shutil
import sys
import tempfile
import types
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkrunner.errors import InvalidArgumentError, ScriptExitError

MAX_CODE_DIR_BYTES = 100 * 2**20
_SKIPPED_DIRS = {"__pycache__", ".git", ".venv", ".mypy_cache", ".pytest_cache", ".ipynb_checkpoints"}


@dataclass(frozen=True)
class ScriptCall:
    """A picklable call that runs a script (`source` given) or a module (`source` None) as ``__main__``."""

    target: str
    argv: tuple[str, ...]
    source: bytes | None
    code_zip: bytes | None

    @property
    def name(self) -> str:
        return os.path.basename(self.target) if self.source is not None else f"-m {self.target}"

    def __call__(self) -> None:
        with _shipped_code(self.code_zip) as code_dir, _as_main(self.target, self.argv, code_dir):
            try:
                if self.source is None:
                    runpy.run_module(self.target, run_name="__main__", alter_sys=True)
                else:
                    _exec_as_main(self.target, self.source)
            except SystemExit as exc:
                code = _exit_code(exc)
                if code != 0:
                    detail = "" if isinstance(exc.code, int) else str(exc.code)
                    # the traceback of the sys.exit call, not of this frame
                    raise ScriptExitError(self.name, code, detail).with_traceback(exc.__traceback__) from None


def script_call(path: str | os.PathLike[str], argv: tuple[Any, ...], code_dir: Any) -> ScriptCall:
    """The call for script `path` with `argv`; checks the script exists and compiles before anything starts."""
    target = os.path.abspath(os.fspath(path))
    if not os.path.isfile(target):
        raise InvalidArgumentError(f"the script {target!r} does not exist (or is not a file) on the driver")
    source = Path(target).read_bytes()
    try:
        compile(source, target, "exec")
    except SyntaxError as exc:
        raise InvalidArgumentError(f"{target} cannot run: {exc.msg} (line {exc.lineno})") from exc
    return ScriptCall(target, _argv(argv), source, _zipped(code_dir))


def module_call(name: str, argv: tuple[Any, ...], code_dir: Any) -> ScriptCall:
    """The call for module `name` (as ``python -m name``), importable on the ranks or shipped in `code_dir`."""
    if not isinstance(name, str) or not all(part.isidentifier() for part in name.split(".")):
        raise InvalidArgumentError(f"run_module takes a dotted module name such as 'pkg.train', not {name!r}")
    return ScriptCall(name, _argv(argv), None, _zipped(code_dir))


def _argv(argv: tuple[Any, ...]) -> tuple[str, ...]:
    for arg in argv:
        if isinstance(arg, bool) or not isinstance(arg, (str, int, float, os.PathLike)):
            raise InvalidArgumentError(
                f"script arguments are command-line strings (e.g. '--lr', '0.1'), not a {type(arg).__name__}"
            )
    return tuple(os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in argv)


def _zipped(code_dir: Any) -> bytes | None:
    """The folder's Python code and data as zip bytes (caches, VCS and hidden folders left out)."""
    if code_dir is None:
        return None
    root = Path(os.fspath(code_dir))
    if not root.is_dir():
        raise InvalidArgumentError(f"code_dir={os.fspath(code_dir)!r} is not a directory on the driver")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
            for file in sorted(files):
                path = Path(folder, file)
                archive.write(path, path.relative_to(root).as_posix())
                if buffer.tell() > MAX_CODE_DIR_BYTES:
                    raise InvalidArgumentError(
                        f"code_dir={str(root)!r} holds more than {MAX_CODE_DIR_BYTES // 2**20} MiB; ship code "
                        f"only, and read data from storage every rank can reach"
                    )
    return buffer.getvalue()


@contextlib.contextmanager
def _shipped_code(code_zip: bytes | None) -> Iterator[str | None]:
    """Unpack the shipped folder into a private temporary directory for the life of the call."""
    if code_zip is None:
        yield None
        return
    folder = tempfile.mkdtemp(prefix="sparkrunner-code-")
    try:
        with zipfile.ZipFile(io.BytesIO(code_zip)) as archive:
            archive.extractall(folder)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _as_main(target: str, argv: tuple[str, ...], code_dir: str | None) -> Iterator[None]:
    """``sys.argv`` and ``sys.path`` as ``python target argv...`` would set them, restored afterwards."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [target, *argv]
    first = code_dir if code_dir is not None else os.path.dirname(target)
    sys.path.insert(0, first or os.getcwd())
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _exec_as_main(path: str, source: bytes) -> None:
    """Execute the script's source as module ``__main__``; its lines show in tracebacks even off the driver."""
    text = source.decode("utf-8", "replace")
    linecache.cache[path] = (len(text), None, text.splitlines(True), path)
    module = types.ModuleType("__main__")
    module.__file__ = path
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    try:
        exec(compile(source, path, "exec"), module.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _exit_code(exc: SystemExit) -> int:
    """The process exit code ``sys.exit(arg)`` means: None -> 0, an int -> itself, anything else -> 1."""
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else 1
