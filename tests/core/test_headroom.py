"""Warm headroom: free slots kept ready on the pool's smallest shape.

A snapshot says how many slots each agent has free; the sweep, with no snapshot, only
knows what the marks say (an agent marked idle has all its slots free). So the sweep
launches no headroom (it cannot see the free slots that already hold it, and the next
snapshot keeps the headroom), and reaps no idle agent the headroom needs.
"""

from __future__ import annotations

from dynagent.core.decide import decide
from tests.builders import NOW, agent_instance, ago, fleet, idle, pool, snapshot

HEADROOM = pool(warm_headroom_slots=4, max_instances=4)  # p3.8xlarge: 4 slots


def test_a_snapshot_launches_the_missing_headroom() -> None:
    plan = decide(HEADROOM, fleet(), snapshot(), NOW)
    assert len(plan.launches) == 1
    assert "warm_headroom_slots" in plan.launches[0].reason


def test_an_idle_agent_is_the_headroom() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(2)))
    assert decide(HEADROOM, cloud, snapshot(agents=[idle("i-1")]), NOW).launches == ()


def test_the_sweep_launches_no_headroom() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(2)))
    assert decide(HEADROOM, cloud, None, NOW).launches == ()


def test_an_idle_agent_the_headroom_needs_is_kept_past_its_idle_period() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(30)))
    with_snapshot = decide(HEADROOM, cloud, snapshot(agents=[idle("i-1")]), NOW)
    assert with_snapshot.terminations == ()
    assert decide(HEADROOM, cloud, None, NOW).terminations == ()


def test_idle_agents_beyond_the_headroom_are_reaped_by_either() -> None:
    cloud = fleet(*(agent_instance(f"i-{n}", idle_since=ago(30)) for n in (1, 2)))
    agents = [idle("i-1"), idle("i-2")]
    assert len(decide(HEADROOM, cloud, snapshot(agents=agents), NOW).terminations) == 1
    assert len(decide(HEADROOM, cloud, None, NOW).terminations) == 1
