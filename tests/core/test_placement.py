"""The decision predicts Determined's placement on a pool of 1-, 4- and 8-GPU offerings:
multi-agent fits across sizes, single-agent tasks, priority levels, fitting policy and
the cap in slots (agentrm ``fitting.go``, ``fitting_methods.go``, ``priority.go``)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest

from dynagent.core.config import parse_config
from dynagent.core.decide import decide
from dynagent.core.fleet import Fleet, Instance
from dynagent.core.plan import Plan
from dynagent.core.snapshot import Agent, PendingTask
from tests.builders import NOW, agent_instance, ago, pool, snapshot, starting

G5 = ["g5.xlarge", "g5.12xlarge", "g5.48xlarge"]
SLOTS = {"g5.xlarge": 1, "g5.12xlarge": 4, "g5.48xlarge": 8}


def g5_pool(**overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "instance_type": "g5.48xlarge",
        "offerings": {"instance_types": G5, "max_slots": 40},
        "max_instances": 20,
    }
    fields.update(overrides)
    return pool(**fields)


def job(name: str, slots: int, *, priority: int | None = None, single: bool = False) -> Any:
    return PendingTask(task=name, slots=slots, priority=priority, single_agent=single)


def agents_of(instance_type: str, count: int, prefix: str, *, used: int = 0) -> list[Agent]:
    slots = SLOTS[instance_type]
    return [Agent(id=f"{prefix}{k}", slots=slots, used_slots=used) for k in range(count)]


def fleet_of(agents: list[Agent], types: dict[str, str], idle_minutes: float = 5) -> Fleet:
    instances: list[Instance] = []
    for agent in agents:
        idle_since = ago(idle_minutes) if agent.used_slots == 0 else None
        instance = agent_instance(agent.id, idle_since=idle_since)
        instances.append(dataclasses.replace(instance, instance_type=types[agent.id]))
    return Fleet(tuple(instances))


def launched(plan: Plan) -> Counter[str]:
    return Counter(launch.offerings[0].instance_type for launch in plan.launches)


def idle_fleet(*groups: tuple[str, int], idle_minutes: float = 5) -> tuple[list[Agent], Fleet]:
    agents: list[Agent] = []
    types: dict[str, str] = {}
    for instance_type, count in groups:
        for agent in agents_of(instance_type, count, f"i-{instance_type.replace('.', '')}-"):
            agents.append(agent)
            types[agent.id] = instance_type
    return agents, fleet_of(agents, types, idle_minutes)


@pytest.mark.parametrize(("slots", "machines"), [(12, 3), (20, 5), (28, 7)])
def test_a_gang_no_8_gpu_machine_divides_goes_on_4_gpu_machines(slots: int, machines: int) -> None:
    plan = decide(g5_pool(), Fleet(), snapshot(pending=[job("exp", slots)]), NOW)
    fill = [launch for launch in plan.launches if launch.cause == "cap_fill"]
    plan = dataclasses.replace(plan, launches=plan.launches[: len(plan.launches) - len(fill)])

    assert plan.unschedulable == ()
    assert launched(plan) == {"g5.12xlarge": machines + 1}
    # One more than the gang's: it starts on the first of them to register (gang_spares).
    assert [launch.tasks for launch in plan.launches] == [("exp",)] * machines + [()]
    assert plan.launches[-1].cause == "gang_spare"
    # Less than 30 % of the 40 slots left (28 + 4 of them taken): the rest is filled.
    left = 40 - 4 * (machines + 1)
    assert len(fill) == (left if left < 12 else 0)


def test_a_16_slot_gang_takes_four_idle_4_gpu_agents_and_launches_nothing() -> None:
    agents, fleet = idle_fleet(("g5.12xlarge", 4))
    plan = decide(g5_pool(), fleet, snapshot(pending=[job("exp", 16)], agents=agents), NOW)

    assert plan.launches == ()
    assert plan.terminations == ()


def test_a_gang_counts_on_an_idle_agent_only_when_room_is_short() -> None:
    # Two new machines when there is room: while the gang waits for a boot, the master
    # may give the idle agent to a smaller task. With room for one, the idle agent is
    # the gang's second machine.
    agents, fleet = idle_fleet(("g5.48xlarge", 1))
    pending = snapshot(pending=[job("exp", 16)], agents=agents)

    assert launched(decide(g5_pool(), fleet, pending, NOW)) == {"g5.48xlarge": 2}
    short = g5_pool(offerings={"instance_types": G5, "max_slots": 16})
    assert launched(decide(short, fleet, pending, NOW)) == {"g5.48xlarge": 1}


def test_a_gang_waiting_on_its_booting_machines_counts_the_one_that_registered() -> None:
    # Boots are staggered: the first of a 32-slot gang's four machines registered idle
    # while three still boot. The gang waits for those boots anyway, so the agent that
    # came up is one of its four: no machine for the gang, only a spare, in case the
    # master gives that agent to a smaller task meanwhile (gang_spares). (Without booting
    # machines, the previous test's rule holds.)
    agents, fleet = idle_fleet(("g5.48xlarge", 1), idle_minutes=0.5)
    booting = [
        dataclasses.replace(starting(f"i-boot{k}", minutes_ago=3), instance_type="g5.48xlarge")
        for k in range(3)
    ]
    fleet = Fleet((*fleet.instances, *booting))
    roomy = g5_pool(offerings={"instance_types": G5, "max_slots": 160})
    plan = decide(roomy, fleet, snapshot(pending=[job("exp", 32)], agents=agents), NOW)

    assert [(launch.tasks, launch.cause) for launch in plan.launches] == [((), "gang_spare")]
    assert launched(plan) == {"g5.48xlarge": 1}
    assert plan.terminations == ()
    # The next pass counts that spare among the machines booting: nothing more.
    spare = dataclasses.replace(starting("i-spare", minutes_ago=0), instance_type="g5.48xlarge")
    fleet = Fleet((*fleet.instances, spare))
    assert (
        decide(roomy, fleet, snapshot(pending=[job("exp", 32)], agents=agents), NOW).launches == ()
    )

    # A small task took that agent before the gang started: the spare is its fourth.
    agents = [dataclasses.replace(agents[0], used_slots=1)]
    pending = snapshot(pending=[job("exp", 32)], agents=agents)
    assert decide(roomy, fleet, pending, NOW).launches == ()


def test_an_8_slot_command_is_never_planned_across_1_gpu_agents() -> None:
    agents, fleet = idle_fleet(("g5.xlarge", 8))
    command = decide(
        g5_pool(), fleet, snapshot(pending=[job("cmd", 8, single=True)], agents=agents), NOW
    )
    experiment = decide(g5_pool(), fleet, snapshot(pending=[job("exp", 8)], agents=agents), NOW)

    # The master places the experiment on the eight idle agents (a dedicated fit), never
    # the command: it needs a machine of 8 GPUs.
    assert launched(command) == {"g5.48xlarge": 1}
    assert experiment.launches == ()


def test_a_command_larger_than_the_largest_machine_can_never_run() -> None:
    plan = decide(g5_pool(), Fleet(), snapshot(pending=[job("cmd", 16, single=True)]), NOW)

    assert plan.launches == ()
    assert [u.task for u in plan.unschedulable] == ["cmd"]
    assert "runs on one agent" in plan.unschedulable[0].reason


def test_a_size_no_machine_divides_within_max_machines_is_unschedulable() -> None:
    sizes = ["g5.12xlarge", "g5.48xlarge"]
    only_8 = g5_pool(offerings={"instance_types": sizes, "max_slots": 16, "max_machines": 2})
    plan = decide(only_8, Fleet(), snapshot(pending=[job("exp", 12)]), NOW)

    assert [u.task for u in plan.unschedulable] == ["exp"]
    assert "4, 8 slots" not in plan.unschedulable[0].reason
    assert "8, 4 slots" in plan.unschedulable[0].reason
    assert "max_machines (2)" in plan.unschedulable[0].reason
    # Without a cap in machines, three 4-GPU machines hold it within the 16 slots, and
    # the 4 slots left take its spare.
    roomy = g5_pool(offerings={"instance_types": sizes, "max_slots": 16})
    plan = decide(roomy, Fleet(), snapshot(pending=[job("exp", 12)]), NOW)
    assert launched(plan) == {"g5.12xlarge": 4}
    assert [launch.cause for launch in plan.launches].count("gang_spare") == 1


def test_a_task_over_the_cap_in_slots_is_unschedulable() -> None:
    # Determined admits no experiment over max_instances x slots (CapacityCheck).
    plan = decide(g5_pool(), Fleet(), snapshot(pending=[job("exp", 48), job("ok", 8)]), NOW)

    assert [u.task for u in plan.unschedulable] == ["exp"]
    assert "max_slots (40)" in plan.unschedulable[0].reason
    assert launched(plan) == {"g5.48xlarge": 1}


def test_an_idle_agent_a_blocked_lower_priority_task_fits_on_is_reaped() -> None:
    # The 16-slot task (priority 10) waits at max_slots; the master starts nothing of
    # priority 42 meanwhile, so the 1-slot task will not take the idle agent: it is reaped
    # at its idle period, as if nothing were pending. Its 8 slots of room go to one of
    # the two g5.48xlarge the 16-slot task needs; the busy one is the other, once free.
    agents, fleet = idle_fleet(("g5.xlarge", 1), idle_minutes=25)
    busy = Agent(id="i-busy", slots=8, used_slots=8)
    fleet = Fleet((*fleet.instances, *fleet_of([busy], {"i-busy": "g5.48xlarge"}).instances))
    pending = [job("big", 16, priority=10), job("small", 1, priority=42)]
    capped = g5_pool(offerings={"instance_types": G5, "max_slots": 16})

    blocked = decide(capped, fleet, snapshot(pending=pending, agents=[*agents, busy]), NOW)

    assert [t.instance_id for t in blocked.terminations] == [agents[0].id]
    assert any(
        "small" in why and "waits behind big (priority 10)" in why for why in blocked.waiting
    )
    assert [(launch.tasks, launch.offerings[0].instance_type) for launch in blocked.launches] == [
        (("big",), "g5.48xlarge")
    ]


def test_the_same_idle_agent_is_kept_when_nothing_higher_waits() -> None:
    agents, fleet = idle_fleet(("g5.xlarge", 1), idle_minutes=25)
    pending = [job("small", 1, priority=42)]

    plan = decide(g5_pool(max_instances=1), fleet, snapshot(pending=pending, agents=agents), NOW)

    assert plan.terminations == ()
    assert plan.launches == ()


def test_lower_priorities_are_planned_for_while_every_higher_task_gets_a_machine() -> None:
    pending = [job("big", 16, priority=10), job("small", 1, priority=42)]
    plan = decide(g5_pool(), Fleet(), snapshot(pending=pending), NOW)

    assert launched(plan) == {"g5.48xlarge": 2, "g5.xlarge": 1}


def test_a_lower_number_is_a_higher_priority() -> None:
    # Room for one machine: priority 1 gets it, though listed last.
    pending = [job("later", 8, priority=50), job("first", 8, priority=1)]
    one = g5_pool(offerings={"instance_types": G5, "max_slots": 8})
    plan = decide(one, Fleet(), snapshot(pending=pending), NOW)

    assert [launch.tasks for launch in plan.launches] == [("first",)]


def _free_slots_counted(policy: str) -> Plan:
    # Two agents of 8: one half busy, one idle for long. A 2-slot task: best fit puts it
    # on the half-busy one, worst fit on the idle one, which is then counted on.
    half = Agent(id="i-half", slots=8, used_slots=4)
    empty = Agent(id="i-empty", slots=8, used_slots=0)
    fleet = fleet_of([half, empty], {"i-half": "g5.48xlarge", "i-empty": "g5.48xlarge"}, 25)
    snap = snapshot(pending=[job("t", 2)], agents=[half, empty])
    snap = snap.model_copy(update={"fitting_policy": policy})
    return decide(g5_pool(), fleet, snap, NOW)


def test_best_fit_leaves_the_idle_agent_to_be_reaped() -> None:
    plan = _free_slots_counted("best")
    assert [t.instance_id for t in plan.terminations] == ["i-empty"]


def test_worst_fit_counts_on_the_idle_agent() -> None:
    plan = _free_slots_counted("worst")
    assert plan.terminations == ()
    assert any(m.instance_ids == ("i-empty",) for m in plan.marks)


CLUSTER05_POOL = """
resource_pools:
  - pool_name: g5
    provider:
      type: aws
      region: us-east-1
      image_id: ami-00000000000000000
      instance_type: g5.48xlarge
      max_instances: {max_instances}
      offerings: {{instance_types: [g5.xlarge, g5.12xlarge, g5.48xlarge]{extra}}}
"""


def _config_pool(max_instances: int, extra: str = "") -> Any:
    text = CLUSTER05_POOL.format(max_instances=max_instances, extra=extra)
    return parse_config(text).pool("g5")


def test_the_cap_in_slots_defaults_to_max_instances_of_instance_type() -> None:
    assert _config_pool(10).provider.slot_cap == 80
    assert _config_pool(10, ", max_slots: 24").provider.slot_cap == 24


def test_by_default_the_cap_is_in_slots_and_small_machines_save_money() -> None:
    # A pool as copied from master.yaml: max_instances 10 of g5.48xlarge is 80 GPUs, and
    # each 1-GPU task gets the cheapest machine for it, however many machines that is.
    pending = [job(f"t{k}", 1) for k in range(80)]
    plan = decide(_config_pool(10), Fleet(), snapshot(pending=pending), NOW)

    assert launched(plan) == {"g5.xlarge": 80}
    assert plan.waiting == ()


def test_near_max_machines_the_machines_that_hold_what_waits_are_chosen() -> None:
    # 80 one-GPU tasks, room for 10 machines: ten g5.xlarge would leave 70 waiting.
    pending = [job(f"t{k}", 1) for k in range(80)]
    plan = decide(_config_pool(10, ", max_machines: 10"), Fleet(), snapshot(pending=pending), NOW)

    assert launched(plan) == {"g5.48xlarge": 10}
    assert plan.waiting == ()


def test_with_max_machines_small_machines_never_take_the_room_large_ones_need() -> None:
    # 10 machines for 80 GPUs: a g5.xlarge would leave 9 machines for 79 GPUs. So three
    # 1-GPU tasks share a g5.48xlarge.
    pending = [job(f"t{k}", 1) for k in range(3)]
    capped = _config_pool(10, ", max_machines: 10")
    assert launched(decide(capped, Fleet(), snapshot(pending=pending), NOW)) == {"g5.48xlarge": 1}
    # With machines to spare beyond the cap, each gets the cheapest machine.
    spare = decide(_config_pool(10, ", max_machines: 30"), Fleet(), snapshot(pending=pending), NOW)
    assert launched(spare) == {"g5.xlarge": 3}


def test_the_cap_in_slots_holds_small_machines_back() -> None:
    pending = [job(f"t{k}", 1) for k in range(30)]
    plan = decide(_config_pool(100, ", max_slots: 20"), Fleet(), snapshot(pending=pending), NOW)

    assert sum(SLOTS[t] * n for t, n in launched(plan).items()) <= 20
    assert len(plan.waiting) == 10
    assert all("pool is at max_slots (20)" in why for why in plan.waiting)
    assert plan.pending_at_max


def test_at_the_cap_in_slots_the_room_left_is_held_for_the_large_task() -> None:
    # 76 of 80 GPUs are busy on 1-GPU machines; an 8-slot task waits for 8 GPUs of room.
    # The 4 left are not spent on the 1-slot tasks behind it: as idle machines are
    # reaped, the room grows to what the large task needs instead of going back to
    # small machines.
    agents = agents_of("g5.xlarge", 76, "i-busy", used=1)
    cloud = fleet_of(agents, {a.id: "g5.xlarge" for a in agents})
    pending = [job("big", 8), *(job(f"s{k}", 1) for k in range(3))]
    plan = decide(_config_pool(10), cloud, snapshot(pending=pending, agents=agents), NOW)

    assert plan.launches == ()
    assert plan.pending_at_max
    waits = dict(why.split(" ", 1) for why in plan.waiting)
    assert "pool is at max_slots (80)" in waits["big"]
    assert all("held for machines of 8 slots, for big" in waits[f"s{k}"] for k in range(3))
    # With room for it, the large task gets its machine and the small ones theirs (and
    # the one slot left of 88 is filled: cap_fill).
    roomy = decide(_config_pool(11), cloud, snapshot(pending=pending, agents=agents), NOW)
    assert [launch.cause for launch in roomy.launches].count("cap_fill") == 1
    assert launched(roomy) == {"g5.48xlarge": 1, "g5.xlarge": 4}


def test_a_gang_at_the_cap_in_slots_gets_its_machines_as_the_room_allows() -> None:
    # 32 busy g5.xlarge and 2 busy g5.48xlarge leave 32 of 80 GPUs. The 64-GPU task
    # needs eight g5.48xlarge: the room takes four of them now, and nothing smaller is
    # bought; the 8-GPU and 1-GPU tasks behind it are put on those four until the gang
    # can start, as the master will put them.
    small = agents_of("g5.xlarge", 32, "i-one", used=1)
    large = agents_of("g5.48xlarge", 2, "i-eight", used=8)
    types = {a.id: "g5.xlarge" for a in small} | {a.id: "g5.48xlarge" for a in large}
    cloud = fleet_of([*small, *large], types)
    pending = [job("gang", 64), job("eight", 8), *(job(f"s{k}", 1) for k in range(5))]
    view = snapshot(pending=pending, agents=[*small, *large])

    plan = decide(_config_pool(10), cloud, view, NOW)

    assert launched(plan) == {"g5.48xlarge": 4}
    assert sorted(launch.tasks for launch in plan.launches) == [
        ("gang",),
        ("gang",),
        ("gang", "eight"),
        ("gang", "s0", "s1", "s2", "s3", "s4"),
    ]
    waits = dict(why.split(" ", 1) for why in plan.waiting)
    assert list(waits) == ["gang"]
    assert "pool is at max_slots (80); 4 of its 8 machines of 8 slots" in waits["gang"]


def test_idle_machines_a_gang_waits_on_at_the_cap_are_kept() -> None:
    # Four idle g5.48xlarge (past their idle period) and four busy ones fill the 64 slots
    # of the cap: the 64-GPU task counts on the idle four, so they stay for it, where
    # reaping them would only launch four like them again.
    idle, cloud = idle_fleet(("g5.48xlarge", 4), idle_minutes=25)
    busy = agents_of("g5.48xlarge", 4, "i-busy", used=8)
    busy_fleet = fleet_of(busy, {a.id: "g5.48xlarge" for a in busy})
    cloud = Fleet((*cloud.instances, *busy_fleet.instances))
    view = snapshot(pending=[job("gang", 64)], agents=[*idle, *busy])

    plan = decide(_config_pool(8), cloud, view, NOW)

    assert plan.terminations == ()
    assert plan.launches == ()
    assert "4 of its 8 machines of 8 slots" in plan.waiting[0]
    # Nothing pending: the same idle machines go.
    unwanted = decide(_config_pool(8), cloud, snapshot(agents=[*idle, *busy]), NOW)
    assert len(unwanted.terminations) == 4


def test_validate_states_the_caps_it_derived() -> None:
    from dynagent.cli.main import describe_config

    text = CLUSTER05_POOL.format(max_instances=10, extra="")
    lines = describe_config(parse_config(text))
    assert (
        "  caps: 80 slots (max_instances 10 x the 8 of instance_type), machines of any "
        "size within it" in lines
    )
    assert (
        "  near the cap: a pass that launches with fewer than 24 slots left (30% of 80) "
        "launches the rest too, the cheapest per GPU, reaped when idle (fill_near_cap)" in lines
    )
    capped = CLUSTER05_POOL.format(max_instances=10, extra=", max_slots: 40, max_machines: 12")
    lines = describe_config(parse_config(capped))
    assert (
        "  caps: 40 slots (offerings.max_slots), at most 12 machines "
        "(offerings.max_machines)" in lines
    )
    assert not any("warning" in line for line in lines if "max_" in line)


def test_a_task_no_shape_holds_now_does_not_hold_back_smaller_ones() -> None:
    # The 4- and 8-GPU types are out of capacity: the 4-slot task waits, the 1-slot
    # task still gets its g5.xlarge.
    out = frozenset(
        o.key for o in g5_pool().provider.catalog().offerings if o.instance_type != "g5.xlarge"
    )
    plan = decide(
        g5_pool(), Fleet(unavailable=out), snapshot(pending=[job("four", 4), job("one", 1)]), NOW
    )

    assert launched(plan) == {"g5.xlarge": 1}
    assert [why.split(" ")[0] for why in plan.waiting] == ["four"]


def test_over_the_cap_in_slots_the_newest_machines_go() -> None:
    # The admin lowered the cap to 16 slots under a fleet of three busy 8-GPU machines
    # and a 1-GPU one: the newest go until the fleet fits (8 + 1 + ... within 16).
    agents = [*agents_of("g5.48xlarge", 3, "i-big", used=8), *agents_of("g5.xlarge", 1, "i-one")]
    types = {a.id: "g5.48xlarge" if a.id.startswith("i-big") else "g5.xlarge" for a in agents}
    cloud = fleet_of(agents, types)
    lowered = g5_pool(offerings={"instance_types": G5, "max_slots": 16})
    plan = decide(lowered, cloud, snapshot(agents=agents), NOW)

    # The idle 1-GPU machine first, then a busy one (all launched at once): 8 + 8 left.
    gone = [t.instance_id for t in plan.terminations]
    assert gone[0] == "i-one0" and len(gone) == 2 and gone[1].startswith("i-big")
    assert all(t.reason == "over max_slots (16)" for t in plan.terminations)
