"""The package's import graph: free of cycles, and layered by process role (function-level imports included).

Rank-side code (what runs in a rank process) never imports driver-side code, and the reverse; code that runs
in a Spark barrier task never imports driver-side code. Shared modules (errors, channel, launch, frameworks...)
import neither.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sparkrunner"

# modules by the process they run in; a prefix ending in "." names a whole subpackage
RANK = ("sparkrunner.ranks.", "sparkrunner.recovery.checkpoints", "sparkrunner.recovery.graceful_stop", "sparkrunner.recovery.sharded",
        "sparkrunner.data.loader", "sparkrunner.data.torch_adapter", "sparkrunner.data.tf_adapter",
        "sparkrunner.data.arrow_reader", "sparkrunner.data.petastorm_reader", "sparkrunner.data.batching",
        "sparkrunner.data.prefetch", "sparkrunner.data.resume", "sparkrunner.data.global_batch",
        "sparkrunner.data.stream_reader", "sparkrunner.data.stream_inbox",
        "sparkrunner.lightning", "sparkrunner.ml.rank_")  # fmt: skip
TASK = ("sparkrunner.tasks.", "sparkrunner.data.stream_feeder", "sparkrunner.ml.task_")
DRIVER = ("sparkrunner.driver.", "sparkrunner.placement.", "sparkrunner.observe.", "sparkrunner.runner",
          "sparkrunner.compat.",
          "sparkrunner.cli", "sparkrunner.check", "sparkrunner.recovery.attempts", "sparkrunner.recovery.options", "sparkrunner.recovery.elastic",
          "sparkrunner.data.materialize", "sparkrunner.data.cache_key", "sparkrunner.data.progress_report",
          "sparkrunner.data.host_check", "sparkrunner.data.writer", "sparkrunner.__main__",
          "sparkrunner.data.streaming", "sparkrunner.data.stream_broker", "sparkrunner.ml.driver_")  # fmt: skip
# what each role may not import
FORBIDDEN = {
    "rank": ("driver", "task"),
    "task": ("driver", "rank"),
    "driver": ("rank",),
    "shared": ("driver", "rank"),
}
# the public API gathers both sides on purpose
AGGREGATORS = {"sparkrunner", "sparkrunner.recovery", "sparkrunner.data"}
MAX_TOP_LEVEL_MODULES = 12


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_only(tree: ast.Module) -> set[ast.AST]:
    """Nodes under `if TYPE_CHECKING:`: imported for mypy only, they never run in any process."""
    blocks = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    return {inner for block in blocks for stmt in block.body for inner in ast.walk(stmt)}


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Modules of the package that `path` imports at run time; `from pkg import submodule` counts as the
    submodule."""
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    type_only = _type_only(tree)
    for node in (n for n in ast.walk(tree) if n not in type_only):
        if isinstance(node, ast.ImportFrom) and node.module in modules:
            subs = {f"{node.module}.{a.name}" for a in node.names} & modules
            found |= subs or {node.module}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names} & modules
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: _imports(path, set(files)) for name, path in files.items()}


def role(module: str) -> str:
    """'rank', 'task', 'driver' or 'shared'."""
    for name, prefixes in (("rank", RANK), ("task", TASK), ("driver", DRIVER)):
        if any(module == p.rstrip(".") or module.startswith(p) for p in prefixes):
            return name
    return "shared"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module] - {module}):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_no_import_cycles() -> None:
    graph = _graph()
    assert len(graph) > 20, "the scan found too few modules to be meaningful"
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph) or [])}"


def test_each_role_imports_only_what_runs_in_its_process() -> None:
    graph = _graph()
    crossings = [
        f"{module} ({role(module)}) imports {target} ({role(target)})"
        for module, targets in sorted(graph.items())
        if module not in AGGREGATORS
        for target in sorted(targets)
        if role(target) in FORBIDDEN[role(module)]
    ]
    assert not crossings, "imports across process roles:\n" + "\n".join(crossings)


def test_the_roles_are_recognised_and_each_holds_modules() -> None:
    """Guards the role map itself: a rename that empties a role would make the crossing check vacuous."""
    counts: dict[str, int] = {}
    for module in _graph():
        counts[role(module)] = counts.get(role(module), 0) + 1
    assert counts.get("rank", 0) >= 8 and counts.get("task", 0) >= 3 and counts.get("driver", 0) >= 15, counts
    assert role("sparkrunner.ranks.bootstrap") == "rank" and role("sparkrunner.driver.session") == "driver"


def test_the_top_level_holds_at_most_a_dozen_modules() -> None:
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} top-level modules: {top}"
