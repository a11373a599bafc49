"""Gang spares: one machine more for a gang on three or more new machines, and for a gang
whose first agents registered while the rest boot; none where a whole machine is left
unused, past the pool's cap, or with ``gang_spares: false``. A pool of one 8-GPU type,
as an admin copies it from master.yaml."""

from __future__ import annotations

import dataclasses
from typing import Any

from dynagent.core.decide import decide
from dynagent.core.fleet import Fleet, Instance
from dynagent.core.plan import Plan
from dynagent.core.snapshot import Agent
from tests.builders import NOW, agent_instance, ago, pool, snapshot, starting


def p4d_pool(**overrides: Any) -> Any:
    return pool(
        instance_type="p4d.24xlarge", max_instances=overrides.pop("max_instances", 8), **overrides
    )


def spares(plan: Plan) -> list[str]:
    return [launch.reason for launch in plan.launches if launch.cause == "gang_spare"]


def for_tasks(plan: Plan) -> list[tuple[str, ...]]:
    return [launch.tasks for launch in plan.launches if launch.cause == "demand"]


def registered_idle(agent_id: str, seconds: float = 30) -> tuple[Agent, Instance]:
    """An 8-GPU agent that registered ``seconds`` ago and runs nothing."""
    instance = agent_instance(agent_id, launched=ago(4), idle_since=ago(seconds=seconds))
    return Agent(id=agent_id, slots=8, used_slots=0), instance


def test_a_gang_on_three_new_machines_gets_one_spare_and_a_gang_on_two_none() -> None:
    plan = decide(p4d_pool(), Fleet(), snapshot(pending=[("exp", 24)]), NOW)

    assert for_tasks(plan) == [("exp",)] * 3
    assert spares(plan) == [
        "spare for exp (24 slots on 3 new machines): it starts on the first of them to register"
    ]
    two = decide(p4d_pool(), Fleet(), snapshot(pending=[("exp", 16)]), NOW)
    assert for_tasks(two) == [("exp",)] * 2 and spares(two) == []


def test_the_next_pass_counts_the_spare_among_the_machines_booting() -> None:
    booting = Fleet(tuple(starting(f"i-{k}", minutes_ago=1) for k in range(4)))

    assert decide(p4d_pool(), booting, snapshot(pending=[("exp", 24)]), NOW).launches == ()


def test_an_idle_agent_the_plan_leaves_unused_is_spare_enough() -> None:
    # With nothing booting, the gang gets three new machines (the master may give the
    # idle agent to a smaller task while they boot); that agent is the spare.
    agent, instance = registered_idle("i-idle", seconds=300)
    plan = decide(
        p4d_pool(), Fleet((instance,)), snapshot(pending=[("exp", 24)], agents=[agent]), NOW
    )

    assert for_tasks(plan) == [("exp",)] * 3
    assert spares(plan) == [] and plan.terminations == ()


def test_a_gang_whose_first_agents_registered_while_the_rest_boot_gets_a_spare() -> None:
    # A 16-slot gang: one of its two machines registered, the other boots. A task that
    # arrives now takes the registered agent; the spare then stands in for it.
    agent, instance = registered_idle("i-first")
    fleet = Fleet((instance, starting("i-second", minutes_ago=3)))
    pending = snapshot(pending=[("exp", 16)], agents=[agent])
    plan = decide(p4d_pool(), fleet, pending, NOW)

    assert for_tasks(plan) == []
    assert spares(plan) == [
        "spare for exp: some of its agents registered while the rest boot, and the master "
        "may give those to smaller tasks meanwhile"
    ]
    with_spare = Fleet((*fleet.instances, starting("i-spare", minutes_ago=0)))
    assert decide(p4d_pool(), with_spare, pending, NOW).launches == ()
    # The agent was taken: the spare is the gang's second machine, and nothing launches.
    taken = snapshot(pending=[("exp", 16)], agents=[dataclasses.replace(agent, used_slots=1)])
    assert decide(p4d_pool(), with_spare, taken, NOW).launches == ()


def test_no_spare_past_max_instances() -> None:
    plan = decide(p4d_pool(max_instances=3), Fleet(), snapshot(pending=[("exp", 24)]), NOW)

    assert for_tasks(plan) == [("exp",)] * 3 and spares(plan) == []


def test_gang_spares_false_launches_none() -> None:
    off = p4d_pool(gang_spares=False)
    agent, instance = registered_idle("i-first")
    part = Fleet((instance, starting("i-second", minutes_ago=3)))

    assert spares(decide(off, Fleet(), snapshot(pending=[("exp", 24)]), NOW)) == []
    assert decide(off, part, snapshot(pending=[("exp", 16)], agents=[agent]), NOW).launches == ()
