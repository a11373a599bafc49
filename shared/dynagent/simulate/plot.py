"""The replay's plots: demand, fleet and busy GPUs over time; cost against wait in a sweep.

Written as SVG by our own code (``chart``), alone (``.svg``) or in a self-contained HTML
page with the report's table (``.html``): no plotting library, nothing to fetch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path

from dynagent.simulate.chart import HEIGHT, WIDTH, Line, Point, PointGroup, line_chart, point_chart
from dynagent.simulate.metrics import Summary
from dynagent.simulate.replay import Replay

SUFFIXES = (".html", ".svg")
# Points per line: finer than a screen shows, coarse enough for a small file.
_BUCKETS = 800
_COLORS = {"demand": "#7f7f7f", "fleet": "#d62728", "busy": "#1f77b4"}
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
    """One chart per policy, on the same time axis, so they compare at a glance."""
    start = replay.trace.start
    end = max((run.end for run in replay.runs), default=start + 1)
    unit, unit_name = _time_unit(end - start)
    charts = []
    for run in replay.runs:
        samples = run.series.averaged(start, end, _BUCKETS)
        times = [(t - start) / unit for t, *_ in samples]
        column = replay.column(run.policy)
        charts.append(
            line_chart(
                f"{run.policy}: {column.gpu_hours:,.0f} GPU-hours billed, "
                f"{column.vs_limit:.3f} x the limit",
                [
                    _line("fleet (GPUs billed)", "fleet", times, [s[2] for s in samples]),
                    _line("busy (GPUs in use)", "busy", times, [s[3] for s in samples]),
                    _line("demand (GPUs asked for)", "demand", times, [s[1] for s in samples]),
                ],
                f"{unit_name} since the trace's start",
                "GPUs (mean over each step)",
            )
        )
    return charts


def _line(label: str, key: str, times: Sequence[float], values: Sequence[float]) -> Line:
    return Line(label, _COLORS[key], list(zip(times, values, strict=True)), key == "demand")


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
