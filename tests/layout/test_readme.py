"""The README stays a user guide: short enough to read, and its module map names every subpackage."""

from __future__ import annotations

import re

from tests.helpers import ROOT

README = ROOT / "README.md"
MAX_CHARS = 15_000


def module_map() -> str:
    """The code block under the README's "## Module map" heading."""
    text = README.read_text()
    section = text.split("## Module map", 1)[1]
    return section.split("```", 2)[1]


def test_the_readme_is_at_most_15000_characters() -> None:
    assert len(README.read_text()) <= MAX_CHARS


def test_the_module_map_names_every_subpackage() -> None:
    subpackages = sorted(p.parent.name for p in (ROOT / "sparkrunner").glob("*/__init__.py"))
    named = set(re.findall(r"^\s+(\w+)/", module_map(), re.MULTILINE))
    assert subpackages and [p for p in subpackages if p not in named] == []


def test_every_relative_link_points_at_a_file() -> None:
    links = re.findall(r"\]\(([^)#:]+)\)", README.read_text())
    assert links and [link for link in links if not (ROOT / link).exists()] == []
