"""The replay's plots: demand, fleet and busy GPUs over time; cost against wait in a sweep.

Written as SVG by our own code (``chart``), alone (``.svg``) or in a self-contained HTML
page with the report's table (``.html``): no plotting library, nothing to fetch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from dynagent.simulate.chart import (
    HEIGHT,
    WIDTH,
    Band,
    Line,
    Point,
    PointGroup,
    line_chart,
    point_chart,
)
from dynagent.simulate.metrics import Summary
from dynagent.simulate.replay import Replay

SUFFIXES = (".html", ".svg")
# Points per line: finer than a screen shows, coarse enough for a small file.
_BUCKETS = 800


@dataclass(frozen=True)
class _Style:
    color: str
    opacity: float = 1.0
    width: float = 1.5
    dashed: bool = False


# Busy GPUs a pale area; the GPUs billed above them (fleet minus busy: idle agents, free
# slots beside tasks, boots) a strong red band on it, whose top is the fleet, so the
# waste shows even where it is a sliver; demand a thin dashed line, above the band
# where tasks wait.
_STYLES = {
    "busy": _Style("#9ecae1"),
    "idle": _Style("#d62728"),
    "demand": _Style("#333333", width=1.0, dashed=True),
}
_POLICY_COLORS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd")


class PlotError(ValueError):
    """A plot that cannot be written as asked."""


def check_plot_path(path: str | os.PathLike[str]) -> None:
    """Refuse, before a long run, a file type we do not write."""
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        hint = " (PNG would need a plotting library dynagent does not depend on)"
        raise PlotError(
            f"--plot {os.fspath(path)!r}: write a .html (self-contained, opens in any "
            f"browser) or .svg file{hint if suffix == '.png' else ''}"
        )


def timeline_charts(replay: Replay) -> list[str]:
    """One chart per policy, on the same time axis and the same GPU scale, so they
    compare at a glance."""
    start = replay.trace.start
    end = max((run.end for run in replay.runs), default=start + 1)
    unit, unit_name = _time_unit(end - start)
    sampled = [(run.policy, run.series.averaged(start, end, _BUCKETS)) for run in replay.runs]
    top = max((max(s[1], s[2]) for _, samples in sampled for s in samples), default=1.0)
    return [
        line_chart(
            _timeline_title(replay.column(policy)),
            *_timeline_series([((s[0] - start) / unit, s) for s in samples]),
            x_label=f"{unit_name} since the trace's start",
            y_label="GPUs (mean over each step)",
            y_max=top,
        )
        for policy, samples in sampled
    ]


def _timeline_series(
    timed: Sequence[tuple[float, tuple[int, float, float, float]]],
) -> tuple[list[Line], list[Band]]:
    """Busy GPUs as an area, the fleet above them as a band, demand as a line.
    Each sample is ``(second, demand, fleet, busy)`` (``Series.averaged``)."""
    lines = [_line("demand (GPUs asked for)", "demand", [(t, s[1]) for t, s in timed])]
    bands = [
        _band("busy (GPUs running tasks)", "busy", [(t, 0, s[3]) for t, s in timed]),
        _band("idle (GPUs billed, no task; its top is the fleet)", "idle",
              [(t, s[3], s[2]) for t, s in timed]),
    ]  # fmt: skip
    return lines, bands


def _timeline_title(column: Summary) -> str:
    """The billed GPU-hours, how many of them ran no task, and the ratio to the limit."""
    idle = column.gpu_hours - column.busy_gpu_hours
    share = idle / column.gpu_hours if column.gpu_hours else 0.0
    return (
        f"{column.name}: {column.gpu_hours:,.0f} GPU-hours billed, {idle:,.0f} of them "
        f"({share:.0%}) running no task; {column.vs_limit:.3f} x the limit"
    )


def _line(label: str, key: str, points: Sequence[tuple[float, float]]) -> Line:
    style = _STYLES[key]
    return Line(label, style.color, points, style.dashed, style.width, key)


def _band(label: str, key: str, points: Sequence[tuple[float, float, float]]) -> Band:
    style = _STYLES[key]
    return Band(label, style.color, points, style.opacity, key)


def sweep_charts(field: str, points: Sequence[tuple[str, Replay]]) -> list[str]:
    """Cost against the p50, the p95 and the mean wait, one line per policy, each point
    labelled with its value. The p95 is mostly one boot for any idle period; the p50
    says whether the typical task waits for one (what warm headroom buys); the mean
    shows how many more tasks wait for a boot when agents are reaped sooner."""
    return [
        _sweep_chart(field, points, "p50 wait", lambda c: float(c.wait_p50 or 0)),
        _sweep_chart(field, points, "p95 wait", lambda c: float(c.wait_p95 or 0)),
        _sweep_chart(field, points, "mean wait", lambda c: c.wait_mean or 0.0),
    ]


def _sweep_chart(
    field: str,
    points: Sequence[tuple[str, Replay]],
    wait: str,
    wait_of: Callable[[Summary], float],
) -> str:
    names = [run.policy for run in points[0][1].runs] if points else []
    groups = []
    for index, name in enumerate(names):
        group = [
            Point(wait_of(result.column(name)), result.column(name).cost, value)
            for value, result in points
        ]
        groups.append(PointGroup(name, _POLICY_COLORS[index % len(_POLICY_COLORS)], group))
    return point_chart(
        f"cost against {wait}, by {field}",
        groups,
        f"{wait} (seconds)",
        "cost ($)",
        x_from_zero=True,
        y_format=lambda v: f"${v:,.0f}",
    )


def write_plot(
    path: str | os.PathLike[str], title: str, charts: Sequence[str], text: str = ""
) -> None:
    """Write the charts to ``path``: an SVG stacking them, or an HTML page with ``text``."""
    check_plot_path(path)
    target = Path(path)
    if target.suffix.lower() == ".svg":
        target.write_text(_stacked_svg(charts))
    else:
        target.write_text(_html(title, charts, text))


def _stacked_svg(charts: Sequence[str]) -> str:
    height = HEIGHT * len(charts)
    placed = [
        chart.replace("<svg ", f'<svg y="{index * HEIGHT}" ', 1)
        for index, chart in enumerate(charts)
    ]
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}">',
            *placed,
            "</svg>",
        ]
    )


def _html(title: str, charts: Sequence[str], text: str) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{escape(title)}</title>",
            "<style>body{font-family:system-ui,sans-serif;margin:2em}pre{font-size:13px}</style>",
            "</head><body>",
            f"<h1>{escape(title)}</h1>",
            f"<pre>{escape(text)}</pre>" if text else "",
            *(f"<div>{chart}</div>" for chart in charts),
            "</body></html>",
        ]
    )


def _time_unit(span: int) -> tuple[float, str]:
    """Days for a month, hours for a day, minutes for less."""
    if span >= 2 * 86400:
        return 86400.0, "days"
    if span >= 2 * 3600:
        return 3600.0, "hours"
    return 60.0, "minutes"
