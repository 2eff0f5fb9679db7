"""Every module of the package is named by a test file, or tests/COVERAGE.md says where it is covered.

A test file names a module when it imports it (`from sparkrunner.x import y` names `sparkrunner.x` and, when `y` is
a module, `sparkrunner.x.y`) or writes its dotted name or its path. The map's lines must name modules that exist
and test files that exist, so that the map stays true when either moves.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sparkrunner"
MAP = ROOT / "tests" / "COVERAGE.md"
MAP_LINE = re.compile(r"^- `(sparkrunner[\w.]*)` -> (.*?)(?=^- |\Z)", re.MULTILINE | re.DOTALL)


def _modules() -> dict[str, Path]:
    def name(path: Path) -> str:
        parts = path.relative_to(ROOT).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    return {name(p): p for p in PACKAGE.rglob("*.py")}


def _imported(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def _named_by_tests(modules: dict[str, Path]) -> set[str]:
    named: set[str] = set()
    for test in (ROOT / "tests").rglob("test_*.py"):
        text = test.read_text()
        named |= _imported(ast.parse(text))
        for module, path in modules.items():
            dotted = re.search(re.escape(module) + r"(?!\w)(?!\.\w)", text)
            if dotted or str(path.relative_to(ROOT)) in text:
                named.add(module)
    return named & set(modules)


def _map() -> dict[str, str]:
    return {module: where for module, where in MAP_LINE.findall(MAP.read_text())}


def test_every_module_is_named_by_a_test_file_or_mapped() -> None:
    modules = _modules()
    unaccounted = set(modules) - _named_by_tests(modules) - set(_map())
    assert not unaccounted, (
        f"named by no test file and not in {MAP.relative_to(ROOT)}: {sorted(unaccounted)}; "
        "test them, or add a line saying where they are covered and why there"
    )


def test_the_map_names_modules_and_test_files_that_exist() -> None:
    mapped = _map()
    assert mapped, f"no '- `sparkrunner.x` -> ...' line read from {MAP.relative_to(ROOT)}"
    assert sorted(set(mapped) - set(_modules())) == []
    cited = {path for where in mapped.values() for path in re.findall(r"`(tests/[\w/]+\.py)`", where)}
    assert sorted(path for path in cited if not (ROOT / path).exists()) == []
