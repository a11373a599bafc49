"""Zero-slot tasks and the pool's max_aux_containers_per_agent, as Determined counts them.

An agent runs up to max_aux_containers_per_agent zero-slot tasks, busy or not
(``fitting_methods.go`` ``maxZeroSlotContainersSatisfied``); for those no agent has
room, Determined's provisioner wants one agent per max_aux_containers_per_agent of them
(``scaling.go`` ``calculateDesiredNewAgentNum``).
"""

from __future__ import annotations

from typing import Any

import pytest

from dynagent.core.config import ConfigError, Pool, parse_config
from dynagent.core.decide import decide
from dynagent.core.fitting import agents_for_zero_slot, zero_slot_room
from dynagent.core.snapshot import Agent
from tests.builders import (
    NOW,
    agent_instance,
    ago,
    busy,
    fleet,
    idle,
    provider_fields,
    snapshot,
    task,
)


def aux_pool(max_aux: int, **overrides: Any) -> Pool:
    return Pool.model_validate(
        {
            "name": "gpu",
            "provider": provider_fields(**overrides),
            "max_aux_containers_per_agent": max_aux,
        }
    )


def commands(count: int) -> list[Any]:
    return [task(f"cmd-{k}", 0) for k in range(count)]


def test_an_agent_has_room_for_what_it_may_still_run() -> None:
    assert zero_slot_room(tasks=0, used_slots=0, max_aux=100) == 100
    # Three tasks on four used slots may all use slots: none need be zero-slot.
    assert zero_slot_room(tasks=3, used_slots=4, max_aux=2) == 2
    # Five tasks on two used slots: three at least are zero-slot.
    assert zero_slot_room(tasks=5, used_slots=2, max_aux=4) == 1
    assert zero_slot_room(tasks=9, used_slots=0, max_aux=4) == 0


def test_determined_wants_one_agent_per_max_aux_zero_slot_tasks() -> None:
    assert [agents_for_zero_slot(n, 100) for n in (0, 1, 100, 101, 250)] == [0, 1, 1, 2, 3]
    assert agents_for_zero_slot(5, 0) == 0


def test_without_agents_one_machine_per_max_aux_tasks() -> None:
    plan = decide(aux_pool(100), fleet(), snapshot(pending=commands(250)), NOW)

    assert [len(launch.tasks) for launch in plan.launches] == [100, 100, 50]
    assert {launch.cause for launch in plan.launches} == {"zero_slot"}


def test_a_busy_agent_with_aux_room_takes_them_and_nothing_is_launched() -> None:
    cloud = fleet(agent_instance("i-1"))
    plan = decide(aux_pool(2), cloud, snapshot(agents=[busy("i-1")], pending=commands(2)), NOW)

    assert plan.launches == ()


def test_an_agent_full_of_zero_slot_tasks_takes_no_more() -> None:
    cloud = fleet(agent_instance("i-1"))
    full = Agent(id="i-1", slots=4, used_slots=0, tasks=2)  # two zero-slot tasks
    plan = decide(aux_pool(2), cloud, snapshot(agents=[full], pending=commands(3)), NOW)

    assert [launch.tasks for launch in plan.launches] == [("cmd-0", "cmd-1"), ("cmd-2",)]


def test_only_the_tasks_beyond_the_agents_room_get_a_machine() -> None:
    cloud = fleet(agent_instance("i-1"))
    agent = Agent(id="i-1", slots=4, used_slots=4, tasks=3)  # room for 2 of 2
    plan = decide(aux_pool(2), cloud, snapshot(agents=[agent], pending=commands(3)), NOW)

    assert [launch.tasks for launch in plan.launches] == [("cmd-2",)]


def test_a_machine_launched_for_tasks_with_slots_takes_them_too() -> None:
    pending = [task("trial", 4), *commands(2)]
    plan = decide(aux_pool(2), fleet(), snapshot(pending=pending), NOW)

    assert [launch.tasks for launch in plan.launches] == [("trial",)]


def test_at_max_instances_they_wait_and_say_so() -> None:
    cloud = fleet(agent_instance("i-1"))
    off = Agent(id="i-1", slots=4, used_slots=0, enabled=False)  # takes nothing
    plan = decide(
        aux_pool(100, max_instances=1), cloud, snapshot(agents=[off], pending=commands(1)), NOW
    )

    assert plan.launches == ()
    assert plan.pending_at_max
    assert plan.waiting == ("cmd-0 (0 slots): pool is at max_instances (1)",)


def test_with_max_aux_0_no_agent_ever_runs_them() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(30)))
    plan = decide(aux_pool(0), cloud, snapshot(agents=[idle("i-1")], pending=commands(1)), NOW)

    assert plan.launches == ()
    assert [(u.task, u.slots) for u in plan.unschedulable] == [("cmd-0", 0)]
    assert "max_aux_containers_per_agent is 0" in plan.unschedulable[0].reason
    # No agent is kept for them: the idle one is reaped as any other.
    assert [t.instance_id for t in plan.terminations] == ["i-1"]


def test_idle_agents_enough_for_the_zero_slot_tasks_are_kept() -> None:
    ids = ["i-1", "i-2", "i-3"]
    cloud = fleet(*(agent_instance(i, idle_since=ago(30)) for i in ids))
    agents = [idle(i) for i in ids]
    plan = decide(aux_pool(100), cloud, snapshot(agents=agents, pending=commands(150)), NOW)

    assert plan.launches == ()
    assert len(plan.terminations) == 1  # two kept: 150 tasks, 100 on each


POOL_ENTRY = """
resource_pools:
  - pool_name: gpu
    {extra}
    provider:
      type: aws
      region: us-east-1
      image_id: ami-0123456789abcdef0
      instance_type: p3.8xlarge
"""


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("", 100),
        ("max_aux_containers_per_agent: 4", 4),
        ("max_aux_containers_per_agent: null", 100),
        # Deprecated, and replaces it when set (resource_pool_config.go UnmarshalJSON).
        ("max_cpu_containers_per_agent: 2", 2),
        ("max_cpu_containers_per_agent: -1\n    max_aux_containers_per_agent: 7", 7),
    ],
)
def test_the_pool_reads_max_aux_containers_per_agent(extra: str, expected: int) -> None:
    config = parse_config(POOL_ENTRY.format(extra=extra))

    assert config.pools["gpu"].max_aux_containers_per_agent == expected


def test_a_negative_max_aux_containers_per_agent_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_aux_containers_per_agent"):
        parse_config(POOL_ENTRY.format(extra="max_aux_containers_per_agent: -1"))
