"""The reliability scenarios on the local Compute Engine and the Pub/Sub emulator."""

from __future__ import annotations

from tests.reliability.figures import Scenario

SCENARIOS: dict[str, Scenario] = {}
