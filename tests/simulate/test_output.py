"""What a person sees: the table, the JSON, the plots, the progress bar."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from dynagent.simulate.chart import nice_ticks
from dynagent.simulate.plot import PlotError, timeline_charts, write_plot
from dynagent.simulate.progress import ProgressBar
from dynagent.simulate.report import document, table
from dynagent.simulate.series import Series

from .builders import replay_both, trace


def test_the_table_reads_row_by_row() -> None:
    text = table(replay_both(trace((0, 3600, 8))))
    lines = text.splitlines()
    assert lines[0] == "hand-made: 1 jobs over 0.0 days, 8 busy GPU-hours"
    header = next(line for line in lines if "dynagent" in line and "limit" in line)
    assert header.split() == ["dynagent", "determined", "limit"]
    assert next(line for line in lines if line.startswith("wait p95")).split()[2:] == [
        "3m",
        "3m",
        "0s",
    ]
    assert "tasks never scheduled" in text
    at_cap = next(line for line in lines if line.startswith("pending at the cap")).split()
    assert at_cap[4:] == ["0s", "-", "-"]


def test_the_document_is_json() -> None:
    body = document(replay_both(trace((0, 3600, 8))))
    again = json.loads(json.dumps(body))
    assert again["columns"]["dynagent"]["instance_hours"] == round(4085 / 3600, 3)
    assert again["columns"]["limit"]["vs_limit"] == 1.0
    assert again["columns"]["dynagent"]["pending_at_max_seconds"] == 0
    assert again["columns"]["determined"]["pending_at_max_seconds"] is None
    assert again["fitting_policy"] == "best"
    assert again["boot"] == {
        "running_after": 60,
        "registered_after": 180,
        "jitter": 0,
        "seed": 0,
        "per_gpu": 0,
        "started_after": 90,
    }


def test_plots_are_svg_or_html(tmp_path: Path) -> None:
    charts = timeline_charts(replay_both(trace((0, 3600, 8), (4000, 600, 16))))
    # The waits, the backlog, and the fleet of each policy.
    assert len(charts) == 4 and all(c.startswith("<svg") for c in charts)
    write_plot(tmp_path / "p.svg", "t", charts)
    stacked = (tmp_path / "p.svg").read_text()
    assert stacked.count("<svg") == 5 and 'y="900"' in stacked
    write_plot(tmp_path / "p.html", "a <title>", charts, "the table")
    page = (tmp_path / "p.html").read_text()
    assert "a &lt;title&gt;" in page and "<pre>the table</pre>" in page
    with pytest.raises(PlotError, match="PNG"):
        write_plot(tmp_path / "p.png", "t", charts)


def test_series_keeps_changes_and_averages_over_time() -> None:
    series = Series()
    series.record(0, 8, 8, 8)
    series.record(0, 8, 16, 8)  # the same second: the later one stands
    series.record(5, 8, 16, 8)  # no change: not kept
    series.record(10, 0, 0, 0)
    assert series.samples == [(0, 8, 16, 8), (10, 0, 0, 0)]
    # Two buckets of 10 s: the first all at 16, the second all at 0.
    assert series.averaged(0, 20, 2) == [(10, 8.0, 16.0, 8.0), (20, 0.0, 0.0, 0.0)]
    # One bucket of 20 s: half at 16.
    assert series.averaged(0, 20, 1) == [(20, 4.0, 8.0, 4.0)]


@pytest.mark.parametrize(("low", "high"), [(0, 7), (0, 330), (179.5, 183.5), (2, 2)])
def test_ticks_are_round_and_cover_the_range(low: float, high: float) -> None:
    ticks = nice_ticks(low, high)
    assert ticks[0] <= low and ticks[-1] >= high
    assert len(ticks) <= 12


def test_the_progress_bar_redraws_by_whole_percent_and_ends_its_line() -> None:
    out = io.StringIO()
    bar = ProgressBar(out, "dynagent", width=10)
    for fraction in (0.0, 0.001, 0.5, 0.504, 1.0):
        bar(fraction)
    written = out.getvalue()
    assert written.count("\r") == 3
    assert "[#####.....]  50%" in written
    assert written.endswith("[##########] 100%\n")
