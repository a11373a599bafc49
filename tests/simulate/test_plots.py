"""What the plots show a person, read back from their SVG: the waits as the share of
tasks started within each wait, one line per policy; the backlog on a panel of its own;
the GPUs billed and running no task as a band of their own, on one scale for both
policies that is the fleet's and the cap's (the cap drawn), not the demand's; time axes
that end soon after the last task; and sweep charts whose labels stay clear of the axes
and whose wait axes do not stretch a few seconds across the whole width.

Text boxes are estimated here on their own, on the wide side: no glyph of a 12 px sans
is wider than 12 px, and none but the likes of m and w wider than 0.7 of it.
"""

from __future__ import annotations

import bisect
import itertools
import math
import xml.etree.ElementTree as ET

import pytest

from dynagent.simulate.boot import BootModel
from dynagent.simulate.chart import Point, PointGroup, axis_range, point_chart
from dynagent.simulate.plot import (
    backlog_chart,
    fleet_charts,
    last_task_end,
    plot_end,
    pool_cap,
    sweep_charts,
    wait_chart,
)
from dynagent.simulate.run import RunOptions
from dynagent.simulate.sweep import SweepSpec, sweep

from .builders import SETTINGS, mixed_pool, pool, replay_both, trace

SVG = "{http://www.w3.org/2000/svg}"
Box = tuple[float, float, float, float]  # left, top, right, bottom
# Jobs of 1 to 3 GPUs every 15 minutes: short idle periods reap the machines between them.
JOBS = trace(*[(i * 900, 600, 1 + i % 3) for i in range(12)])


def texts(svg: ET.Element, kind: str) -> list[ET.Element]:
    return [e for e in svg.iter(f"{SVG}text") if e.get("class") == kind]


def value(text: ET.Element) -> float:
    """A tick's number: dollars and thousands as written, a percentage as a share."""
    label = (text.text or "").replace("$", "").replace(",", "")
    return float(label[:-1]) / 100 if label.endswith("%") else float(label)


def text_box(text: ET.Element) -> Box:
    label, size = text.text or "", float(text.get("font-size", "12"))
    width = sum(size if c in "mwMW%" else 0.7 * size for c in label)
    x, y = float(text.get("x", "0")), float(text.get("y", "0"))
    left = {"start": x, "middle": x - width / 2, "end": x - width}[text.get("text-anchor", "start")]
    return (left, y - size, left + width, y + 0.3 * size)


def frame(svg: ET.Element) -> Box:
    rect = next(e for e in svg.iter(f"{SVG}rect") if e.get("class") == "frame")
    x, y = float(rect.get("x", "0")), float(rect.get("y", "0"))
    return (x, y, x + float(rect.get("width", "0")), y + float(rect.get("height", "0")))


def overlaps(a: Box, b: Box) -> bool:
    return min(a[2], b[2]) > max(a[0], b[0]) and min(a[3], b[3]) > max(a[1], b[1])


def polygon_area(element: ET.Element) -> float:
    corners = [tuple(map(float, xy.split(","))) for xy in element.get("points", "").split()]
    pairs = zip(corners, corners[1:] + corners[:1], strict=True)
    return abs(sum(x1 * y2 - x2 * y1 for (x1, y1), (x2, y2) in pairs)) / 2


def test_both_policies_share_one_gpu_scale() -> None:
    # dynagent fits 1 and 2 GPUs on small machines; Determined launches 8-GPU ones.
    result = replay_both(trace((0, 3600, 1), (600, 1800, 2)), mixed_pool())
    peaks = [max(fleet for _, _, fleet, _ in run.series.samples) for run in result.runs]
    assert len(set(peaks)) == 2  # their fleets peak apart, so one scale is a choice
    tops = [max(map(value, texts(ET.fromstring(c), "tick-y"))) for c in fleet_charts(result)]
    assert len(tops) == 2 and tops[0] == tops[1] >= max(peaks)


def test_the_gpus_billed_and_running_no_task_are_a_band_of_their_own() -> None:
    result = replay_both(JOBS)
    for chart, run in zip(fleet_charts(result), result.runs, strict=True):
        svg = ET.fromstring(chart)
        bands = {e.get("data-series"): e for e in svg.iter(f"{SVG}polygon")}
        column = result.column(run.policy)
        # The red band's area over the busy area's is the billed hours beyond busy over
        # the busy hours, whatever the scale.
        drawn = polygon_area(bands["idle"]) / polygon_area(bands["busy"])
        billed = (column.gpu_hours - column.busy_gpu_hours) / column.busy_gpu_hours
        assert billed > 0.1 and drawn == pytest.approx(billed, rel=0.01)
        assert bands["idle"].get("fill") != bands["busy"].get("fill")


def polyline(svg: ET.Element, series: str) -> list[tuple[float, float]]:
    line = next(e for e in svg.iter(f"{SVG}polyline") if e.get("data-series") == series)
    return [(float(x), float(y)) for x, y in (p.split(",") for p in line.get("points", "").split())]


def y_scale(svg: ET.Element) -> tuple[float, float]:
    """Pixels per unit up the y axis, and the pixel of zero, from the ticks' labels
    (each drawn 4 px below its grid line)."""
    ticks = sorted((value(t), float(t.get("y", "0")) - 4) for t in texts(svg, "tick-y"))
    (low, low_y), (high, high_y) = ticks[0], ticks[-1]
    per_unit = (low_y - high_y) / (high - low)
    return per_unit, low_y + low * per_unit


WAIT_LABELS = {"1 s": 1, "10 s": 10, "1 min": 60, "10 min": 600, "1 h": 3600, "6 h": 21600,
               "1 d": 86400, "7 d": 604800}  # fmt: skip


def wait_at(svg: ET.Element, x: float) -> float:
    """The wait a pixel of the log-scale wait axis stands for, from its first and last
    labelled ticks."""
    ticks = sorted(
        (float(t.get("x", "0")), WAIT_LABELS[t.text or ""]) for t in texts(svg, "tick-x")
    )
    (x0, s0), (x1, s1) = ticks[0], ticks[-1]
    return 10 ** (math.log10(s0) + (x - x0) / (x1 - x0) * (math.log10(s1) - math.log10(s0)))


def test_the_waits_are_the_share_of_tasks_started_within_each_wait_per_policy() -> None:
    result = replay_both(JOBS)
    svg = ET.fromstring(wait_chart(result))
    lines = {e.get("data-series") for e in svg.iter(f"{SVG}polyline")}
    assert lines == {"dynagent", "determined"}
    per_unit, zero = y_scale(svg)
    for run in result.runs:
        points = polyline(svg, run.policy)
        shares = [(zero - y) / per_unit for _, y in points]
        assert shares == sorted(shares) and shares[0] == pytest.approx(0, abs=1e-6)
        assert shares[-1] == pytest.approx(1.0)
        # It reaches 100 % at the longest wait, not before.
        first_full = next(x for (x, _), share in zip(points, shares, strict=True) if share > 0.999)
        assert wait_at(svg, first_full) == pytest.approx(run.waits[-1], rel=0.01)
        # Half the tasks started within the median wait (half the line's height there).
        median = run.waits[(len(run.waits) - 1) // 2]
        below = [
            s for (x, _), s in zip(points, shares, strict=True) if wait_at(svg, x) < median * 0.99
        ]
        assert (
            max(below, default=0) < 0.5 <= bisect.bisect_right(run.waits, median) / len(run.waits)
        )


def test_tasks_never_started_keep_the_waits_below_all_tasks() -> None:
    result = replay_both(trace((0, 600, 8), (0, 600, 64)))  # 64 GPUs: more than the pool
    svg = ET.fromstring(wait_chart(result))
    per_unit, zero = y_scale(svg)
    for run in result.runs:
        assert run.never_scheduled == 1
        assert (zero - polyline(svg, run.policy)[-1][1]) / per_unit == pytest.approx(0.5)


def test_the_fleet_is_drawn_on_its_own_scale_with_the_cap_and_the_backlog_apart() -> None:
    # Twenty 8-GPU jobs at once on a pool of one 8-GPU machine: 160 GPUs asked for.
    result = replay_both(trace(*[(0, 1800, 8)] * 20), pool(max_instances=1))
    assert pool_cap(result.pool) == 8
    for chart in fleet_charts(result):
        svg = ET.fromstring(chart)
        top = max(map(value, texts(svg, "tick-y")))
        assert 8 <= top <= 10  # the fleet's scale, not the 160 GPUs of demand
        per_unit, zero = y_scale(svg)
        cap = next(e for e in svg.iter(f"{SVG}line") if e.get("data-series") == "cap")
        assert float(cap.get("y1", "0")) == pytest.approx(zero - 8 * per_unit, abs=0.1)
        assert float(cap.get("y1", "0")) == float(cap.get("y2", "1"))
    backlog = ET.fromstring(backlog_chart(result))
    assert {e.get("data-series") for e in backlog.iter(f"{SVG}polyline")} == {
        "dynagent",
        "determined",
    }
    assert max(map(value, texts(backlog, "tick-y"))) >= 152  # 19 of the jobs queued at first


def test_the_cap_with_offerings_is_their_cap_in_gpus() -> None:
    assert pool_cap(pool()) == 4 * 8
    assert pool_cap(mixed_pool()) == 8 * 8  # max_instances x instance_type's GPUs
    assert pool_cap(mixed_pool(offerings={"instance_types": ["p3.2xlarge"], "max_slots": 12})) == 12


def test_the_time_axis_ends_soon_after_the_last_task() -> None:
    # Determined launches for a 64-GPU task it can never place until the run's drain
    # period ends, six hours after the last task; the axis stops an hour after it.
    result = replay_both(trace((0, 600, 8), (0, 600, 64)))
    last = max(last_task_end(run.series, run.end) for run in result.runs)
    runs_end = max(run.end for run in result.runs)
    assert last == 780 and runs_end > last + 5 * 3600
    assert plot_end(result) == last + 3600
    for chart in [*fleet_charts(result), backlog_chart(result)]:
        svg = ET.fromstring(chart)
        right = frame(svg)[2]
        ticks = sorted((value(t), float(t.get("x", "0"))) for t in texts(svg, "tick-x"))
        (t0, x0), (t1, x1) = ticks[0], ticks[-1]
        axis_end = t0 + (right - x0) / (x1 - x0) * (t1 - t0)  # in minutes
        assert axis_end * 60 == pytest.approx(last + 3600, abs=1)


def test_a_backlog_that_outlasts_the_trace_is_drawn_to_its_end_with_the_trace_end_marked() -> None:
    # Six hour-long 8-GPU jobs at once on one machine: the last ends near 6 h, the trace at 1 h.
    result = replay_both(trace(*[(0, 3600, 8)] * 6), pool(max_instances=1))
    last = max(last_task_end(run.series, run.end) for run in result.runs)
    assert last > 6 * 3600 > result.trace.end
    assert last <= plot_end(result) <= last + 3600
    svg = ET.fromstring(backlog_chart(result))
    rule = next(e for e in svg.iter(f"{SVG}line") if e.get("data-series") == "trace-end")
    assert float(rule.get("data-value", "0")) == pytest.approx(1.0)  # in hours


def idle_sweep() -> list[str]:
    """A sweep whose p95s differ by 6 s and whose p50s include 0 s (the machine still up)."""
    spec = SweepSpec("max_idle_agent_period", ("1m", "5m", "20m"))
    options = RunOptions(boot=BootModel(jitter=20, seed=5))
    return sweep_charts(spec.field, sweep(JOBS, pool(), SETTINGS, spec, options=options))


def crowded_chart() -> str:
    """A policy's points on the frame's left edge (no wait) and another's four at one
    spot, on top of one of the first's."""
    first = [Point(0, 300, "64"), Point(0, 200, "32"), Point(150, 110, "8")]
    second = [Point(150, 110, label) for label in ("0", "8", "32", "64")]
    groups = [PointGroup("a", "red", first), PointGroup("b", "blue", second)]
    return point_chart("crowded", groups, "wait", "cost", x_from_zero=True)


def test_sweep_labels_stay_clear_of_the_ticks_and_of_each_other() -> None:
    charts = [*idle_sweep(), crowded_chart()]
    for chart in charts:
        svg = ET.fromstring(chart)
        labels = [text_box(e) for e in texts(svg, "point-label")]
        ticks = [text_box(e) for e in texts(svg, "tick-x") + texts(svg, "tick-y")]
        assert labels and ticks
        inner = frame(svg)
        for label in labels:
            assert not any(overlaps(label, tick) for tick in ticks)
            assert inner[0] <= label[0] and label[2] <= inner[2]
            assert inner[1] <= label[1] and label[3] <= inner[3]
        assert not any(overlaps(a, b) for a, b in itertools.combinations(labels, 2))


def test_a_few_seconds_of_wait_are_not_stretched_across_the_axis() -> None:
    p95 = ET.fromstring(idle_sweep()[1])
    xs = [float(c.get("cx", "0")) for c in p95.iter(f"{SVG}circle")]
    left, _, right, _ = frame(p95)
    ticks = sorted(value(t) for t in texts(p95, "tick-x"))
    # Pixels to seconds, from the first and last tick, which sit on the frame's edges.
    seconds = [ticks[0] + (x - left) / (right - left) * (ticks[-1] - ticks[0]) for x in xs]
    spread = max(seconds) - min(seconds)
    assert 0 < spread < 0.05 * max(seconds)  # waits apart by a few seconds out of minutes
    # On screen that difference takes no more of the axis than of the wait itself.
    assert (max(xs) - min(xs)) / (right - left) <= spread / max(seconds) + 0.01


@pytest.mark.parametrize(
    ("values", "from_zero"),
    [
        ([215, 218], True),
        ([100_133, 100_190], False),
        ([100_133, 313_063], False),
        ([0, 0], False),
        ([-5, 5], False),
    ],
)
def test_an_axis_covers_its_values_and_a_tenth_of_their_size(
    values: list[float], from_zero: bool
) -> None:
    low, high = axis_range(values, from_zero)
    assert low < min(values) or low == 0 <= min(values)
    assert high > max(values)
    assert low >= 0 or min(values) < 0
    assert low == 0 or not from_zero
    assert high - low >= 0.1 * max(abs(v) for v in values)
