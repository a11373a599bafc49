"""Drain before terminate, and zero-slot tasks: what the snapshot's optional fields change.

With ``drain_idle_agents`` the master drains an idle agent first (``dynagent bridge``
disables it with drain), and the functions terminate it only once the snapshot reports
it draining and empty: nothing new can be placed there before the terminate lands.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from dynagent.core.decide import decide
from dynagent.core.snapshot import DRAINING_REPORT_LEASE, Agent, Snapshot, parse_snapshot
from tests.builders import (
    NOW,
    agent_instance,
    ago,
    busy,
    fleet,
    idle,
    pool,
    snapshot,
    snapshot_document,
    starting,
    task,
)

DRAINED = pool(drain_idle_agents=True)


def draining(agent_id: str, slots: int = 4, used: int = 0, tasks: int = 0) -> Agent:
    return Agent(id=agent_id, slots=slots, used_slots=used, draining=True, tasks=tasks)


def test_an_idle_agent_not_drained_is_never_terminated_however_long_idle() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(hours=5)))
    assert decide(DRAINED, cloud, snapshot(agents=[idle("i-1")]), NOW).terminations == ()
    assert decide(pool(), cloud, snapshot(agents=[idle("i-1")]), NOW).terminations != ()


def test_a_drained_empty_agent_is_terminated_with_its_reason() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(1)))
    plan = decide(DRAINED, cloud, snapshot(agents=[draining("i-1")]), NOW)
    assert [t.instance_id for t in plan.terminations] == ["i-1"]
    assert plan.terminations[0].reason.startswith("drained by the master and empty")


def test_a_draining_report_older_than_its_lease_terminates_nothing() -> None:
    """Found end to end (tests/bridge/test_end_to_end.py): a snapshot saying draining,
    applied late (a slow delivery, a retried record), terminated an agent the bridge
    had enabled again meanwhile and the master had placed a task on: the task was
    killed. The report is a lease: past it the agent stays, and a fresh snapshot from
    the bridge reports it draining again if it still is."""
    cloud = fleet(agent_instance("i-1", idle_since=ago(10)))
    report = snapshot(agents=[draining("i-1")], time=NOW - DRAINING_REPORT_LEASE)
    assert [t.instance_id for t in decide(DRAINED, cloud, report, NOW).terminations] == ["i-1"]
    late = NOW + timedelta(seconds=1)
    assert decide(DRAINED, cloud, report, late).terminations == ()


def retiring(*agents: Agent, time: datetime = NOW, **fields: object) -> Snapshot:
    """A snapshot of a publisher that reports retirements (``dynagent bridge`` does)."""
    return snapshot(agents=agents, time=time, **fields).model_copy(update={"retires": True})


def test_where_retirements_are_reported_only_a_retired_agent_goes() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(10)), agent_instance("i-2"))
    retired = Agent(id="i-2", slots=4, used_slots=0, draining=True, retired=True)
    plan = decide(DRAINED, cloud, retiring(draining("i-1"), retired), NOW)
    # i-1 is drained, not retired: the bridge may enable it at any pass.
    assert [t.instance_id for t in plan.terminations] == ["i-2"]


def test_a_retirement_applied_however_late_still_terminates() -> None:
    cloud = fleet(agent_instance("i-2"))
    retired = Agent(id="i-2", slots=4, used_slots=0, draining=True, retired=True)
    report = retiring(retired, time=NOW - timedelta(minutes=10))
    plan = decide(DRAINED, cloud, report, NOW)
    assert [t.instance_id for t in plan.terminations] == ["i-2"]


def test_a_retired_agent_is_no_room_for_pending_work() -> None:
    cloud = fleet(agent_instance("i-2"))
    retired = Agent(id="i-2", slots=4, used_slots=0, draining=True, retired=True)
    plan = decide(DRAINED, cloud, retiring(retired, pending=[task("t", 4)]), NOW)
    assert [t.instance_id for t in plan.terminations] == ["i-2"]
    assert len(plan.launches) == 1


def test_a_draining_agent_still_running_something_is_left_alone() -> None:
    cloud = fleet(agent_instance("i-1"), agent_instance("i-2"))
    agents = [draining("i-1", used=2), draining("i-2", tasks=1)]  # i-2: a zero-slot task
    assert decide(DRAINED, cloud, snapshot(agents=agents), NOW).terminations == ()


def test_demand_a_draining_agent_can_take_keeps_it_and_launches_nothing() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(25)))
    plan = decide(DRAINED, cloud, snapshot(agents=[draining("i-1")], pending=[task("t", 4)]), NOW)
    assert plan.terminations == () and plan.launches == ()


def test_the_sweep_reaps_no_idle_agent_of_a_drained_pool() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(hours=2)))
    assert decide(DRAINED, cloud, None, NOW).terminations == ()
    assert decide(pool(), cloud, None, NOW).terminations != ()


def test_min_instances_holds_for_drained_agents() -> None:
    cloud = fleet(agent_instance("i-1"), agent_instance("i-2"))
    agents = [draining("i-1"), draining("i-2")]
    plan = decide(
        pool(drain_idle_agents=True, min_instances=1), cloud, snapshot(agents=agents), NOW
    )
    assert len(plan.terminations) == 1


def test_a_zero_slot_task_launches_one_agent_only_where_the_pool_has_none() -> None:
    pending = [task("cmd-1", 0), task("gc-2", 0)]
    plan = decide(pool(), fleet(), snapshot(pending=pending), NOW)
    assert len(plan.launches) == 1 and plan.launches[0].tasks == ("cmd-1", "gc-2")
    full = fleet(agent_instance("i-1"))
    assert decide(pool(), full, snapshot(agents=[busy("i-1")], pending=pending), NOW).launches == ()
    booting = fleet(starting("i-2"))
    assert decide(pool(), booting, snapshot(pending=pending), NOW).launches == ()


def test_a_zero_slot_task_keeps_the_last_idle_agent() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(30)))
    plan = decide(pool(), cloud, snapshot(agents=[idle("i-1")], pending=[task("cmd", 0)]), NOW)
    assert plan.terminations == () and plan.launches == ()


def test_an_agent_running_only_zero_slot_tasks_is_busy() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(30)))
    agent = Agent(id="i-1", slots=4, used_slots=0, tasks=1)
    plan = decide(pool(), cloud, snapshot(agents=[agent]), NOW)
    assert plan.terminations == ()
    assert [(m.mark.value, m.value) for m in plan.marks] == [("idle-since", None)]


def test_the_new_fields_are_optional_in_version_1() -> None:
    document = snapshot_document(agents=[{"id": "i-0a", "slots": 4, "used_slots": 0}])
    old = parse_snapshot(json.dumps(document))
    assert old.agents[0].draining is False and old.agents[0].idle
    document = snapshot_document(
        agents=[{"id": "i-0a", "slots": 4, "used_slots": 0, "draining": True, "tasks": 2}],
        pending=[{"task": "cmd", "slots": 0}],
    )
    new = parse_snapshot(json.dumps(document))
    assert new.agents[0].draining and not new.agents[0].idle and new.pending[0].slots == 0


def test_outside_a_drained_pool_a_draining_agent_is_no_room_for_pending_tasks() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(2)))
    pending = snapshot(agents=[draining("i-1")], pending=[task("t", 4)])
    assert len(decide(pool(), cloud, pending, NOW).launches) == 1
    assert decide(DRAINED, cloud, pending, NOW).launches == ()
