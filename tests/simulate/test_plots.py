"""What the plots show a person, read back from their SVG: the GPUs billed and running
no task as a band of their own, one GPU scale for both policies, and sweep charts whose
labels stay clear of the axes and whose wait axes do not stretch a few seconds across
the whole width.

Text boxes are estimated here on their own, on the wide side: no glyph of a 12 px sans
is wider than 12 px, and none but the likes of m and w wider than 0.7 of it.
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import pytest

from dynagent.simulate.boot import BootModel
from dynagent.simulate.chart import Point, PointGroup, axis_range, point_chart
from dynagent.simulate.plot import sweep_charts, timeline_charts
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
    return float((text.text or "").replace("$", "").replace(",", ""))


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
    tops = [max(map(value, texts(ET.fromstring(c), "tick-y"))) for c in timeline_charts(result)]
    assert len(tops) == 2 and tops[0] == tops[1] >= max(peaks)


def test_the_gpus_billed_and_running_no_task_are_a_band_of_their_own() -> None:
    result = replay_both(JOBS)
    for chart, run in zip(timeline_charts(result), result.runs, strict=True):
        svg = ET.fromstring(chart)
        bands = {e.get("data-series"): e for e in svg.iter(f"{SVG}polygon")}
        column = result.column(run.policy)
        # The red band's area over the busy area's is the billed hours beyond busy over
        # the busy hours, whatever the scale.
        drawn = polygon_area(bands["idle"]) / polygon_area(bands["busy"])
        billed = (column.gpu_hours - column.busy_gpu_hours) / column.busy_gpu_hours
        assert billed > 0.1 and drawn == pytest.approx(billed, rel=0.01)
        demand = next(e for e in svg.iter(f"{SVG}polyline") if e.get("data-series") == "demand")
        # Where demand equals busy its line lies on the busy area's edge: dashed, and of
        # a colour neither area has.
        assert demand.get("stroke-dasharray")
        colours = {bands["idle"].get("fill"), bands["busy"].get("fill"), demand.get("stroke")}
        assert len(colours) == 3


def idle_sweep() -> list[str]:
    """A sweep whose p95s differ by 2 s and whose p50s include 0 s (the machine still up)."""
    spec = SweepSpec("max_idle_agent_period", ("1m", "5m", "20m"))
    options = RunOptions(boot=BootModel(jitter=20, seed=1))
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
