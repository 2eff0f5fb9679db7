"""The groups pytest-xdist workers take whole (`--dist loadgroup`), and the order they take them in.

A group is the test modules that need the same Spark session (master and settings) or namespace-host cluster,
packed into parts of about `SESSION_GROUP_S`: a worker starts that session once for them all, where it would
start it again after each module another session's module ran between. A module that starts neither is a
group of its own.

A long group started last keeps one worker busy while the other idles: the groups are handed out longest
first, by their modules' measured times, so that the two workers end together. The times live in
`tests/group_times.json` (seconds per module); `SPARKRUNNER_TEST_GROUP_TIMES=<path>` makes a whole-suite run
write them afresh. Each worker counts the Spark sessions it started; the run's summary prints their sum.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

GROUP_TIMES = Path(__file__).with_name("group_times.json")
RECORD_ENV = "SPARKRUNNER_TEST_GROUP_TIMES"
SESSION_GROUP_S = 600.0
"""The size a session's modules are packed into, in measured seconds: large enough that most sessions start
once or twice a run, small enough that the last groups handed out are short (a longer module is a part alone)."""
STARTS_OUTPUT = "spark_session_starts"
"""The key under which a pytest-xdist worker sends the controller its count of Spark session starts."""
_GROUP_PROPERTY = "xdist_group"
_UNIT_PROPERTY = "time_unit"


def _measured_times() -> dict[str, float]:
    """Seconds per group from the last measured run (empty when the file is missing)."""
    try:
        return {str(group): float(s) for group, s in json.loads(GROUP_TIMES.read_text()).items()}
    except FileNotFoundError:
        return {}


def _group(item: pytest.Item) -> str:
    marker = item.get_closest_marker("xdist_group")
    return str(marker.args[0]) if marker is not None and marker.args else item.nodeid


def _by_groups(config: pytest.Config) -> bool:
    """Whether this run hands groups to pytest-xdist workers (`--dist loadgroup`: on a worker, xdist has set
    `dist` to "no" and `loadgroup` to True)."""
    return config.getoption("dist", "no") == "loadgroup" or bool(getattr(config.option, "loadgroup", False))


def _expected(counts: Counter[str]) -> dict[str, float]:
    """Seconds per module: its measured time, or for a module never measured, its number of tests times the
    measured seconds per test."""
    times = _measured_times()
    measured = [unit for unit in counts if unit in times]
    per_test = sum(times[u] for u in measured) / max(1, sum(counts[u] for u in measured)) if measured else 1.0
    return {unit: times.get(unit, counts[unit] * per_test) for unit in counts}


def session_groups(units: dict[str, frozenset[str]], seconds: dict[str, float]) -> dict[str, str]:
    """The group of each module (`units`: module -> the sessions its tests use): the modules that use the same
    sessions, packed longest first into the least full of as many parts as their time needs."""
    by_sessions: dict[frozenset[str], list[str]] = defaultdict(list)
    for unit, sessions in units.items():
        by_sessions[sessions].append(unit)
    groups: dict[str, str] = {}
    for sessions, members in by_sessions.items():
        if not sessions:
            groups.update((unit, unit) for unit in members)
            continue
        # pytest-xdist reads a group from a test id only after its last "]": none in the name
        label = " + ".join(sorted(sessions)).replace("[", "(").replace("]", ")")
        parts: list[list[str]] = [
            [] for _ in range(max(1, round(sum(seconds[u] for u in members) / SESSION_GROUP_S)))
        ]
        for unit in sorted(members, key=lambda u: (-seconds[u], u)):
            least_full = min(range(len(parts)), key=lambda i: (sum(seconds[u] for u in parts[i]), i))
            parts[least_full].append(unit)
        for i, part in enumerate(parts):
            groups.update((unit, f"sessions {label} #{i + 1}") for unit in part)
    return groups


def assign_groups(
    items: list[pytest.Item], units: dict[pytest.Item, str], sessions: dict[str, frozenset[str]]
) -> None:
    """Mark each test with its group (`units`: each test's module, or what stands for it; `sessions`: the
    sessions each module uses)."""
    seconds = _expected(Counter(units.values()))
    groups = session_groups(sessions, seconds)
    for item in items:
        item.user_properties.append((_UNIT_PROPERTY, units[item]))
        item.add_marker(pytest.mark.xdist_group(groups[units[item]]))


@pytest.hookimpl(trylast=True)  # after the groups are set and pytest has ordered tests by their fixtures
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup`, sort the tests by group, the longest first (a group's time: its modules'),
    keeping their order within a group."""
    if not _by_groups(config):
        return
    unit_of = {item: str(dict(item.user_properties).get(_UNIT_PROPERTY, item.nodeid)) for item in items}
    seconds = _expected(Counter(unit_of.values()))
    expected: dict[str, float] = defaultdict(float)
    for group, unit in {(_group(item), unit_of[item]) for item in items}:
        expected[group] += seconds[unit]
    for item in items:
        item.user_properties.append((_GROUP_PROPERTY, _group(item)))
    items.sort(key=lambda item: (-expected[_group(item)], _group(item)))


class GroupWatch:
    """On the xdist controller, which receives every worker's reports: checks that each group ran on one worker
    (pytest-xdist tags tests with their group only where it knows how the running pytest stores a test's id, and
    otherwise spreads single tests without a word), sums each module's setup, call and teardown seconds, and
    the workers' Spark session starts."""

    def __init__(self, record_to: str | None) -> None:
        self.record_to = record_to
        self.seconds: dict[str, float] = defaultdict(float)
        self.workers: dict[str, set[str]] = defaultdict(set)
        self.starts: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        properties = dict(report.user_properties)
        group, unit = properties.get(_GROUP_PROPERTY), properties.get(_UNIT_PROPERTY)
        node = getattr(report, "node", None)
        if group is None or unit is None or node is None:
            return
        self.seconds[str(unit)] += report.duration
        self.workers[str(group)].add(str(node.workerinput["workerid"]))

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        self.starts.update(getattr(node, "workeroutput", {}).get(STARTS_OUTPUT, {}))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_line(starts_line(self.starts))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        split = {group: sorted(workers) for group, workers in self.workers.items() if len(workers) > 1}
        if split:
            session.config.get_terminal_writer().line(
                f"group_order: these groups ran on more than one worker (is pytest-xdist out of step with pytest?): "
                f"{split}",
                red=True,
            )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.record_to:
            ordered = dict(sorted(self.seconds.items(), key=lambda kv: -kv[1]))
            Path(self.record_to).write_text(
                json.dumps({g: round(s, 1) for g, s in ordered.items()}, indent=1) + "\n"
            )


def starts_line(starts: Counter[str]) -> str:
    """The summary line of a run's Spark session starts, by master."""
    by_master = ", ".join(f"{master}: {n}" for master, n in sorted(starts.items()))
    return f"Spark sessions started: {sum(starts.values())} ({by_master or 'none'})"


def pytest_configure(config: pytest.Config) -> None:
    """On the controller of a `--dist loadgroup` run: keep this order (pytest-xdist would reorder the groups by
    their number of tests) and watch the groups, recording their times when `RECORD_ENV` names a file."""
    if _by_groups(config) and not hasattr(config, "workerinput"):
        config.option.loadscopereorder = False
        config.pluginmanager.register(GroupWatch(os.environ.get(RECORD_ENV)), "sparkrunner-group-watch")
