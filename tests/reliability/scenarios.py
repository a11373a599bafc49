"""Every scenario of the suite, in the order the table lists them."""

from __future__ import annotations

from tests.reliability import aws_scenarios, gcp_scenarios
from tests.reliability.figures import Scenario

SCENARIOS: dict[str, Scenario] = {
    **{f"aws {name}": run for name, run in aws_scenarios.SCENARIOS.items()},
    **{f"gcp {name}": run for name, run in gcp_scenarios.SCENARIOS.items()},
}
