"""What the plots show a person, read back from their SVG: the GPUs billed and running
no task as a band of their own, and one GPU scale for both policies."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from dynagent.simulate.plot import timeline_charts

from .builders import mixed_pool, replay_both, trace

SVG = "{http://www.w3.org/2000/svg}"
# Jobs of 1 to 3 GPUs every 15 minutes: short idle periods reap the machines between them.
JOBS = trace(*[(i * 900, 600, 1 + i % 3) for i in range(12)])


def texts(svg: ET.Element, kind: str) -> list[ET.Element]:
    return [e for e in svg.iter(f"{SVG}text") if e.get("class") == kind]


def value(text: ET.Element) -> float:
    return float((text.text or "").replace("$", "").replace(",", ""))


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
