"""Agents of an old boot config (drift) and broken ones (repair): replaced, never killed.

Idle ones go at once where nothing can land on them first; busy ones are drained
through the bridge (a drain notice) and go once idle, at most ``drift_budget`` at a
time; what min_instances keeps is replaced one by one, the new machine first.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dynagent.core.boot.drift import boot_config, boot_parts
from dynagent.core.config import Pool
from dynagent.core.decide import decide
from dynagent.core.fleet import Instance
from dynagent.core.plan import Plan
from dynagent.core.snapshot import Agent
from tests.builders import NOW, agent_instance, ago, busy, fleet, idle, pool, snapshot, starting

OLD = pool(max_instances=10)
NEW_AGENT: dict[str, Any] = {
    "agent_docker_image": "determinedai/determined-agent:0.39.0",
    "max_instances": 10,
}


def launched_as(config: Pool, instance: Instance, instance_type: str = "p3.8xlarge") -> Instance:
    """``instance`` as a launch of ``config`` tags it."""
    return dataclasses.replace(
        instance,
        boot_config=boot_config(config, {}),
        boot_parts=boot_parts(config, {}),
        instance_type=instance_type,
    )


def old(instance_id: str, **marks: Any) -> Instance:
    return launched_as(OLD, agent_instance(instance_id, **marks))


def run(config: Pool, instances: list[Instance], agents: list[Agent], **kw: Any) -> Plan:
    return decide(config, fleet(*instances), snapshot(agents=agents, **kw), NOW)


def terminated(plan: Plan) -> dict[str, str]:
    return {t.instance_id: t.cause for t in plan.terminations}


def test_an_idle_agent_of_the_old_agent_image_is_replaced_at_once_saying_what_changed() -> None:
    plan = run(pool(**NEW_AGENT), [old("i-1", idle_since=ago(1))], [idle("i-1")])
    assert terminated(plan) == {"i-1": "drifted"}
    assert "agent image, config or environment changed" in plan.terminations[0].reason
    # Without drift, the agent stays until its idle period ends.
    assert run(pool(drift=False, **NEW_AGENT), [old("i-1")], [idle("i-1")]).terminations == ()
    # The same config: nothing drifted.
    assert run(OLD, [old("i-1", idle_since=ago(1))], [idle("i-1")]).terminations == ()


def test_a_busy_one_is_drained_never_killed_and_goes_once_its_tasks_end() -> None:
    new = pool(image_id="ami-0fedcba9876543210", max_instances=10)
    plan = run(new, [old("i-1")], [busy("i-1", used=1)], pending=[("t", 2)])
    assert plan.terminations == ()
    assert [n.agent_id for n in plan.drain_notices] == ["i-1"]
    assert plan.drain_notices[0].at == NOW and "image changed" in plan.drain_notices[0].reason
    assert plan.retiring == (("i-1", "drifted: image changed: draining"),)
    # Its 3 free slots are no room: the waiting task gets a machine of the new image.
    assert len(plan.launches) == 1
    # Drained by the bridge, and empty: terminated, long before any idle period.
    drained = Agent(id="i-1", slots=4, used_slots=0, enabled=False, draining=True, retired=True)
    assert terminated(run(new, [old("i-1")], [drained])) == {"i-1": "drifted"}
    # Drained and still busy: it stays, and the notice is sent again.
    working = dataclasses.replace(drained, used_slots=2)
    plan = run(new, [old("i-1")], [working])
    assert plan.terminations == () and [n.agent_id for n in plan.drain_notices] == ["i-1"]


def test_an_idle_one_with_work_waiting_is_drained_not_terminated() -> None:
    # The master may place the waiting task on it any moment: terminating could kill it.
    plan = run(pool(**NEW_AGENT), [old("i-1")], [idle("i-1")], pending=[("t", 4)])
    assert plan.terminations == ()
    assert [n.agent_id for n in plan.drain_notices] == ["i-1"]
    assert len(plan.launches) == 1


def test_in_a_drained_pool_an_idle_one_goes_only_once_the_bridge_drained_it() -> None:
    drains = pool(drain_idle_agents=True, **NEW_AGENT)
    plan = run(drains, [old("i-1")], [idle("i-1")])
    assert plan.terminations == () and [n.agent_id for n in plan.drain_notices] == ["i-1"]
    drained = Agent(id="i-1", slots=4, used_slots=0, enabled=False, draining=True)
    assert terminated(run(drains, [old("i-1")], [drained])) == {"i-1": "drifted"}


def test_at_most_the_budget_drain_at_once_those_draining_already_first() -> None:
    new = pool(drift_budget=2, **NEW_AGENT)
    agents = [busy("i-1", used=4), busy("i-2", used=1), busy("i-3", used=2), busy("i-4", used=3)]
    instances = [old(a.id) for a in agents]
    plan = run(new, instances, agents)
    # The emptiest first: they end soonest.
    assert sorted(n.agent_id for n in plan.drain_notices) == ["i-2", "i-3"]
    assert dict(plan.retiring)["i-4"].endswith("waits for drift_budget (2 draining)")
    # i-4 drains already (the bridge had it): it keeps its place, and one more joins.
    agents[3] = dataclasses.replace(agents[3], enabled=False, draining=True, retired=True)
    plan = run(new, instances, agents)
    assert sorted(n.agent_id for n in plan.drain_notices) == ["i-2", "i-4"]
    # The default: 10 % of the pool's agents, at least 1.
    plan = run(pool(**NEW_AGENT), instances, [busy(a.id, used=1) for a in agents])
    assert len(plan.drain_notices) == 1


def test_min_instances_agents_are_replaced_one_by_one_the_new_machine_first() -> None:
    new = pool(min_instances=2, **NEW_AGENT)
    agents = [idle("i-1"), idle("i-2")]
    instances = [old("i-1", idle_since=ago(1)), old("i-2", idle_since=ago(1))]
    plan = run(new, instances, agents)
    assert plan.terminations == ()
    assert [launch.cause for launch in plan.launches] == ["replacement"]
    # While it boots, nothing more.
    booting = launched_as(new, starting("i-3"))
    plan = run(new, [*instances, booting], agents)
    assert plan.terminations == () and plan.launches == ()
    # Registered: one old agent goes; the other waits for a replacement of its own.
    fresh = launched_as(new, agent_instance("i-3"))
    plan = run(new, [*instances, fresh], [*agents, idle("i-3")])
    assert terminated(plan) == {"i-1": "drifted"}
    assert [launch.cause for launch in plan.launches] == ["replacement"]


def test_what_cannot_be_compared_is_left_alone() -> None:
    new = pool(**NEW_AGENT)
    # Launched before dynagent recorded boot configs.
    assert run(new, [agent_instance("i-1")], [idle("i-1")]).terminations == ()
    # Recorded before the parts were: its hash may have been made otherwise (an image
    # family now resolved), so it is not judged; a stopped one still is, by its hash.
    no_parts = dataclasses.replace(old("i-1"), boot_parts="")
    assert run(new, [no_parts], [idle("i-1")]).terminations == ()
    # A master_url alias no snapshot resolved: the config now is unknown.
    aliased = pool(master_url="http://local-ipv4:8080", **NEW_AGENT)
    assert run(aliased, [old("i-1")], [idle("i-1")]).terminations == ()
    # The sweep has no agents to judge.
    assert decide(new, fleet(old("i-1", idle_since=ago(1))), None, NOW).terminations == ()


def test_an_agent_with_fewer_slots_than_its_gpus_is_repaired() -> None:
    # A p3.8xlarge has 4 V100s; its agent registered 3.
    plan = run(OLD, [old("i-1")], [idle("i-1", slots=3)])
    assert terminated(plan) == {"i-1": "broken"}
    assert "registered 3 of its 4 GPUs" in plan.terminations[0].reason
    # Busy: drained, and its work ends where it runs.
    plan = run(OLD, [old("i-1")], [busy("i-1", slots=3, used=3)])
    assert plan.terminations == () and [n.agent_id for n in plan.drain_notices] == ["i-1"]
    assert run(pool(repair=False), [old("i-1")], [idle("i-1", slots=3)]).terminations == ()
    # Its agent.yaml chooses the devices: fewer slots are the admin's choice.
    chosen = pool(agent_config_file_contents={"visible_gpus": "0,1,2"})
    mine = launched_as(chosen, agent_instance("i-1"))
    assert run(chosen, [mine], [idle("i-1", slots=3)]).terminations == ()
    # The whole machine registered: nothing to repair.
    assert run(OLD, [old("i-1")], [idle("i-1", slots=4)]).terminations == ()


def test_several_pools_each_judge_their_own_agents() -> None:
    other = pool("cpu", **NEW_AGENT)
    mine = run(OLD, [old("i-1", idle_since=ago(1))], [idle("i-1")])
    theirs = decide(
        other,
        fleet(launched_as(pool("cpu"), agent_instance("i-9"))),
        snapshot(agents=[idle("i-9")], pool_name="cpu"),
        NOW,
    )
    assert mine.terminations == () and terminated(theirs) == {"i-9": "drifted"}


def test_the_budget_is_a_number_or_a_share_and_says_how_when_neither() -> None:
    assert pool(drift_budget="25%").provider.drift_budget_of(10) == 2
    assert pool(drift_budget="3").provider.drift_budget_of(100) == 3  # as --sweep writes it
    assert pool(drift_budget="1%").provider.drift_budget_of(10) == 1  # at least one
    for bad in (0, "0%", "x%", "150%", True):
        with pytest.raises(ValueError, match=r"a number of agents \(like 2\) or a share"):
            pool(drift_budget=bad)
