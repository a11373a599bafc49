"""The reliability scenarios on the local AWS (moto's server over HTTP)."""

from __future__ import annotations

from tests.reliability.figures import Scenario

SCENARIOS: dict[str, Scenario] = {}
