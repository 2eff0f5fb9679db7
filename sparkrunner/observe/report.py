"""The run's HTML report: per-rank throughput over time and step anatomy, one self-contained file.

Plots are inline SVG and the file loads nothing (no scripts, fonts or styles from the network), so it opens
anywhere, from MLflow's artifact view too.
"""

from __future__ import annotations

import html
import os
import tempfile

from sparkrunner.channel.environment import Env
from sparkrunner.observe.events import AnatomyEvent
from sparkrunner.observe.observers import RunRecord

Window = tuple[int, float, AnatomyEvent]
COLORS = {"data": "#e4572e", "compute": "#4c72b0", "comm": "#a0a0a0"}
_RANK_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
_WIDTH, _ROW = 640, 22


def report_folder() -> str:
    """Where reports are saved: ``SPARKRUNNER_REPORT_DIR``, else ``sparkrunner-reports`` in the temp folder."""
    return os.environ.get(Env.REPORT_DIR) or os.path.join(tempfile.gettempdir(), "sparkrunner-reports")


def save_report(record: RunRecord, history: list[Window], stragglers: list[str]) -> str:
    """Write the report of `record` and return its path."""
    folder = report_folder()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"sparkrunner-{record.run_id}.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(record, history, stragglers))
    return path


def render(record: RunRecord, history: list[Window], stragglers: list[str]) -> str:
    """The report as one HTML page."""
    title = f"sparkrunner run {record.function}"
    facts = (
        f"np={record.np} launcher={record.launcher} duration={record.duration_s or 0:.1f} s "
        f"run={record.run_id} mlflow={record.mlflow_run_id or '-'}"
        + ("" if record.error is None else f" error={type(record.error).__name__}")
    )
    warned = "".join(f"<li>{html.escape(text)}</li>" for text in stragglers) or "<li>none</li>"
    table = "" if record.step_anatomy is None else record.step_anatomy.to_html(float_format="{:.4f}".format)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{html.escape(facts)}</p>"
        f"<h2>Throughput per rank (steps/s)</h2>{throughput_svg(history)}"
        f"<h2>Step anatomy per rank (median ms per step)</h2>{anatomy_svg(_latest_medians(record, history))}"
        f"<h2>Straggler warnings</h2><ul>{warned}</ul>"
        f"<h2>Per rank: median and p95 seconds of each part</h2>{table}</body></html>"
    )


def _latest_medians(record: RunRecord, history: list[Window]) -> dict[int, dict[str, float]]:
    """Per rank, the median of each part over the run (else over its latest window)."""
    if record.step_anatomy is not None:
        table = record.step_anatomy
        return {int(r): {p: float(table.loc[r, f"{p}_median_s"]) for p in COLORS} for r in table.index}
    return {rank: dict(window.median) for rank, _, window in history}


def anatomy_svg(medians: dict[int, dict[str, float]]) -> str:
    """One stacked bar per rank: data wait, compute, collective wait."""
    if not medians:
        return "<p>no steps were counted</p>"
    longest = max(sum(parts[p] for p in COLORS) for parts in medians.values()) or 1.0
    scale = (_WIDTH - 160) / longest
    rows = []
    for i, (rank, parts) in enumerate(sorted(medians.items())):
        y, x = i * _ROW + 20, 60.0
        rows.append(f"<text x='0' y='{y + 14}'>rank {rank}</text>")
        for part, color in COLORS.items():
            width = parts[part] * scale
            rows.append(
                f"<rect x='{x:.1f}' y='{y}' width='{width:.1f}' height='{_ROW - 4}' fill='{color}'>"
                f"<title>{part}: {parts[part] * 1000:.1f} ms</title></rect>"
            )
            x += width
        total = sum(parts[p] for p in COLORS) * 1000
        rows.append(f"<text x='{x + 4:.1f}' y='{y + 14}'>{total:.1f} ms</text>")
    legend = " ".join(f"<tspan fill='{color}'>&#9632; {part}</tspan>" for part, color in COLORS.items())
    height = len(medians) * _ROW + 30
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{_WIDTH}' height='{height}' font-size='12'>"
        f"<text x='60' y='12'>{legend}</text>{''.join(rows)}</svg>"
    )


def throughput_svg(history: list[Window]) -> str:
    """Steps/s of every rank's windows over the run's time, one line per rank."""
    points: dict[int, list[tuple[float, float]]] = {}
    for rank, elapsed, window in history:
        if window.median["step"] > 0:
            points.setdefault(rank, []).append((elapsed, 1 / window.median["step"]))
    if not points:
        return "<p>no steps were counted</p>"
    width, height, margin = _WIDTH, 240, 40
    t_max = max(t for line in points.values() for t, _ in line) or 1.0
    r_max = max(r for line in points.values() for _, r in line) * 1.1 or 1.0

    def xy(t: float, r: float) -> str:
        return f"{margin + t / t_max * (width - 2 * margin):.1f},{height - margin - r / r_max * (height - 2 * margin):.1f}"

    lines = []
    for rank, line in sorted(points.items()):
        color = _RANK_COLORS[rank % len(_RANK_COLORS)]
        path = " ".join(xy(t, r) for t, r in line)
        lines.append(f"<polyline fill='none' stroke='{color}' stroke-width='1.5' points='{path}'>"
                     f"<title>rank {rank}</title></polyline>")  # fmt: skip
        lines.append(f"<text x='{width - margin + 4}' y='{14 + 14 * rank}' fill='{color}'>rank {rank}</text>")
    axes = (
        f"<line x1='{margin}' y1='{height - margin}' x2='{width - margin}' y2='{height - margin}' stroke='#333'/>"
        f"<line x1='{margin}' y1='{margin}' x2='{margin}' y2='{height - margin}' stroke='#333'/>"
        f"<text x='{margin}' y='{height - 10}'>0 s</text>"
        f"<text x='{width - margin - 40}' y='{height - 10}'>{t_max:.0f} s</text>"
        f"<text x='2' y='{margin}'>{r_max:.1f}</text>"
    )
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width + 60}' height='{height}' font-size='12'>"
        f"{axes}{''.join(lines)}</svg>"
    )
