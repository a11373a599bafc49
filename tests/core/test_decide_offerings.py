"""The decision with several shapes: the cheapest machines for the tasks, warm headroom,
idle reaping that saves most, and offerings out of capacity left aside."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from dynagent.core.decide import decide
from dynagent.core.fleet import Fleet, Instance
from dynagent.core.plan import Plan
from dynagent.core.snapshot import Agent
from tests.builders import NOW, agent_instance, ago, pool, snapshot, starting, task

V100S = ["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"]


def shaped_pool(**overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "instance_type": "p3.16xlarge",
        # A cap of 40 GPUs on 20 machines: room for machines of every shape.
        "offerings": {"instance_types": V100S, "max_slots": 40},
        "max_instances": 20,
    }
    fields.update(overrides)
    return pool(**fields)


def typed(instance: Instance, instance_type: str) -> Instance:
    return dataclasses.replace(instance, instance_type=instance_type)


def launched(plan: Plan) -> Counter[str]:
    return Counter(launch.offerings[0].instance_type for launch in plan.launches)


def test_each_task_gets_the_cheapest_machine_that_holds_it() -> None:
    pending = [task("one", 1), task("two-a", 2), task("two-b", 2), task("gang", 16)]
    plan = decide(shaped_pool(), Fleet(), snapshot(pending=pending), NOW)

    assert launched(plan) == {"p3.2xlarge": 1, "p3.8xlarge": 1, "p3.16xlarge": 2}
    by_tasks = {launch.tasks: launch.offerings[0].instance_type for launch in plan.launches}
    assert by_tasks[("one",)] == "p3.2xlarge"
    assert by_tasks[("two-a", "two-b")] == "p3.8xlarge"
    assert by_tasks[("gang",)] == "p3.16xlarge"


def test_at_one_price_per_gpu_the_smaller_machines_win() -> None:
    # Nine 1-GPU tasks: nine p3.2xlarge cost what a p3.16xlarge and a p3.2xlarge do, and
    # each goes when its own task ends.
    pending = [task(f"t{i}", 1) for i in range(9)]
    plan = decide(shaped_pool(), Fleet(), snapshot(pending=pending), NOW)
    assert launched(plan) == {"p3.2xlarge": 9}


def test_a_full_machines_worth_goes_on_the_type_cheapest_per_gpu() -> None:
    # At a discount the admin wrote, the p3.16xlarge is the cheaper per GPU: eight of the
    # tasks share one, the ninth gets a p3.2xlarge.
    pending = [task(f"t{i}", 1) for i in range(9)]
    offerings = {"instance_types": V100S, "max_slots": 40, "prices": {"p3.16xlarge": 22.0}}
    plan = decide(shaped_pool(offerings=offerings), Fleet(), snapshot(pending=pending), NOW)
    assert launched(plan) == {"p3.16xlarge": 1, "p3.2xlarge": 1}


def test_fallbacks_go_from_the_chosen_type_to_larger_ones() -> None:
    plan = decide(shaped_pool(), Fleet(), snapshot(pending=[task("one", 1)]), NOW)
    assert [o.instance_type for o in plan.launches[0].offerings] == V100S
    assert "launch 1 p3.2xlarge on-demand ($3.06/h): pending tasks: one" in plan.describe()


def test_an_offering_out_of_capacity_is_left_aside() -> None:
    out = frozenset({"p3.2xlarge@/on-demand"})
    plan = decide(shaped_pool(), Fleet(unavailable=out), snapshot(pending=[task("one", 1)]), NOW)
    assert launched(plan) == {"p3.8xlarge": 1}


def test_all_out_of_capacity_launches_nothing_and_says_why() -> None:
    out = frozenset(f"{t}@/on-demand" for t in V100S)
    plan = decide(shaped_pool(), Fleet(unavailable=out), snapshot(pending=[task("one", 1)]), NOW)
    assert plan.launches == ()
    assert plan.waiting == ("one (1 slots): no machine of 1 or more slots has capacity now",)
    assert plan.unschedulable == ()


def test_a_starting_machine_of_another_type_counts_by_its_own_slots() -> None:
    fleet = Fleet(instances=(typed(starting("i-small"), "p3.2xlarge"),))
    plan = decide(shaped_pool(), fleet, snapshot(pending=[task("a", 1), task("b", 1)]), NOW)
    assert launched(plan) == {"p3.2xlarge": 1}


def test_warm_headroom_keeps_free_slots_on_the_smallest_shape() -> None:
    plan = decide(shaped_pool(warm_headroom_slots=2), Fleet(), snapshot(), NOW)
    assert launched(plan) == {"p3.2xlarge": 2}
    assert plan.launches[0].reason == "keep warm_headroom_slots (2): 0 free on p3.2xlarge"


def test_warm_headroom_counts_idle_small_agents() -> None:
    small = typed(agent_instance("i-small", idle_since=ago(1)), "p3.2xlarge")
    agents = [Agent(id="i-small", slots=1, used_slots=0)]
    plan = decide(
        shaped_pool(warm_headroom_slots=2), Fleet(instances=(small,)), snapshot(agents=agents), NOW
    )
    assert launched(plan) == {"p3.2xlarge": 1}


def test_idle_headroom_is_not_reaped() -> None:
    small = typed(agent_instance("i-small", idle_since=ago(30)), "p3.2xlarge")
    agents = [Agent(id="i-small", slots=1, used_slots=0)]
    fleet = Fleet(instances=(small,))
    kept = decide(shaped_pool(warm_headroom_slots=1), fleet, snapshot(agents=agents), NOW)
    reaped = decide(shaped_pool(), fleet, snapshot(agents=agents), NOW)
    assert kept.terminations == ()
    assert [t.instance_id for t in reaped.terminations] == ["i-small"]


def test_idle_reaping_under_min_instances_removes_the_costliest() -> None:
    big = typed(agent_instance("i-big", idle_since=ago(25)), "p3.16xlarge")
    small = typed(agent_instance("i-small", idle_since=ago(40)), "p3.2xlarge")
    agents = [Agent(id="i-big", slots=8, used_slots=0), Agent(id="i-small", slots=1, used_slots=0)]
    plan = decide(
        shaped_pool(min_instances=1), Fleet(instances=(small, big)), snapshot(agents=agents), NOW
    )
    assert [t.instance_id for t in plan.terminations] == ["i-big"]


def test_min_instances_launches_the_smallest_shape() -> None:
    plan = decide(shaped_pool(min_instances=1), Fleet(), snapshot(), NOW)
    assert launched(plan) == {"p3.2xlarge": 1}
