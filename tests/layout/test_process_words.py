"""The project's prose speaks of the product, not of how it was developed.

A reader of the docs, benches, tests or code needs the commit or the date a figure or a fix comes from, not the
name of the development branch it was made on or the number of the work item that asked for it. The scan covers
the README, docs/, bench/, tests/, sparkrunner/, examples/, notebooks/, scripts/, requirements/, docker/ and .ci/
and names every hit as file:line. Another project's bug is a fact and stays: cite it as a URL or as `owner/repo#N`
(keras-team/keras#20585), which the patterns do not match. tests/COVERAGE.md keeps its work-item headings
(which change cut or folded a test). No file is exempt but those: the patterns below are written so that this
file does not match them, and the planted phrases are put together at run time.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import ROOT

SCANNED = ("README.md", "docs", "bench", "tests", "sparkrunner", "examples", "notebooks", "scripts")
SCANNED += ("requirements", "docker", ".ci")
TEXT = {".py", ".md", ".sh", ".ipynb", ".txt", ".json", ".html", ".toml", ".cfg", ".yml", ".yaml"}
PATTERNS = {
    "a work item": re.compile(r"\bissues?[- ]?#?\d+", re.I),  # also its number glued on, or after #
    # a branch named (a name with a digit or a hyphen), or the point a branch left main
    "a branch": re.compile(r"\bbranch\s+(?=[\w-]*[\d-])[a-z][\w-]*|\bbranch point\b", re.I),
    "the development team": re.compile(r"\b(?:helper|lead|other|another)\s+engineers?\b|\bengineers?'", re.I),
    "the merge process": re.compile(r"\blanding\s+CI\b|\bat\s+landing\b|\bthe\s+merged\s+main\b", re.I),
}
URL = re.compile(r"\[[^\]]*\]\(<?(?:https?|file)://[^)]*\)|\b(?:https?|file)://\S+")
"""A link out of the repository: a markdown link to one (its text too), or a bare URL."""
ALLOWED = {"tests/COVERAGE.md": {"a work item"}}
"""Per file, the kinds of hit it may keep (COVERAGE.md's headings name the work item that cut or folded a test)."""


def _files(root: Path) -> list[Path]:
    found: list[Path] = []
    for name in SCANNED:
        path = root / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += [
                p
                for p in sorted(path.rglob("*"))
                if p.suffix in TEXT
                and p.is_file()
                and "__pycache__" not in p.parts
                and ".ipynb_checkpoints" not in p.parts
            ]
    return found


def process_words(root: Path) -> list[str]:
    """Every line under `root` that names a branch, a work item or the development team: `file:line: kind: text`."""
    hits = []
    for path in _files(root):
        where = path.relative_to(root).as_posix()
        allowed = ALLOWED.get(where, set())
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            prose = URL.sub(" ", line)  # a link to another project's issue is a fact
            for kind, pattern in PATTERNS.items():
                if kind not in allowed and (match := pattern.search(prose)):
                    hits.append(f"{where}:{number}: {kind}: {match.group(0)!r} in {line.strip()[:120]!r}")
    return hits


def test_no_branch_names_work_items_or_team_words() -> None:
    hits = process_words(ROOT)
    assert not hits, (
        "Say which commit (git log --format=%h -S'...') or date (2026-11-NN) a figure or fix comes from, or drop "
        "the reference; cite other projects' bugs by URL or owner/repo#N:\n" + "\n".join(hits)
    )


def test_the_scan_finds_each_kind_and_allows_urls_and_coverage_headings(tmp_path: Path) -> None:
    """The scanner, pointed at a planted tree: each kind of phrase is named by file:line; URLs, `owner/repo#N`,
    other meanings of the words and COVERAGE.md's work-item headings are not."""
    item, branch = "iss" + "ue", "bran" + "ch"  # put together here, so that this file holds none of them
    team, landing = "engin" + "eers", "land" + "ing"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "scale.md").write_text(
        f"# Scale\n\n{branch.title()} {item}23-scale, 2 cores.\n"
        f"See https://github.com/pytorch/pytorch/{item}s/97191, keras-team/keras#20585 and\n"
        f"[Horovod {item} 3165](https://github.com/horovod/horovod/{item}s/3165).\n"
        f"## Real processes ({item} 23, item 3)\n"
        f"On {branch} s7-dropin; the {branch} point 14baf82.\n"
        f"Measured while other {team}' tests ran; a spare executor, a warm session, a lead time.\n"
        f"The CI budget at {landing}; the {item}s a user meets; a {branch} of the code; 45 minutes at the end.\n"
    )
    (tmp_path / "sparkrunner").mkdir()
    (tmp_path / "sparkrunner" / "x.py").write_text(f'"""Held until taken over ({item} #31)."""\nX = 1\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "COVERAGE.md").write_text(
        f"## Cut and folded tests ({item} 46)\n- on {branch} {item}-31-spare\n"
    )
    (tmp_path / "README.md").write_text(f"Nothing here; {item}s are fixed by commit 1a2b3c4.\n")

    hits = sorted(hit.split(": ", 2)[:2] for hit in process_words(tmp_path))
    assert hits == [
        ["docs/scale.md:3", "a branch"],
        ["docs/scale.md:3", "a work item"],
        ["docs/scale.md:6", "a work item"],
        ["docs/scale.md:7", "a branch"],
        ["docs/scale.md:8", "the development team"],
        ["docs/scale.md:9", "the merge process"],
        ["sparkrunner/x.py:1", "a work item"],
        ["tests/COVERAGE.md:2", "a branch"],
    ], hits
