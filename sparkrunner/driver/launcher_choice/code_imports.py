"""The top-level modules a run's code imports, read from its bytecode without running it: how
``launcher="auto"`` tells code that needs MPI (Horovod over MPI, mpi4py) from code that does not."""

from __future__ import annotations

import dis
import functools
import inspect
import types
from collections.abc import Iterator

import cloudpickle

from sparkrunner.script import ScriptCall


def imported_modules(main: object) -> frozenset[str] | None:
    """Top-level names of the modules `main` imports: a function's own code and nested functions, the modules
    it refers to and the functions it calls that travel with it (of its own module, or of a module cloudpickle
    ships by value, whose whole source counts), or a script's source. None when the code cannot be read (a
    module run as ``__main__``, a callable with no Python code)."""
    if isinstance(main, ScriptCall):
        if main.source is None:
            return None
        return frozenset(_imports_in(compile(main.source, main.target, "exec")))
    function = _function_of(main)
    if function is None:
        return None
    found: set[str] = set()
    _scan(function, {function.__module__, *cloudpickle.list_registry_pickle_by_value()}, found, set())
    return frozenset(found)


def _function_of(main: object) -> types.FunctionType | None:
    """The Python function behind a function, a decorated function, a partial, a method or a callable object."""
    while isinstance(main, functools.partial):
        main = main.func
    main = getattr(main, "__func__", main)  # a bound method
    if not isinstance(main, types.FunctionType):
        main = inspect.getattr_static(type(main), "__call__", None)
    return inspect.unwrap(main) if isinstance(main, types.FunctionType) else None


def _scan(function: types.FunctionType, shipped: set[str], found: set[str], seen: set[int]) -> None:
    """Adds what `function` imports or refers to, following the functions it calls that travel with it (those
    of the modules and packages named in `shipped`)."""
    if id(function.__code__) in seen:
        return
    seen.add(id(function.__code__))
    found.update(_imports_in(function.__code__))
    cells = [cell.cell_contents for cell in function.__closure__ or () if _filled(cell)]
    names = {name for code in _codes(function.__code__) for name in code.co_names}
    for value in [*cells, *(function.__globals__[n] for n in names if n in function.__globals__)]:
        if isinstance(value, types.ModuleType):
            found.add(value.__name__.partition(".")[0])
            if _within(value.__name__, shipped) and id(value) not in seen:
                seen.add(id(value))
                found.update(_module_imports(value))
        elif isinstance(value, types.FunctionType) and _within(value.__module__, shipped):
            _scan(value, shipped, found, seen)


def _within(module: str | None, shipped: set[str]) -> bool:
    return module is not None and any(module == name or module.startswith(f"{name}.") for name in shipped)


def _module_imports(module: types.ModuleType) -> set[str]:
    """What a shipped module's source imports (empty when it has no Python source here)."""
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return set()
    with open(path, "rb") as source:
        return set(_imports_in(compile(source.read(), path, "exec")))


def _imports_in(code: types.CodeType) -> Iterator[str]:
    for inner in _codes(code):
        for instruction in dis.get_instructions(inner):
            if instruction.opname == "IMPORT_NAME" and instruction.argval:
                yield str(instruction.argval).partition(".")[0]


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """`code` and every code object nested in it (inner functions, classes, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018  (an empty cell raises)
    except ValueError:
        return False
    return True
