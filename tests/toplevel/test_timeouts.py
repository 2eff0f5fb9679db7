"""`sparkrunner.timeouts`: every timing named there, and its environment overrides."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from sparkrunner import timeouts

ROOT = Path(__file__).resolve().parents[2]
# docs/timeouts.md's table is checked against `timeouts.markdown_table()` by tests/layout/test_docs.py


def test_each_constant_is_registered_under_its_own_name() -> None:
    """`X = _timing("X", ...)` for every constant: a copy-paste slip would give a variable another's override."""
    tree = ast.parse(Path(timeouts.__file__).read_text())
    registered = {
        node.targets[0].id: node.value.args[0].value  # type: ignore[attr-defined]
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        and getattr(node.value.func, "id", None) == "_timing"
    }  # fmt: skip
    assert registered and all(variable == name for variable, name in registered.items()), registered
    assert set(registered) == set(timeouts.TIMINGS)
    assert all(getattr(timeouts, name) == t.value for name, t in timeouts.TIMINGS.items())


def test_no_timing_constant_is_defined_outside_the_timeouts_module() -> None:
    """A module-level ``SOMETHING_S = 1.0`` elsewhere in the package is a timing that escaped the table."""
    strays = []
    for path in (ROOT / "sparkrunner").rglob("*.py"):
        if path.name == "timeouts.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.endswith(("_S", "TIMEOUT"))
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, (int, float))
            ):
                strays.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.targets[0].id}")
    assert not strays, "timings outside sparkrunner/timeouts.py:\n" + "\n".join(strays)


def _value_in_fresh_interpreter(name: str, env_value: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, f"SPARKRUNNER_{name}": env_value, "PYTHONPATH": str(ROOT)}
    code = f"from sparkrunner import timeouts; print(timeouts.{name})"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)


def test_an_environment_variable_overrides_a_default() -> None:
    done = _value_in_fresh_interpreter("HANDSHAKE_TIMEOUT_S", "42.5")
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == 42.5 != timeouts.TIMINGS["HANDSHAKE_TIMEOUT_S"].default


def test_a_bad_override_is_refused_with_the_variables_name() -> None:
    done = _value_in_fresh_interpreter("SLOTS_POLL_S", "soon")
    assert done.returncode != 0
    assert "InvalidArgumentError" in done.stderr and "SPARKRUNNER_SLOTS_POLL_S='soon'" in done.stderr
