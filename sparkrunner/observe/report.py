"""The run's HTML report: what ran and how it ended, per-rank throughput over time, step anatomy, stragglers
and a per-rank table; one self-contained file.

The file loads nothing (no scripts, fonts or styles from the network), so it opens anywhere, from MLflow's
artifact view too. It fits a 1,200 px window and a phone's: the charts scale down, the table scrolls in its
own box. Every time in the page is in milliseconds (steps) or seconds (the run's clock).
"""

from __future__ import annotations

import contextlib
import html
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sparkrunner.common.environment import Env
from sparkrunner.errors import RankFailedError
from sparkrunner.observe.charts import COLORS, PARTS, STYLE, Timeline, anatomy_svg, throughput_svg
from sparkrunner.observe.observers import RunRecord

if TYPE_CHECKING:
    import pandas as pd

_ERROR_CHARS = 2000
REPORTS_KEPT = 100
"""Reports kept in the report folder, newest first: a driver that lives for days (a notebook's) writes one a run,
so the oldest beyond this count are deleted (a tracked run's report stays in its MLflow run)."""
_PAGE_STYLE = (
    "<style>body{font-family:sans-serif;margin:0 auto;max-width:1000px;padding:1em;color:#222;line-height:1.4}"
    "h1{font-size:1.5em;overflow-wrap:anywhere}h2{font-size:1.15em;margin-top:1.6em}"
    "dl.facts{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:2px 12px}"
    "dl.facts dt{color:#555}dl.facts dd{margin:0;overflow-wrap:anywhere}"
    ".failed{color:#b00020;font-weight:bold}.ok{color:#1b7a2e;font-weight:bold}"
    ".error{background:#fdecee;border-left:4px solid #b00020;padding:8px 12px;white-space:pre-wrap;"
    "overflow-wrap:anywhere;font-size:90%;max-height:24em;overflow-y:auto}"
    ".scroll{overflow-x:auto;max-width:100%}table{border-collapse:collapse;font-size:90%}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;white-space:nowrap}"
    "th{background:#f4f4f4}li{overflow-wrap:anywhere}</style>"
)


def report_folder() -> str:
    """Where reports are saved: ``SPARKRUNNER_REPORT_DIR``, else ``sparkrunner-reports`` in the temp folder."""
    return os.environ.get(Env.REPORT_DIR) or os.path.join(tempfile.gettempdir(), "sparkrunner-reports")


def save_report(record: RunRecord, timeline: Timeline, stragglers: list[str]) -> str:
    """Write the report of `record` and return its path."""
    folder = report_folder()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"sparkrunner-{record.run_id}.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(record, timeline, stragglers))
    _delete_oldest(folder, REPORTS_KEPT)
    return path


def _delete_oldest(folder: str, keep: int) -> None:
    """Delete the reports (``sparkrunner-*.html``) of `folder` but the `keep` newest; any other file stays. A
    report another driver deletes meanwhile is passed over."""
    reports = []
    for report in Path(folder).glob("sparkrunner-*.html"):
        with contextlib.suppress(OSError):
            reports.append((report.stat().st_mtime_ns, report))
    for _, report in sorted(reports)[:-keep]:
        with contextlib.suppress(OSError):
            report.unlink()


def render(record: RunRecord, timeline: Timeline, stragglers: list[str]) -> str:
    """The report as one HTML page."""
    title = f"sparkrunner run report: {record.function}"
    warned = "".join(f"<li>{html.escape(text)}</li>" for text in stragglers) or "<li>none</li>"
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title>{_PAGE_STYLE}{STYLE}</head><body>"
        f"<h1>{html.escape(title)}</h1>{_facts(record)}{_error(record.error)}"
        f"<h2>Throughput per rank</h2>{throughput_svg(timeline)}"
        f"<h2>Step anatomy per rank (median ms per step)</h2>{anatomy_svg(_medians(record, timeline))}"
        f"<h2>Straggler warnings</h2><ul>{warned}</ul>"
        f"<h2>Per rank: median and 95th percentile of each part of a step</h2>"
        f"{_table(record.step_anatomy, {rank for rank, _, _ in timeline.windows})}"
        "</body></html>"
    )


def _facts(record: RunRecord) -> str:
    """Status, ids and the run's shape, as a list a person scans."""
    status = (
        "<span class='ok'>succeeded</span>"
        if record.error is None
        else f"<span class='failed'>failed: {html.escape(type(record.error).__name__)}</span>"
    )
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record.started_at))
    facts = {
        "status": status,
        "run id": html.escape(record.run_id),
        "MLflow run": html.escape(record.mlflow_run_id or "none (tracking off)"),
        "ranks": f"{abs(record.np)} ({'on the driver' if record.np < 0 else 'Spark barrier tasks'}, np={record.np})",
        "launcher": html.escape(record.launcher),
        "started": started,
        "duration": f"{record.duration_s or 0:.1f} s",
    }
    return "<dl class='facts'>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts.items()) + "</dl>"


def _error(error: BaseException | None) -> str:
    """The failure: which rank raised what (with where it ran), or the driver's error."""
    if error is None:
        return ""
    if isinstance(error, RankFailedError):
        where = f" ({error.location})" if error.location else ""
        head = f"rank {error.rank}{where} raised {error.exc_type}: {error.exc_message}"
    else:
        head = f"{type(error).__name__}: {error}"
    text = head if len(head) <= _ERROR_CHARS else head[:_ERROR_CHARS] + " ..."
    return f"<h2>Error</h2><div class='error'>{html.escape(text)}</div>"


def _medians(record: RunRecord, timeline: Timeline) -> dict[int, dict[str, float]]:
    """Per rank, the median of each part over the run, else (a rank that ended before it summed up its run)
    over its latest window."""
    medians = {rank: dict(window.median) for rank, _, window in timeline.windows}
    table = record.step_anatomy
    if table is not None:
        medians.update(
            {int(r): {p: float(table.loc[r, f"{p}_median_s"]) for p in COLORS} for r in table.index}
        )
    return medians


def _table(table: pd.DataFrame | None, counted: set[int]) -> str:
    """The run's anatomy table with headers in words and every time in ms; it scrolls in its own box. Ranks
    that `counted` steps but are not in it are named."""
    if table is None:
        return "<p class='sr-note'>No rank sent the summary of its steps (it is sent when the function ends).</p>"
    missing = sorted(counted - {int(r) for r in table.index})
    unsummed = (
        f"<p class='sr-note'>Not in the table: rank {', '.join(map(str, missing))}, which ended before sending "
        "the summary of its steps; its bar above is its last window.</p>"
        if missing
        else ""
    )
    rows = []
    for rank, row in table.iterrows():
        executor = row["executor"] if isinstance(row["executor"], str) else "driver"
        cells = [str(rank), html.escape(str(row["host"])), html.escape(executor)]
        cells.append(str(int(row["steps"])))
        cells += [f"{row[f'{part}_{q}_s'] * 1000:.1f}" for part in PARTS for q in ("median", "p95")]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = (  # a part's name over its median and p95 columns: the table fits a 1,200 px window
        "<tr>"
        + "".join(f"<th rowspan='2'>{h}</th>" for h in ("rank", "host", "executor", "steps"))
        + "".join(f"<th colspan='2'>{part} (ms)</th>" for part in PARTS)
        + "</tr><tr>"
        + "<th>median</th><th>p95</th>" * len(PARTS)
        + "</tr>"
    )
    explained = (
        "<p class='sr-note'>data: waiting for the next batch; comm: waiting in collectives (allreduce); "
        "compute: the rest of the step; own: the step less comm (the time the rank itself took).</p>"
    )
    body = "".join(rows)
    return f"<div class='scroll'><table><thead>{head}</thead><tbody>{body}</tbody></table></div>{unsummed}{explained}"
