"""One implementation each: /proc stat parsing, local slot counting, and the environment names."""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import psutil
import pytest

from sparkrunner.common.environment import Env
from sparkrunner.placement.slots import local_cores
from sparkrunner.system.processes import ProcStat, parse_stat, proc_stat
from sparkrunner.timeouts import TIMINGS

PACKAGE = Path(__file__).resolve().parents[2] / "sparkrunner"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            b"42 (python3) S 7 42 42 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 3955335 3133440",
            ProcStat("S", 7, 3955335),
        ),
        # a command name with a space and a ')'
        (b"43 (a b) c) T 1 43 43 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 17 3133440", ProcStat("T", 1, 17)),
        (b"44 (x) Z 9 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 123456 0", ProcStat("Z", 9, 123456)),
    ],
)
def test_parse_stat(raw: bytes, expected: ProcStat) -> None:
    assert parse_stat(raw) == expected


def test_proc_stat_of_this_process_and_of_a_gone_one() -> None:
    stat = proc_stat(os.getpid())
    assert stat is not None and stat.ppid == os.getppid() and stat.state in ("R", "S")
    started = psutil.boot_time() + stat.start_ticks / os.sysconf("SC_CLK_TCK")
    assert started == pytest.approx(psutil.Process().create_time(), abs=0.05)
    child = subprocess.Popen(["true"])
    child.wait()  # reaped: its /proc entry is gone
    assert proc_stat(child.pid) is None


@pytest.mark.parametrize(
    ("master", "cores"),
    [
        ("local", 1),
        ("local[3]", 3),
        ("local[4,2]", 4),
        ("local[*]", os.cpu_count()),
        ("local-cluster[2,3,1024]", 6),
        ("local-cluster[2, 1, 1024]", 2),
        ("spark://host:7077", None),
        ("yarn", None),
    ],
)
def test_local_cores(master: str, cores: int | None) -> None:
    assert local_cores(master) == cores


def _string_constants(path: Path) -> list[tuple[int, str]]:
    """String literals of `path`, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


@pytest.mark.parametrize(
    ("text", "home"),
    [
        # ml/model_cache.py travels in logged models, where sparkrunner may not be installed
        ("SPARKRUNNER_", {"common/environment.py", "timeouts.py", "ml/model_cache.py"}),
        ("CUDA_VISIBLE_DEVICES", {"common/environment.py"}),
    ],
)
def test_environment_names_are_spelled_in_one_place(text: str, home: set[str]) -> None:
    strays = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in home
        for line, value in _string_constants(path)
        if text in value
    ]
    assert not strays, f"{text!r} spelled outside {sorted(home)}: {strays}"


def test_the_stop_grace_override_is_the_variable_ranks_read() -> None:
    assert TIMINGS["STOP_GRACE_S"].env == Env.STOP_GRACE_S
