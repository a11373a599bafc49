"""Which instance an agent is: its DET_AGENT_ID is the instance id, as the boot script
sets it; an agent started without it registers under its hostname, which is matched
too; one that matches nothing is reported, never silently dropped."""

from __future__ import annotations

from dataclasses import replace

from dynagent.core.decide import decide
from tests.builders import NOW, agent_instance, ago, busy, fleet, idle, pool, snapshot


def test_an_agent_named_by_its_hostname_is_its_instance() -> None:
    host = replace(agent_instance("i-1"), aliases=("ip-10-0-0-5.ec2.internal", "ip-10-0-0-5"))
    plan = decide(pool(), fleet(host), snapshot(agents=[busy("ip-10-0-0-5")]), NOW)
    # Connected and busy: not missing from the snapshot, so no disconnected mark.
    assert plan.marks == () and plan.unmatched_agents == ()


def test_agents_matching_no_instance_are_reported_and_left_alone() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(1)))
    plan = decide(pool(), cloud, snapshot(agents=[idle("i-1"), busy("static-3")]), NOW)
    assert plan.unmatched_agents == ("static-3",)
    assert plan.describe()[-1] == "1 agents matching no managed instance (left alone): static-3"


def test_thousands_of_unmatched_agents_make_one_short_line() -> None:
    static = [busy(f"static-{n:05}") for n in range(5000)]
    plan = decide(pool(), fleet(), snapshot(agents=static), NOW)
    (line,) = [line for line in plan.describe() if "no managed instance" in line]
    assert line.startswith("5000 agents") and line.endswith("and 4980 more") and len(line) < 400
