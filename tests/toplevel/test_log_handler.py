"""One voice to the user: the `sparkrunner` logger hierarchy, a default driver handler that a user's replaces,
`SparkRunnerWarning` for warnings, and no bare print in the package."""

from __future__ import annotations

import ast
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrunner import Runner, errors
from sparkrunner.log_handler import DefaultHandler, install_default_handler
from sparkrunner.ranks.api import send_file_to_driver

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sparkrunner"
DRIVER = Path(__file__).with_name("log_handler_driver.py")
# where printing IS the product: the CLI's own output; the rank's own message when log_to_driver runs outside a
# run; the rsh agent, whose stderr is what mpirun shows of a failed remote launch
PRINT_ALLOWED = {"cli.py", "ranks/api.py", "tasks/rsh_agent.py"}


# SparkRunnerWarning and its subclasses, read from the errors module itself
WARNING_CLASSES = {
    name
    for name, value in vars(errors).items()
    if isinstance(value, type) and issubclass(value, errors.SparkRunnerWarning)
}


def _calls(path: Path) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)]


def _name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return func.id if isinstance(func, ast.Name) else ""


def _package_files() -> list[tuple[str, Path]]:
    return [(str(path.relative_to(PACKAGE)), path) for path in sorted(PACKAGE.rglob("*.py"))]


def test_no_bare_print_in_the_package() -> None:
    found = [
        f"{name}:{call.lineno}"
        for name, path in _package_files()
        if name not in PRINT_ALLOWED
        for call in _calls(path)
        if _name(call) == "print"
    ]
    assert not found, "print() outside the named exceptions (use the sparkrunner logger):\n" + "\n".join(
        found
    )


def test_every_warning_is_a_sparkrunner_warning_and_every_logger_is_named_after_its_module() -> None:
    bad = []
    for name, path in _package_files():
        for call in _calls(path):
            if _name(call) == "warnings.warn":
                category = (
                    call.args[1]
                    if len(call.args) > 1
                    else next((k.value for k in call.keywords if k.arg == "category"), None)
                )
                if not (isinstance(category, ast.Name) and category.id in WARNING_CLASSES):
                    bad.append(f"{name}:{call.lineno} warns without SparkRunnerWarning")
            if _name(call) == "logging.getLogger" and name != "log_handler.py":
                argument = call.args[0] if call.args else None
                if not (isinstance(argument, ast.Name) and argument.id == "__name__"):
                    bad.append(f"{name}:{call.lineno} logs outside the sparkrunner.<module> hierarchy")
    assert not bad, "\n".join(bad)


def _send_a_file() -> None:
    path = os.path.join(os.environ["VOICE_DIR"], "note.txt")
    with open(path, "w") as f:
        f.write("hello")
    send_file_to_driver(path)


def test_driver_messages_arrive_on_the_sparkrunner_logger(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    runner = Runner(
        np=-1, launcher="direct", tracking=False, progress=False, env={"VOICE_DIR": str(tmp_path)}
    )
    runner.run(_send_a_file)
    saved = runner.received_files["rank 0/note.txt"]  # the oracle: where the run says it saved the file
    [record] = [r for r in caplog.records if "note.txt" in r.getMessage()]
    assert record.name.startswith("sparkrunner.") and record.levelno == logging.INFO
    assert record.getMessage().endswith(f"saved on the driver as {saved}")


def _driver(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(DRIVER), *argv],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.slow
def test_the_default_handler_shows_sparkrunner_lines_on_stderr() -> None:
    done = _driver()
    saved = done.stdout.strip().splitlines()[-1]
    assert f"[sparkrunner] rank 0 sent note.txt; saved on the driver as {saved}\n" in done.stderr


@pytest.mark.slow
def test_a_user_handler_replaces_the_default_one() -> None:
    done = _driver("user")
    saved = done.stdout.strip().splitlines()[-1]
    assert (
        f"USER sparkrunner.driver.attempt.attempt_channel: rank 0 sent note.txt; saved on the driver as {saved}"
        in done.stderr
    )
    assert "[sparkrunner]" not in done.stderr


def test_the_default_handler_is_installed_once() -> None:
    install_default_handler()
    install_default_handler()
    assert sum(isinstance(h, DefaultHandler) for h in logging.getLogger("sparkrunner").handlers) == 1
