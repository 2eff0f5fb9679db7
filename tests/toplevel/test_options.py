"""`RunOptions` and its two checks: each bad option is refused by name, before anything starts."""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import subprocess
import sys
from typing import Any, get_args

import pytest

from sparkrunner import Runner, RunObserver
from sparkrunner.driver.launcher_choice import LAUNCHERS
from sparkrunner.errors import CheckpointDirError, InvalidArgumentError
from sparkrunner.options import (
    LauncherName,
    RunOptions,
    check_choice,
    check_number,
    option_docs,
    options_markdown,
)
from tests.helpers import ROOT


@pytest.mark.parametrize(
    ("value", "least", "integer", "above", "ok"),
    [
        (3, 1, True, False, True),
        (1, 1, True, False, True),
        (0, 1, True, False, False),
        (True, 0, True, False, False),  # a bool is not a count
        (2.0, 1, True, False, False),
        (0.5, 0, False, True, True),
        (0, 0, False, True, False),
        (0, 0, False, False, True),
        ("10", 0, False, False, False),
        (-7, None, True, False, True),
    ],
)
def test_check_number(value: Any, least: float | None, integer: bool, above: bool, ok: bool) -> None:
    if ok:
        assert check_number("n", value, least, integer=integer, above=above) is value
    else:
        with pytest.raises(InvalidArgumentError, match=rf"^n must be an? .*, not {value!r}$"):
            check_number("n", value, least, integer=integer, above=above)


def test_check_choice_lists_the_choices_of_a_literal() -> None:
    assert check_choice("launcher", "direct", LauncherName) == "direct"
    with pytest.raises(
        InvalidArgumentError, match=r"launcher='ssh' is unknown; use one of: 'auto', 'direct', 'mpirun'"
    ):
        check_choice("launcher", "ssh", LauncherName)


def test_the_launcher_names_are_the_launchers() -> None:
    assert set(get_args(LauncherName)) == {"auto", *LAUNCHERS}


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"np": "2"}, "np must be an int"),
        ({"np": 4, "ranks_per_task": 3}, "not a multiple of ranks_per_task=3"),
        ({"np": -2, "ranks_per_task": 2}, "ranks_per_task applies to Spark runs"),
        ({"np": -1, "on_stall": "panic"}, "on_stall='panic'"),
        ({"np": -1, "stall_timeout": 0}, "stall_timeout must be a number of seconds > 0"),
        ({"np": -1, "max_failures": -1}, "max_failures must be an int >= 0"),
        ({"np": -1, "stop_grace_s": -1}, "stop_grace_s must be a number of seconds >= 0"),
        ({"np": -1, "retry_if": 3}, "retry_if must be a function"),
        ({"np": -1, "use_gpu": "yes"}, "use_gpu='yes'"),
        ({"np": -1, "port_range": (1, 2)}, "port_range"),
    ],
)
def test_bad_options_are_refused_by_name(options: dict[str, Any], names: str) -> None:
    with pytest.raises(InvalidArgumentError, match=names):
        RunOptions(**options)


def test_a_resuming_spark_run_needs_a_checkpoint_dir() -> None:
    with pytest.raises(CheckpointDirError, match="checkpoint_dir"):
        RunOptions(np=2, max_failures=1)


def test_good_options_are_normalised_and_frozen() -> None:
    options = RunOptions(np=-2, env={"A": 1}, port_range="40000-40100")  # type: ignore[dict-item]
    assert options.env == {"A": "1"} and options.port_range == (40000, 40100)
    with pytest.raises(AttributeError):
        options.np = 3  # type: ignore[misc]


def test_runner_takes_exactly_the_declared_options_with_their_defaults() -> None:
    """`RunOptions` is the one source: `Runner`'s keyword arguments are its fields, with the same defaults."""
    parameters = inspect.signature(Runner.__init__).parameters
    declared = {f.name: f for f in dataclasses.fields(RunOptions) if f.name != "np_range"}
    assert [p for p in parameters if p != "self"] == list(declared)
    for name, f in declared.items():
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        given = parameters[name].default
        assert name == "np" or given == default or (given is None and default == {}), (name, given, default)
    assert all(len(doc) > 20 for doc in option_docs().values()), option_docs()
    assert all(f"{name}:" in (Runner.__doc__ or "") for name in declared)


def test_the_options_table_shows_each_declared_default_and_not_an_override() -> None:
    """The docs table's default column, read back, is `Runner`'s signature; a timing's default is the declared
    one, whatever SPARKRUNNER_START_TIMEOUT_S says in the process that makes the table."""
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*?) \| ", options_markdown(), re.M))
    signature = inspect.signature(Runner).parameters
    assert list(rows) == [p for p in signature if p != "self"]
    assert rows["np"] == "required" and rows["launcher"] == '`"auto"`' and rows["env"] == "`{}`"
    for name in ("timeout", "max_failures", "progress", "observers", "on_stall"):
        assert rows[name] == f"`{signature[name].default!r}`".replace("'", '"'), name
    code = "from sparkrunner.options import options_markdown, RunOptions; print(RunOptions(np=-1).start_timeout); "
    code += "print(options_markdown())"
    env = {**os.environ, "SPARKRUNNER_START_TIMEOUT_S": "7", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.startswith("7.0\n")
    assert "| `start_timeout` | `600` (`SPARKRUNNER_START_TIMEOUT_S`) |" in done.stdout


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"observers": "not a list"}, "observers must be a list"),
        ({"observers": [object()]}, "RunObserver instances"),
        ({"observers": [RunObserver]}, "the class RunObserver"),
        ({"tracking": 3}, "tracking must be None, True, False"),
        ({"tracking": ""}, "tracking must be None, True, False"),
    ],
)
def test_observers_and_tracking_are_checked_before_anything_starts(
    options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=named):
        Runner(np=-2, **options)
