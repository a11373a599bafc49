"""An agent the master places nothing on (``enabled: false``): an admin disabled it, with
drain or without, or the master waits for it to reconnect. Its free slots are never room
for pending tasks, in any pool; whether it may be terminated stays the pool's rule."""

from __future__ import annotations

import json

import pytest

from dynagent.core.config import Pool
from dynagent.core.decide import decide
from dynagent.core.snapshot import Agent, parse_snapshot
from tests.builders import (
    NOW,
    agent_instance,
    ago,
    fleet,
    pool,
    snapshot,
    snapshot_document,
    task,
)

DRAINED = pool(drain_idle_agents=True)
POOLS = pytest.mark.parametrize("config", [pool(), DRAINED], ids=["no drain", "drain"])


def disabled(agent_id: str, used: int = 0, *, draining: bool = False) -> Agent:
    return Agent(id=agent_id, slots=4, used_slots=used, enabled=False, draining=draining)


@POOLS
def test_its_free_slots_are_no_room_for_pending_tasks(config: Pool) -> None:
    cloud = fleet(agent_instance("i-1"), agent_instance("i-2"))
    pending = [task("t-1", 2), task("t-2", 4)]
    agents = [disabled("i-1", used=2), disabled("i-2")]
    plan = decide(config, cloud, snapshot(agents=agents, pending=pending), NOW)
    assert sorted(launch.tasks for launch in plan.launches) == [("t-1",), ("t-2",)]
    enabled = [Agent(id=a.id, slots=4, used_slots=a.used_slots) for a in agents]
    assert decide(config, cloud, snapshot(agents=enabled, pending=pending), NOW).launches == ()


def test_disabled_with_drain_it_is_no_room_even_in_a_drained_pool() -> None:
    """``draining`` alone is room in a drained pool (its publisher enables it again for
    the tasks); with ``enabled: false`` nobody does."""
    cloud = fleet(agent_instance("i-1"))
    pending = [task("t", 4)]
    plan = decide(
        DRAINED, cloud, snapshot(agents=[disabled("i-1", draining=True)], pending=pending), NOW
    )
    assert [launch.tasks for launch in plan.launches] == [("t",)]


@POOLS
def test_a_zero_slot_task_gets_an_agent_when_the_only_one_is_disabled(config: Pool) -> None:
    cloud = fleet(agent_instance("i-1"))
    pending = [task("cmd", 0)]
    plan = decide(config, cloud, snapshot(agents=[disabled("i-1", used=4)], pending=pending), NOW)
    assert [launch.tasks for launch in plan.launches] == [("cmd",)]


def test_in_a_drained_pool_it_is_terminated_only_once_reported_draining() -> None:
    """Unschedulable is not terminable: an admin's disabled agent stays, however long
    idle, until the publisher reports it draining (the bridge claims it so)."""
    cloud = fleet(agent_instance("i-1", idle_since=ago(hours=5)))
    assert decide(DRAINED, cloud, snapshot(agents=[disabled("i-1")]), NOW).terminations == ()
    drained = snapshot(agents=[disabled("i-1", draining=True)])
    assert [t.instance_id for t in decide(DRAINED, cloud, drained, NOW).terminations] == ["i-1"]


def test_without_drain_the_idle_period_decides_as_for_any_agent() -> None:
    idle_long = fleet(agent_instance("i-1", idle_since=ago(25)))
    plan = decide(pool(), idle_long, snapshot(agents=[disabled("i-1")]), NOW)
    assert [t.instance_id for t in plan.terminations] == ["i-1"]
    idle_short = fleet(agent_instance("i-1", idle_since=ago(5)))
    assert decide(pool(), idle_short, snapshot(agents=[disabled("i-1")]), NOW).terminations == ()


def test_enabled_is_optional_in_version_1() -> None:
    old = parse_snapshot(json.dumps(snapshot_document()))
    assert old.agents[0].enabled is True
    agents = [{"id": "i-0a", "slots": 4, "used_slots": 2, "enabled": False}]
    new = parse_snapshot(json.dumps(snapshot_document(agents=agents)))
    assert new.agents[0].enabled is False and new.agents[0].draining is False
    assert json.loads(new.to_json())["agents"][0]["enabled"] is False
