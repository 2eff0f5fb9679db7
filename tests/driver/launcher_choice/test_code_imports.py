"""What `driver.launcher_choice.code_imports` reads from a run's code without running it: the modules a function imports
(inline, in nested functions, in the functions of its module it calls, through module globals and closures), a
script's imports, and None where there is no code to read."""

from __future__ import annotations

import functools
import importlib
import json
import sys
from pathlib import Path

import cloudpickle
import pytest

from sparkrunner.driver.launcher_choice.code_imports import imported_modules
from sparkrunner.script import module_call, script_call


def inline_import() -> None:
    import xml.dom  # noqa: F401


def calls_a_helper() -> None:
    inline_import()


def through_a_global() -> str:
    return json.dumps({})


def nested() -> object:
    def inner() -> None:
        import sqlite3  # noqa: F401

    return inner


def test_a_function_s_own_and_nested_imports() -> None:
    assert imported_modules(inline_import) == {"xml"}
    assert imported_modules(nested) == {"sqlite3"}


def test_functions_of_its_module_and_modules_it_refers_to() -> None:
    assert imported_modules(calls_a_helper) == {"xml"}
    assert imported_modules(through_a_global) == {"json"}


def test_partials_decorated_functions_and_closures() -> None:
    @functools.wraps(inline_import)
    def wrapper() -> None:
        return inline_import()

    module = json

    def closure() -> str:
        return module.dumps(1)

    assert imported_modules(functools.partial(inline_import)) == {"xml"}
    assert imported_modules(wrapper) == {"xml"}
    assert imported_modules(closure) == {"json"}


def test_modules_shipped_by_value_count_with_their_whole_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "users_lib.py").write_text("import sqlite3\n\ndef train():\n    import xml.dom\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    users_lib = importlib.import_module("users_lib")
    train = users_lib.train

    def via_module() -> None:
        users_lib.train()

    def via_function() -> None:
        train()

    assert imported_modules(via_module) == {"users_lib"}  # installed code: only its name
    cloudpickle.register_pickle_by_value(users_lib)
    try:
        assert imported_modules(via_module) == {"users_lib", "sqlite3", "xml"}
        assert imported_modules(via_function) == {"xml"}
    finally:
        cloudpickle.unregister_pickle_by_value(users_lib)
        sys.modules.pop("users_lib")


def test_a_script_s_imports(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import os.path\nfrom mpi4py import MPI\ndef f():\n    import horovod.torch\n")
    assert imported_modules(script_call(script, (), None)) == {"os", "mpi4py", "horovod"}


@pytest.mark.parametrize("main", [print, module_call("json.tool", (), None)], ids=["builtin", "module"])
def test_no_readable_code_is_none(main: object) -> None:
    assert imported_modules(main) is None
