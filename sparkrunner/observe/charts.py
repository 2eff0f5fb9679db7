"""The run's charts as inline SVG: throughput per rank over time and step anatomy per rank.

Hand-written SVG, not a plotting library: the report and the notebook's live view must open offline, from
MLflow's artifact view too, and stay small; every mark carries its values as a native tooltip (``<title>``).
docs/tracking-and-progress.md ("Why hand-written SVG") gives the reasoning.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkrunner.observe.events import AnatomyEvent

Window = tuple[int, float, AnatomyEvent]
"""(rank, seconds since the run started when the driver got it, window)."""
PARTS = ("data", "compute", "comm", "own", "step")
"""The parts of a step the ranks time; own = step - comm (the time the rank itself took)."""
COLORS = {"data": "#e4572e", "compute": "#4c72b0", "comm": "#a0a0a0"}
PART_NAMES = {"data": "waiting for data", "compute": "computing", "comm": "waiting in collectives"}
_RANK_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
_BAND_COLORS = ("#eeeeee", "#e1e8f2")
_WIDTH = 960
_LEFT, _RIGHT, _TOP, _BOTTOM = 100, 24, 34, 60
_ROW = 26
_FEW_POINTS = 2  # a rank with this many windows or fewer has no curve to speak of
Scale = Callable[[float], float]
MAX_DOTS = 400
"""The most dots a rank's throughput line gets; a longer run's consecutive windows are merged."""


@dataclass(frozen=True)
class Timeline:
    """What the driver saw of a run on its own clock (seconds since the start): every rank's windows of
    steps and when each rank's process connected."""

    windows: list[Window] = field(default_factory=list)
    started: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Phase:
    """A stretch of the run before its first step, drawn as a labelled band."""

    name: str
    start: float
    end: float
    meaning: str


def phases(timeline: Timeline) -> list[Phase]:
    """Start-up (until the last rank connected) and setup (until the first rank's first step began)."""
    if not timeline.started or not timeline.windows:
        return []
    up = max(timeline.started.values())
    first = max(min(t - w.span_s for _, t, w in timeline.windows), 0.0)
    started = (
        "the driver starts the run (tracking, the payload), the ranks' processes start and connect to it"
    )
    found = [Phase("start-up", 0.0, up, started)]
    if first > up:
        meaning = (
            "the ranks load the function, set up (imports, model, process group) and ask for a first batch"
        )
        found.append(Phase("setup", up, first, meaning))
    return found


def throughput_svg(timeline: Timeline) -> str:
    """Steps/s of every rank's windows over the run's time: a dot per window (its middle), a line per rank,
    the phases before the first step as bands; a note in words when the run was too short for a curve."""
    points = _throughput_points(timeline.windows)
    if not points:
        return "<p class='sr-note'>No steps were counted, so there is no throughput to draw.</p>"
    bands = phases(timeline)
    t_top, t_step = _axis(max([t for line in points.values() for t, _, _ in line] + [b.end for b in bands]))
    r_top, r_step = _axis(max(r for line in points.values() for _, r, _ in line) * 1.1)  # room above the dots
    height = 300
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, height - _TOP - _BOTTOM

    def x(t: float) -> float:
        return _LEFT + t / t_top * plot_w

    def y(r: float) -> float:
        return _TOP + plot_h - r / r_top * plot_h

    bands_drawn = [_band(b, x(b.start), x(b.end), plot_h, i) for i, b in enumerate(bands)]
    most = max(len(line) for line in points.values())
    radius = 6.0 if most <= _FEW_POINTS else 3.5 if most <= 30 else 2.5
    lines, marks = [], []  # every line under every dot: no rank's line hides another's dots
    for rank, line in sorted(points.items()):
        color = _RANK_COLORS[rank % len(_RANK_COLORS)]
        if len(line) > 1:
            path = " ".join(f"{x(t):.1f},{y(r):.1f}" for t, r, _ in line)
            lines.append(f"<polyline fill='none' stroke='{color}' stroke-width='1.5' points='{path}'/>")
        marks += [
            f"<circle cx='{x(t):.1f}' cy='{y(r):.1f}' r='{radius}' fill='{color}'>"
            f"<title>rank {rank} at {t:.1f} s: {r:.3g} steps/s over {steps} steps</title></circle>"
            for t, r, steps in line
        ]
    axes = _x_axis(x, t_top, t_step, height, "seconds since the run started") + _y_axis(
        y, r_top, r_step, "steps/s"
    )
    svg = _svg(height, "".join([*bands_drawn, axes, *lines, *marks]))
    return _rank_legend(sorted(points)) + svg + _phase_caption(bands) + _too_short_note(points)


def anatomy_svg(medians: dict[int, dict[str, float]]) -> str:
    """One stacked bar per rank, in ms per step: waiting for data, computing, waiting in collectives."""
    if not medians:
        return "<p class='sr-note'>No steps were counted, so there is no step anatomy to draw.</p>"
    top, step = _axis(max(sum(parts[p] for p in COLORS) for parts in medians.values()) * 1000)
    plot_w = _WIDTH - _LEFT - _RIGHT - 70
    height = _TOP + len(medians) * _ROW + _BOTTOM

    def x(ms: float) -> float:
        return _LEFT + ms / top * plot_w

    rows = []
    for i, (rank, parts) in enumerate(sorted(medians.items())):
        y = _TOP + i * _ROW + 3
        rows.append(f"<text x='{_LEFT - 8}' y='{y + 15}' text-anchor='end'>rank {rank}</text>")
        start = 0.0
        for part, color in COLORS.items():
            ms = parts[part] * 1000
            rows.append(
                f"<rect x='{x(start):.1f}' y='{y}' width='{x(start + ms) - x(start):.1f}' height='{_ROW - 6}' "
                f"fill='{color}'><title>rank {rank}, {PART_NAMES[part]}: {ms:.1f} ms</title></rect>"
            )
            start += ms
        rows.append(f"<text x='{x(start) + 6:.1f}' y='{y + 15}'>{start:.1f} ms</text>")
    axis = _x_axis(x, top, step, height, "median ms per step")
    legend = "".join(
        f"<span class='sr-key' style='--c:{color}'>{html.escape(PART_NAMES[part])}</span>"
        for part, color in COLORS.items()
    )
    return f"<div class='sr-legend'>{legend}</div>" + _svg(height, axis + "".join(rows))


def _throughput_points(windows: list[Window]) -> dict[int, list[tuple[float, float, int]]]:
    """Per rank: (the window's middle in s, steps/s, steps) of each window with timed steps; past `MAX_DOTS`
    windows, runs of consecutive ones are merged (a long run's page stays small)."""
    points: dict[int, list[tuple[float, float, int]]] = {}
    for rank, elapsed, window in windows:
        if window.median["step"] > 0:
            middle = max(elapsed - window.span_s / 2, 0.0)
            points.setdefault(rank, []).append((middle, 1 / window.median["step"], window.steps))
    return {rank: _merged(line) for rank, line in points.items()}


def _merged(line: list[tuple[float, float, int]]) -> list[tuple[float, float, int]]:
    """At most `MAX_DOTS` points: each the mean time and the overall steps/s of consecutive windows."""
    size = math.ceil(len(line) / MAX_DOTS)
    if size == 1:
        return line
    merged = []
    for at in range(0, len(line), size):
        group = line[at : at + size]
        steps = sum(n for _, _, n in group)
        seconds = sum(n / rate for _, rate, n in group)
        merged.append((sum(t for t, _, _ in group) / len(group), steps / seconds, steps))
    return merged


def _axis(largest: float) -> tuple[float, float]:
    """A round top for an axis showing 0..`largest`, and the step between its 3 to 6 ticks."""
    if largest <= 0:
        return 1.0, 0.25
    raw = largest / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return math.ceil(largest / step - 1e-9) * step, step


def _ticks(top: float, step: float) -> list[float]:
    return [i * step for i in range(round(top / step) + 1)]


def _x_axis(place: Scale, top: float, step: float, height: int, title: str) -> str:
    """The bottom axis: a baseline, ticks with round values, and its title with the unit."""
    base = height - _BOTTOM
    parts = [f"<line x1='{_LEFT}' y1='{base}' x2='{place(top):.1f}' y2='{base}' stroke='#333'/>"]
    for value in _ticks(top, step):
        at = place(value)
        parts.append(f"<line x1='{at:.1f}' y1='{base}' x2='{at:.1f}' y2='{base + 5}' stroke='#333'/>")
        parts.append(f"<text x='{at:.1f}' y='{base + 18}' text-anchor='middle'>{value:g}</text>")
    middle = (_LEFT + place(top)) / 2
    parts.append(
        f"<text x='{middle:.1f}' y='{height - 8}' text-anchor='middle' class='sr-axis'>{title}</text>"
    )
    return "".join(parts)


def _y_axis(place: Scale, top: float, step: float, title: str) -> str:
    """The left axis with light grid lines at round values, and its title with the unit."""
    parts = [f"<line x1='{_LEFT}' y1='{place(top):.1f}' x2='{_LEFT}' y2='{place(0):.1f}' stroke='#333'/>"]
    for value in _ticks(top, step):
        at = place(value)
        parts.append(
            f"<line x1='{_LEFT}' y1='{at:.1f}' x2='{_WIDTH - _RIGHT}' y2='{at:.1f}' stroke='#ececec'/>"
        )
        parts.append(f"<text x='{_LEFT - 6}' y='{at + 4:.1f}' text-anchor='end'>{value:g}</text>")
    parts.append(f"<text x='{_LEFT + 8}' y='{_TOP - 10}' class='sr-axis'>{title}</text>")
    return "".join(parts)


def _band(phase: Phase, x0: float, x1: float, plot_h: int, index: int) -> str:
    """A phase as a shaded band over the plot, labelled when the label fits inside it."""
    length = phase.end - phase.start
    tip = f"{phase.name}, {phase.start:.1f} to {phase.end:.1f} s ({length:.1f} s): {phase.meaning}"
    label = f"{phase.name} {length:.1f} s"
    text = (
        f"<text x='{x0 + 4:.1f}' y='{_TOP + 14}' class='sr-band'>{label}</text>"
        if x1 - x0 >= 7 * len(label)
        else ""
    )
    fill = _BAND_COLORS[index % len(_BAND_COLORS)]
    return (
        f"<g><rect x='{x0:.1f}' y='{_TOP}' width='{max(x1 - x0, 0.0):.1f}' height='{plot_h}' fill='{fill}'>"
        f"<title>{html.escape(tip)}</title></rect>{text}</g>"
    )


def _svg(height: int, body: str) -> str:
    """A chart that scales down with the window (viewBox) and never grows past its drawn size."""
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {_WIDTH} {height}' "
        f"class='sr-chart' style='max-width:{_WIDTH}px'>"
        f"{body}</svg>"
    )


def _rank_legend(ranks: list[int]) -> str:
    keys = "".join(
        f"<span class='sr-key' style='--c:{_RANK_COLORS[rank % len(_RANK_COLORS)]}'>rank {rank}</span>"
        for rank in ranks
    )
    return f"<div class='sr-legend'>{keys}</div>"


def _phase_caption(bands: list[Phase]) -> str:
    """The bands in words, as the chart's caption (a narrow band has no room for its label)."""
    if not bands:
        return ""
    told = "; ".join(
        f"<b>{b.name}</b> {b.start:.1f} to {b.end:.1f} s: {html.escape(b.meaning)}" for b in bands
    )
    return f"<p class='sr-caption'>Before the first step: {told}. Each dot is one window of steps.</p>"


def _too_short_note(points: dict[int, list[tuple[float, float, int]]]) -> str:
    most = max(len(line) for line in points.values())
    if most > _FEW_POINTS:
        return ""
    windows = "one window" if most == 1 else f"{most} windows"
    return (
        f"<p class='sr-note'>This run was too short for a curve: each rank sent at most {windows} of steps"
        "; each is drawn as a dot (hover it for its values).</p>"
    )


STYLE = (
    "<style>.sr-chart{width:100%;height:auto;font:13px sans-serif}.sr-legend{display:flex;flex-wrap:wrap;gap:4px 16px;margin:4px 0}"
    ".sr-key::before{content:'';display:inline-block;width:11px;height:11px;margin-right:5px;"
    "background:var(--c)}.sr-note,.sr-caption{color:#555;font-size:90%;max-width:60em}"
    ".sr-axis{fill:#555}.sr-band{fill:#666}"
    # a phone shows a chart at about 40% of its drawn size: its text is drawn larger, band labels go to the caption
    "@media (max-width:600px){.sr-chart{font-size:24px}.sr-band{display:none}}</style>"
)
"""The charts' styles (legends, notes), for the report and the notebook's live view."""
