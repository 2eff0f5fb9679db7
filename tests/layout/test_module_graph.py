"""The package's import graph: layered by process role, read from the folders, and free of cycles.

Where a module runs is said by its folder: a `ranks/` folder (`sparkrunner/ranks/`, `sparkrunner/data/ranks/`)
holds code that runs in a rank process; a `tasks/` folder code that runs in Spark's barrier tasks and a `workers/`
folder code that Spark's ordinary Python workers run (`sparkrunner/ml/workers/`, `sparkrunner/data/workers/`):
both run in Spark's Python workers, so both have the role "task" and its rules; `driver/`,
`placement/`, `observe/` and `compat/` code that runs on the driver only. Everything else is shared and imports
neither side. Of the top-level modules, the driver's entry points (`runner`, `cli`, `check`, `__main__`) run on
the driver. The package root is the public facade: every rank imports it, so what it imports at once must be
rank-side or shared; the rest it loads lazily. A top-level module made of imports alone (and its `__all__`) is a
facade too: a public name for code that lives in its role's folder (`sparkrunner.lightning` for
`sparkrunner.ranks.lightning`).

Every import counts: those inside functions (they run when called), and, for the cycle between packages, those
under `TYPE_CHECKING` too (they still tie the packages together for a reader and for mypy).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sparkrunner"

RANK_FOLDERS = {"ranks"}
TASK_FOLDERS = {"tasks", "workers"}
DRIVER_FOLDERS = {"driver", "placement", "observe", "compat"}
TOP_LEVEL_ROLES = {
    "runner": "driver",
    "cli": "driver",
    "check": "driver",
    "__main__": "driver",
}
# what each role may not import (at run time, counting function-level imports and the packages they load)
FORBIDDEN = {
    "rank": ("driver", "task"),
    "task": ("driver", "rank"),
    "driver": ("rank",),
    "shared": ("driver", "rank", "task"),
    "facade": ("driver", "task"),
}
MAX_TOP_LEVEL_MODULES = 13


@dataclass(frozen=True)
class Import:
    target: str
    type_only: bool


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _files() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _type_only(tree: ast.Module) -> set[ast.AST]:
    """Nodes under `if TYPE_CHECKING:`: imported for mypy only, they never run in any process."""
    blocks = [
        n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test).endswith("TYPE_CHECKING")
    ]
    return {inner for block in blocks for stmt in block.body for inner in ast.walk(stmt)}


def _imports(path: Path, modules: set[str]) -> set[Import]:
    """Modules of the package that `path` imports anywhere; `from pkg import submodule` counts as the submodule."""
    found: set[Import] = set()
    tree = ast.parse(path.read_text())
    type_only = _type_only(tree)
    for node in ast.walk(tree):
        targets: set[str] = set()
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
            subs = {f"{node.module}.{a.name}" for a in node.names} & modules
            targets = subs or {node.module}
        elif isinstance(node, ast.Import):
            targets = {a.name for a in node.names} & modules
        found |= {Import(t, node in type_only) for t in targets}
    return found


def _graph() -> dict[str, set[Import]]:
    files = _files()
    return {name: _imports(path, set(files)) for name, path in files.items()}


def _runtime_graph(with_packages: bool = False) -> dict[str, set[str]]:
    """Each module's run-time imports; `with_packages`: and the packages above them short of the root (importing
    a module runs their `__init__`s)."""
    result: dict[str, set[str]] = {}
    for module, imports in _graph().items():
        targets = {i.target for i in imports if not i.type_only}
        if with_packages:
            targets |= {
                ".".join(t.split(".")[:n]) for t in targets for n in range(2, t.count(".") + 1)
            } & _packages()
        result[module] = targets - {module}
    return result


def _only_imports(module: str) -> bool:
    """The module's body is its docstring, imports and `__all__`, nothing else: it only gives names a place."""
    body = ast.parse(_files()[module].read_text()).body
    docstring = body[:1] if body and isinstance(body[0], ast.Expr) else []
    return all(
        isinstance(stmt, ast.Import | ast.ImportFrom)
        or (isinstance(stmt, ast.Assign) and [ast.unparse(t) for t in stmt.targets] == ["__all__"])
        for stmt in body[len(docstring) :]
    )


def role(module: str) -> str:
    """'rank', 'task', 'driver', 'shared', or 'facade' (the package root, or a top-level module of imports only),
    read from the module's folders."""
    parts = module.split(".")[1:]
    if not parts or (len(parts) == 1 and module not in _packages() and _only_imports(module)):
        return "facade"
    folders = set(parts if module in _packages() else parts[:-1])
    for name, role_folders in (("rank", RANK_FOLDERS), ("task", TASK_FOLDERS), ("driver", DRIVER_FOLDERS)):
        if folders & role_folders:
            return name
    return TOP_LEVEL_ROLES.get(parts[0], "shared") if len(parts) == 1 else "shared"


@functools.cache
def _packages() -> set[str]:
    return {name for name, path in _files().items() if path.name == "__init__.py"}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, set()) - {node}):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _package_of(module: str) -> str:
    """The package-level node: a top-level subpackage or module (`sparkrunner.data.ranks.loader` -> `data`)."""
    return module.split(".")[1]


def package_graph() -> dict[str, set[str]]:
    """Edges between the top-level packages and modules, every import counted (TYPE_CHECKING included); the
    root, the public facade that loads the rest lazily, is left out."""
    edges: dict[str, set[str]] = {}
    for module, imports in _graph().items():
        if module == "sparkrunner":
            continue
        source = _package_of(module)
        targets = {_package_of(i.target) for i in imports if i.target != "sparkrunner"}
        edges.setdefault(source, set()).update(targets - {source})
    return edges


def test_no_import_cycles_between_modules() -> None:
    graph = _runtime_graph()
    assert len(graph) > 20, "the scan found too few modules to be meaningful"
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph) or [])}"


def test_no_cycle_between_packages() -> None:
    graph = package_graph()
    assert len(graph) > 15, f"the scan found too few packages to be meaningful: {sorted(graph)}"
    cycle = _cycle(graph)
    assert cycle is None, (
        f"packages import each other (TYPE_CHECKING and function-level imports count): {cycle}"
    )


def test_each_role_imports_only_what_runs_in_its_process() -> None:
    graph = _runtime_graph(with_packages=True)
    crossings = [
        f"{module} ({role(module)}) imports {target} ({role(target)})"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if role(target) in FORBIDDEN[role(module)]
    ]
    assert not crossings, "imports across process roles:\n" + "\n".join(crossings)


def test_no_arrow_runs_back_up_to_the_package_root() -> None:
    """Only a facade imports the package root (`import sparkrunner`): any other module would load the public
    facade from below (`__version__` has a module of its own, `sparkrunner.common.version`)."""
    upward = [
        m
        for m, imports in _graph().items()
        if role(m) != "facade" and any(i.target == "sparkrunner" for i in imports)
    ]
    assert not upward, f"modules that import the package root: {sorted(upward)}"


def test_launch_holds_no_module_only_barrier_tasks_import() -> None:
    """A barrier task's own code lives in `sparkrunner/tasks/`: a `launch/` module that only task modules import
    belongs there."""
    graph = _runtime_graph()
    importers: dict[str, set[str]] = {}
    for module, targets in graph.items():
        for target in targets:
            importers.setdefault(target, set()).add(module)
    launch = [m for m in _files() if m.startswith("sparkrunner.launch.") and m not in _packages()]
    task_only = [m for m in launch if importers.get(m) and all(role(i) == "task" for i in importers[m])]
    assert launch and not task_only, f"barrier-task modules under launch/: {task_only}"


def test_the_folders_give_every_role_its_modules() -> None:
    """Guards the rule itself: a rename that empties a role would make the crossing check vacuous."""
    counts: dict[str, int] = {}
    for module in _files():
        counts[role(module)] = counts.get(role(module), 0) + 1
    assert counts.get("rank", 0) >= 15 and counts.get("task", 0) >= 3 and counts.get("driver", 0) >= 30, (
        counts
    )
    assert role("sparkrunner.ranks.bootstrap") == "rank" and role("sparkrunner.data.ranks.loader") == "rank"
    assert (
        role("sparkrunner.data.workers.stream_feeder") == "task"
        and role("sparkrunner.driver.run") == "driver"
    )
    assert (
        role("sparkrunner.data.driver.materialize") == "driver"
        and role("sparkrunner.data.columns") == "shared"
    )
    assert role("sparkrunner.ranks") == "rank" and role("sparkrunner.errors") == "shared"
    assert role("sparkrunner.lightning") == "facade" and role("sparkrunner.ranks.lightning") == "rank"
    assert (
        role("sparkrunner.driver.launcher_choice.auto") == "driver"
        and role("sparkrunner.system.network") == "shared"
    )
    assert (
        role("sparkrunner.tasks.zygote_client") == "task"
        and role("sparkrunner.system.zygote_link") == "shared"
    )


def test_the_cycle_check_sees_type_checking_and_function_level_imports() -> None:
    """The checks above can fail: an import that only mypy sees, or one inside a function, is an edge."""
    errors = _graph()["sparkrunner.errors"]
    assert errors == {Import("sparkrunner.stack_report", type_only=True)}, (
        "errors imports only the type of the stack report its HangError carries, for mypy"
    )
    edges = package_graph()
    assert edges["errors"] == {"stack_report"} and not edges["stack_report"], "errors is (almost) a leaf"
    assert _cycle({"errors": {"driver"}, "driver": {"errors"}}) == ["driver", "errors", "driver"]


def test_the_top_level_holds_at_most_a_dozen_modules() -> None:
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} top-level modules: {top}"
