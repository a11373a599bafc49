"""The suite's short form: every scenario meets every target."""

from __future__ import annotations

import pytest

from tests.reliability.clouds import Clouds
from tests.reliability.figures import Mode
from tests.reliability.scenarios import SCENARIOS


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_meets_its_targets(clouds: Clouds, name: str) -> None:
    figures = SCENARIOS[name](clouds, Mode())
    assert figures.problems() == [], figures


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_fails_without_its_faults(clouds: Clouds, name: str) -> None:
    """A scenario whose injection is removed must not pass: its faults are part of it."""
    figures = SCENARIOS[name](clouds, Mode(inject=False))
    assert figures.faults == 0
    assert "no fault injected: the scenario proves nothing" in figures.problems()
