"""Filling the cap: a pass that launches for waiting work within 30 % of the cap in GPUs
launches the rest of it, on the machines cheapest per GPU; not below that, not while a
task holds the room, not beside free reserved places, not twice, and not with
``fill_near_cap: false``. Pools as an admin copies them from master.yaml: g5 1/4/8 with
``max_instances: 10`` of g5.48xlarge, a cap of 80 GPUs."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from dynagent.core.config import parse_config
from dynagent.core.decide import decide
from dynagent.core.fleet import Fleet
from dynagent.core.plan import Plan
from dynagent.core.snapshot import Agent, PendingTask
from tests.builders import NOW, agent_instance, snapshot, starting
from tests.core.test_placement import CLUSTER05_POOL
from tests.core.test_reservations import odcr, p4d_pool

SLOTS = {"g5.xlarge": 1, "g5.12xlarge": 4, "g5.48xlarge": 8}


def g5_pool(provider_line: str = "") -> object:
    """The pool of test_placement (g5 1/4/8, max_instances 10), with one more field."""
    text = CLUSTER05_POOL.format(max_instances=10, extra="")
    return parse_config(text + provider_line).pool("g5")


def busy_fleet(count: int, instance_type: str = "g5.xlarge") -> tuple[list[Agent], Fleet]:
    slots = SLOTS[instance_type]
    agents = [Agent(id=f"i-busy{k}", slots=slots, used_slots=slots) for k in range(count)]
    instances = (replace(agent_instance(a.id), instance_type=instance_type) for a in agents)
    return agents, Fleet(tuple(instances))


def tasks(*sizes: int) -> list[PendingTask]:
    return [PendingTask(task=f"t{k}", slots=slots) for k, slots in enumerate(sizes)]


def by_cause(plan: Plan) -> Counter[tuple[str, str]]:
    return Counter((launch.cause, launch.offerings[0].instance_type) for launch in plan.launches)


def test_within_30_percent_of_the_cap_a_launch_fills_the_rest_cheapest_per_gpu() -> None:
    # 57 of 80 GPUs busy; the 1-GPU task takes one more: 22 left, under 24 (30 %).
    agents, fleet = busy_fleet(57)
    plan = decide(g5_pool(), fleet, snapshot(pending=tasks(1), agents=agents), NOW)

    assert by_cause(plan) == {("demand", "g5.xlarge"): 1, ("cap_fill", "g5.xlarge"): 22}
    fill = [launch for launch in plan.launches if launch.cause == "cap_fill"]
    assert fill[0].tasks == ()
    assert "within 22 slots of max_slots (80)" in fill[0].reason


def test_further_from_the_cap_only_the_work_is_launched_for() -> None:
    agents, fleet = busy_fleet(55)  # 24 left after the task: not under 30 % of 80
    plan = decide(g5_pool(), fleet, snapshot(pending=tasks(1), agents=agents), NOW)

    assert by_cause(plan) == {("demand", "g5.xlarge"): 1}


def test_the_fill_is_launched_once() -> None:
    # The next pass sees the filled machines starting: no room, nothing more.
    agents, fleet = busy_fleet(57)
    first = decide(g5_pool(), fleet, snapshot(pending=tasks(1), agents=agents), NOW)
    booting = tuple(
        replace(new, instance_type="g5.xlarge")
        for new in (starting(f"i-new{k}", minutes_ago=0) for k in range(len(first.launches)))
    )
    again = decide(
        g5_pool(),
        Fleet((*fleet.instances, *booting)),
        snapshot(pending=tasks(1), agents=agents),
        NOW,
    )

    assert again.launches == ()


def test_nothing_is_filled_while_a_large_task_holds_the_room() -> None:
    # 76 busy: the 8-GPU task waits for room; the 4 GPUs left are held for its shape.
    agents, fleet = busy_fleet(76)
    plan = decide(g5_pool(), fleet, snapshot(pending=tasks(8, 1), agents=agents), NOW)

    assert plan.launches == ()


def test_a_pass_that_launches_nothing_fills_nothing() -> None:
    agents, fleet = busy_fleet(70)
    assert decide(g5_pool(), fleet, snapshot(agents=agents), NOW).launches == ()


def test_fill_near_cap_false_turns_it_off() -> None:
    agents, fleet = busy_fleet(57)
    off = g5_pool("      fill_near_cap: false\n")
    plan = decide(off, fleet, snapshot(pending=tasks(1), agents=agents), NOW)

    assert by_cause(plan) == {("demand", "g5.xlarge"): 1}


def test_free_reserved_places_are_the_slack_already() -> None:
    # p4d pool beside p3.2xlarge, cap 80: seven busy machines and one task of 8 into the
    # reservation, which keeps 3 free places: nothing is bought beside them.
    offerings = {
        "instance_types": ["p4d.24xlarge", "p3.2xlarge"],
        "prices": {"p4d.24xlarge": 32.77, "p3.2xlarge": 3.06},
    }
    agents = [Agent(id=f"i-busy{k}", slots=8, used_slots=8) for k in range(7)]
    fleet = Fleet(tuple(agent_instance(a.id) for a in agents), reservations=(odcr(),))
    view = snapshot(pending=[("exp", 8)], agents=agents)
    plan = decide(p4d_pool(offerings=offerings), fleet, view, NOW)

    assert [launch.cause for launch in plan.launches] == ["demand"]
    # With its one place taken, the 16 slots left of 80 are filled with p3.2xlarge, the
    # cheaper per GPU at the pool's prices.
    taken = Fleet(fleet.instances, reservations=(odcr(1),))
    plan = decide(p4d_pool(offerings=offerings), taken, view, NOW)
    assert by_cause(plan) == {("demand", "p4d.24xlarge"): 1, ("cap_fill", "p3.2xlarge"): 16}


def test_a_pool_whose_cheapest_machine_is_its_largest_fills_nothing() -> None:
    # p4d.24xlarge and p3.16xlarge, both of 8 GPUs: the cover leaves Determined's slack
    # (a 1-GPU task on a machine of 8), and filling would only add to the bill.
    agents = [Agent(id=f"i-busy{k}", slots=8, used_slots=8) for k in range(8)]
    fleet = Fleet(tuple(agent_instance(a.id) for a in agents))
    view = snapshot(pending=[("exp", 1)], agents=agents)
    plan = decide(p4d_pool(reservations=[]), fleet, view, NOW)

    assert [launch.cause for launch in plan.launches] == ["demand"]
