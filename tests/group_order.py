"""The order in which pytest-xdist workers take the suite's groups: longest first, by each group's measured time.

A worker takes a group whole (`--dist loadgroup`), and a long group started last keeps one worker busy while the
other idles; handing the longest groups out first makes the two workers end together. The times live in
`tests/group_times.json`; `SPARKRUNNER_TEST_GROUP_TIMES=<path>` makes a whole-suite run write them afresh.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path

import pytest

GROUP_TIMES = Path(__file__).with_name("group_times.json")
RECORD_ENV = "SPARKRUNNER_TEST_GROUP_TIMES"
_GROUP_PROPERTY = "xdist_group"


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


@pytest.hookimpl(trylast=True)  # after the groups are set and pytest has ordered tests by their fixtures
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup`, sort the tests by group, the longest first, keeping their order within a group:
    by its measured time, or for a group never measured, its number of tests times the measured seconds per test."""
    if not _by_groups(config):
        return
    counts = Counter(_group(item) for item in items)
    times = _measured_times()
    measured = [group for group in counts if group in times]
    per_test = sum(times[g] for g in measured) / max(1, sum(counts[g] for g in measured)) if measured else 1.0
    expected = {group: times.get(group, counts[group] * per_test) for group in counts}
    for item in items:
        item.user_properties.append((_GROUP_PROPERTY, _group(item)))
    items.sort(key=lambda item: (-expected[_group(item)], _group(item)))


class GroupWatch:
    """On the xdist controller, which receives every worker's reports: checks that each group ran on one worker
    (pytest-xdist tags tests with their group only where it knows how the running pytest stores a test's id, and
    otherwise spreads single tests without a word), and sums each group's setup, call and teardown seconds."""

    def __init__(self, record_to: str | None) -> None:
        self.record_to = record_to
        self.seconds: dict[str, float] = defaultdict(float)
        self.workers: dict[str, set[str]] = defaultdict(set)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        group = dict(report.user_properties).get(_GROUP_PROPERTY)
        node = getattr(report, "node", None)
        if group is None or node is None:
            return
        self.seconds[str(group)] += report.duration
        self.workers[str(group)].add(str(node.workerinput["workerid"]))

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


def pytest_configure(config: pytest.Config) -> None:
    """On the controller of a `--dist loadgroup` run: keep this order (pytest-xdist would reorder the groups by
    their number of tests) and watch the groups, recording their times when `RECORD_ENV` names a file."""
    if _by_groups(config) and not hasattr(config, "workerinput"):
        config.option.loadscopereorder = False
        config.pluginmanager.register(GroupWatch(os.environ.get(RECORD_ENV)), "sparkrunner-group-watch")
