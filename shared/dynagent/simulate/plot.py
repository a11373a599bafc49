"""The replay's plots: the waits as a distribution, the backlog, and each policy's fleet
over time; cost against wait in a sweep.

Written as SVG by our own code (``chart``), alone (``.svg``) or in a self-contained HTML
page with the report's table (``.html``): no plotting library, nothing to fetch.
"""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from dynagent.core.config import Pool
from dynagent.simulate.chart import (
    HEIGHT,
    WIDTH,
    Band,
    Line,
    Point,
    PointGroup,
    Rule,
    line_chart,
    point_chart,
)
from dynagent.simulate.metrics import Summary
from dynagent.simulate.replay import Replay
from dynagent.simulate.run import PolicyRun
from dynagent.simulate.series import Series

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
# waste shows even where it is a sliver.
_STYLES = {
    "busy": _Style("#9ecae1"),
    "idle": _Style("#d62728"),
}
_POLICY_COLORS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd")
_CAP_COLOR = "#2ca02c"
# The wait axis's ticks: round durations, about evenly apart on a log scale.
_WAIT_TICKS = (
    (1, "1 s"), (10, "10 s"), (60, "1 min"), (600, "10 min"), (3600, "1 h"), (6 * 3600, "6 h"),
    (86400, "1 d"), (7 * 86400, "7 d"), (30 * 86400, "30 d"), (90 * 86400, "90 d"),
    (365 * 86400, "1 y"),
    (3650 * 86400, "10 y"),
)  # fmt: skip


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
    """A replay's charts, in the order a person asks: how long tasks waited
    (``wait_chart``), how much work queued (``backlog_chart``), and the fleet each policy
    billed for it (``fleet_charts``)."""
    return [wait_chart(replay), backlog_chart(replay), *fleet_charts(replay)]


def plot_end(replay: Replay) -> int:
    """Where the time axes end: when the last task ended under the policy that took
    longest, plus a little (a fiftieth of the span, at least an hour) to show the fleet
    going, or the runs' end if that is sooner.

    A run stops once its fleet has settled after the last task, ``run.DRAIN`` (6 h) after
    it if a policy keeps churning over a task it cannot place, or, if tasks never end,
    at a give-up point far past the trace: none of that is worth an axis. A trace whose
    tasks queue for weeks behind a small cap does end weeks after its last arrival,
    and the axis shows that, with the trace's own end marked (``_trace_end_rule``)."""
    start = replay.trace.start
    runs_end = max((run.end for run in replay.runs), default=start + 1)
    last = max((last_task_end(run.series, run.end) for run in replay.runs), default=start)
    pad = max(3600, (last - start) // 50)
    return max(start + 1, min(runs_end, last + pad))


def last_task_end(series: Series, end: int) -> int:
    """When the last busy GPU of a run went idle (its ``end`` if one never did)."""
    samples = series.samples
    for index in range(len(samples) - 1, -1, -1):
        if samples[index][3] > 0:
            return samples[index + 1][0] if index + 1 < len(samples) else end
    return samples[0][0] if samples else end


def pool_cap(pool: Pool) -> int:
    """The most GPUs the pool may hold: ``slot_cap`` with offerings, else
    ``max_instances`` machines of ``slots_per_instance``."""
    provider = pool.provider
    cap = provider.slot_cap
    return cap if cap is not None else provider.max_instances * provider.slots_per_instance


def fleet_charts(replay: Replay) -> list[str]:
    """One chart per policy of the GPUs it billed, on one time axis and one GPU scale,
    so they compare at a glance. The scale is the fleet's and the cap's, never the
    demand's: a fleet of 8 stays visible under a backlog of 1,500 (``backlog_chart``
    draws that). A dotted line marks the pool's cap."""
    start, end = replay.trace.start, plot_end(replay)
    unit, unit_name = _time_unit(end - start)
    cap = pool_cap(replay.pool)
    peak = max((s[2] for run in replay.runs for s in run.series.samples), default=0)
    rules = [Rule(f"the pool's cap: {cap:,} GPUs", _CAP_COLOR, cap, series="cap")]
    rules += _trace_end_rule(replay, end, unit, unit_name)
    charts = []
    for run in replay.runs:
        samples = run.series.averaged(start, end, _BUCKETS)
        timed = [((s[0] - start) / unit, s) for s in samples]
        charts.append(
            line_chart(
                _timeline_title(replay.column(run.policy)),
                [],
                _fleet_bands(timed),
                x_label=_fleet_x_label(unit_name, run.end - end),
                y_label="GPUs (mean over each step)",
                y_max=max(cap, peak, 1) * 1.1,
                rules=rules,
                x_range=(0, (end - start) / unit),
            )
        )
    return charts


def _fleet_x_label(unit_name: str, beyond: int) -> str:
    """The time axis's label, saying how long the run billed past the axis's end."""
    label = f"{unit_name} since the trace's start"
    if beyond > 0:
        label += f" (the run went on {_duration(beyond)} past the axis, its fleet not settled)"
    return label


def _fleet_bands(timed: Sequence[tuple[float, tuple[int, float, float, float]]]) -> list[Band]:
    """Busy GPUs as an area, the fleet above them as a band. Each sample is ``(second,
    demand, fleet, busy)`` (``Series.averaged``)."""
    return [
        _band("busy (GPUs running tasks)", "busy", [(t, 0, s[3]) for t, s in timed]),
        _band("idle (GPUs billed, no task; its top is the fleet)", "idle",
              [(t, s[3], s[2]) for t, s in timed]),
    ]  # fmt: skip


def backlog_chart(replay: Replay) -> str:
    """The GPUs tasks asked for that were not running (queued demand), one line per
    policy, on a scale of its own."""
    start, end = replay.trace.start, plot_end(replay)
    unit, unit_name = _time_unit(end - start)
    lines, peaks = [], []
    for index, run in enumerate(replay.runs):
        samples = run.series.averaged(start, end, _BUCKETS)
        queued = [((s[0] - start) / unit, max(0.0, s[1] - s[3])) for s in samples]
        peaks.append(
            f"{max((s[1] - s[3] for s in run.series.samples), default=0):,} under {run.policy}"
        )
        lines.append(_policy_line(index, run.policy, queued, run.policy))
    return line_chart(
        f"Backlog: GPUs asked for and not running (peak {', '.join(peaks)})",
        lines,
        [],
        x_label=f"{unit_name} since the trace's start",
        y_label="GPUs queued (mean over each step)",
        # Room above the peak for the trace's end's label.
        y_max=max((y for line in lines for _, y in line.points), default=0) * 1.15 or 1,
        rules=_trace_end_rule(replay, end, unit, unit_name),
        x_range=(0, (end - start) / unit),
    )


def _trace_end_rule(replay: Replay, end: int, unit: float, unit_name: str) -> list[Rule]:
    """A line where the trace ends (every task done, had each started on arrival),
    when the axis goes on past it: what comes after is the backlog draining."""
    trace = replay.trace
    if trace.end >= end or not trace.jobs:
        return []
    at = (trace.end - trace.start) / unit
    label = f"the trace's end ({at:,.1f} {unit_name}): later, the backlog drains"
    return [Rule(label, "#555555", at, axis="x", series="trace-end")]


def wait_chart(replay: Replay) -> str:
    """The share of tasks started within each wait, one line per policy: how long a
    person waits, the median and the tail in one look. The wait axis is logarithmic,
    from 1 s (shorter waits count at its left edge) to a round duration at or past the
    longest; tasks never started keep a line below 100 %."""
    longest = max((run.waits[-1] for run in replay.runs if run.waits), default=0)
    ticks = [tick for tick in _WAIT_TICKS if tick[0] <= max(longest, 10)]
    if ticks[-1][0] < longest and len(ticks) < len(_WAIT_TICKS):
        ticks.append(_WAIT_TICKS[len(ticks)])
    positions = {round(math.log10(seconds), 9): label for seconds, label in ticks}
    right = max(positions)
    lines = [
        _policy_line(index, _wait_label(run), _wait_steps(run, right), run.policy)
        for index, run in enumerate(replay.runs)
    ]
    return line_chart(
        "Waits: the share of tasks started within a given wait",
        lines,
        [],
        x_label="wait from arrival to start (log scale; under 1 s counts as 1 s)",
        y_label="tasks started",
        y_max=1.0,
        x_format=lambda v: positions.get(round(v, 9), ""),
        y_format=lambda v: f"{v:.0%}",
        x_range=(0.0, right),
        x_ticks=sorted(positions),
    )


def _wait_steps(run: PolicyRun, right: float) -> list[tuple[float, float]]:
    """The share of the run's tasks started within each wait, as a staircase over
    ``log10(wait)`` from 0 (1 s) to ``right``; at most ``_BUCKETS`` steps."""
    waits = run.waits
    total = len(waits) + run.never_scheduled
    if not total:
        return []
    distinct = sorted({max(1, w) for w in waits})
    if len(distinct) > _BUCKETS:
        distinct = [
            distinct[round(i * (len(distinct) - 1) / (_BUCKETS - 1))] for i in range(_BUCKETS)
        ]
    points = [(0.0, 0.0)]
    share = 0.0
    for wait in distinct:
        x = math.log10(wait)
        points.append((x, share))
        share = bisect.bisect_right(waits, wait) / total
        points.append((x, share))
    points.append((right, share))
    return points


def _wait_label(run: PolicyRun) -> str:
    """The policy, and the waits within which half and 95 % of its tasks started."""
    total = len(run.waits) + run.never_scheduled

    def within(share: float) -> str:
        rank = math.ceil(share * total) - 1
        return _duration(run.waits[rank]) if 0 <= rank < len(run.waits) else "never"

    return f"{run.policy}: half within {within(0.5)}, 95% within {within(0.95)}"


def _duration(seconds: float) -> str:
    """A wait as a person says it: 40 s, 12 min, 3.5 h, 8.6 d."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _policy_line(
    index: int, label: str, points: Sequence[tuple[float, float]], series: str
) -> Line:
    """A policy's line in its colour; the first one wider, so that where the policies
    agree both show, one along the other."""
    color = _POLICY_COLORS[index % len(_POLICY_COLORS)]
    return Line(label, color, points, width=3.5 if index == 0 else 1.5, series=series)


def _timeline_title(column: Summary) -> str:
    """The billed GPU-hours, how many of them ran no task, and the ratio to the limit."""
    idle = column.gpu_hours - column.busy_gpu_hours
    share = idle / column.gpu_hours if column.gpu_hours else 0.0
    return (
        f"{column.name}: {column.gpu_hours:,.0f} GPU-hours billed, {idle:,.0f} of them "
        f"({share:.0%}) running no task; {column.vs_limit:.3f} x the limit"
    )


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
