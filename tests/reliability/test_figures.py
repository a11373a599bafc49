"""The figures' targets and the table, with plain data."""

from __future__ import annotations

from tests.reliability.figures import Figures, table


def passing() -> Figures:
    return Figures("R1 duplicates", "aws", runs=3, launches_expected=2, launches_made=2, faults=6)


def test_figures_on_target_have_no_problem() -> None:
    assert passing().problems() == []


def test_each_figure_off_target_is_a_problem() -> None:
    figures = passing()
    figures.launches_made, figures.leaked, figures.touched, figures.lost = 3, 1, 2, 4
    figures.faults = 0
    assert figures.problems() == [
        "no fault injected: the scenario proves nothing",
        "launches: 3 made, 2 expected",
        "leaked: 1",
        "touched: 2",
        "lost: 4",
    ]


def test_a_limit_of_the_scenario_is_checked() -> None:
    figures = passing()
    figures.calls_per_minute = 200.0
    figures.limits = {"calls_per_minute": 120, "memory_mb": 256}
    figures.extra = {"memory_mb": 100}
    assert figures.problems() == ["calls_per_minute: 200.0 over its limit 120"]


def test_table_lists_every_scenario_in_both_forms() -> None:
    text = table([passing()])
    assert "R1 duplicates" in text.splitlines()[1]
    markdown = table([passing()], markdown=True).splitlines()
    assert markdown[1].startswith("|---|") and "| R1 duplicates | aws | 3 | 2/2 |" in markdown[2]
