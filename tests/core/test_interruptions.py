"""Spot interruptions in the core: the notice's decision, and how decide counts an
instance the cloud is taking back."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from dynagent.core.decide import INTERRUPTION_GRACE, decide
from dynagent.core.fleet import Instance, InstanceState, Mark
from dynagent.core.interruptions import Notice, plan_interruption
from dynagent.core.offerings import Purchase
from dynagent.core.plan import INTERRUPTION_KINDS, TERMINATION_CAUSES, Interruption
from dynagent.report import metrics
from tests.builders import (
    NOW,
    agent_instance,
    ago,
    busy,
    fleet,
    idle,
    instance,
    pool,
    snapshot,
    starting,
    task,
)


def interrupted(base: Instance, at: datetime | None = None) -> Instance:
    return replace(base, marks={**base.marks, Mark.INTERRUPTED_AT: at or ago(1)})


def warning(instance_id: str, kind: str = "interruption") -> Notice:
    return Notice(instance_id, kind, ago(1))


def test_the_kinds_are_the_metric_catalogs() -> None:
    assert INTERRUPTION_KINDS == metrics.INTERRUPTION_KINDS
    assert "interrupted" in TERMINATION_CAUSES


# --- The notice's decision ------------------------------------------------------------


def test_a_busy_agents_warning_marks_it_and_launches_its_replacement() -> None:
    cloud = fleet(agent_instance("i-busy"), agent_instance("i-idle", idle_since=ago(5)))
    plan = plan_interruption(pool(), cloud, warning("i-busy"), NOW)
    (launch,) = plan.launches
    assert launch.cause == "interrupted"
    assert "i-busy" in launch.reason and "busy" in launch.reason
    (mark,) = plan.marks
    assert (mark.mark, mark.value, mark.instance_ids) == (Mark.INTERRUPTED_AT, ago(1), ("i-busy",))
    assert plan.interruptions == (Interruption("i-busy", "interruption"),)
    assert plan.launch_key == "gpu:interruption:i-busy"
    assert plan.launch_at == ago(1)  # the notice's time: a retry sends the same request


def test_a_machine_still_starting_is_replaced_for_the_tasks_it_was_launched_for() -> None:
    plan = plan_interruption(pool(), fleet(starting("i-new")), warning("i-new"), NOW)
    (launch,) = plan.launches
    assert "not registered" in launch.reason


@pytest.mark.parametrize(
    "base",
    [
        agent_instance("i-x", idle_since=ago(3)),
        agent_instance("i-x", disconnected_since=ago(3)),
    ],
)
def test_an_idle_or_disconnected_agents_warning_only_marks_it(base: Instance) -> None:
    plan = plan_interruption(pool(), fleet(base), warning("i-x"), NOW)
    assert plan.launches == ()
    assert [m.mark for m in plan.marks] == [Mark.INTERRUPTED_AT]


def test_an_idle_agent_is_replaced_to_keep_min_instances() -> None:
    cloud = fleet(agent_instance("i-x", idle_since=ago(3)), agent_instance("i-y"))
    plan = plan_interruption(pool(min_instances=2), cloud, warning("i-x"), NOW)
    (launch,) = plan.launches
    assert "min_instances" in launch.reason


def test_an_idle_agent_is_replaced_when_its_pool_has_demand_waiting() -> None:
    cloud = fleet(agent_instance("i-x", idle_since=ago(3)))
    plan = plan_interruption(pool(), cloud, warning("i-x"), NOW, pending_slots=8)
    (launch,) = plan.launches
    assert "demand waiting (8 slots" in launch.reason


def test_the_interrupted_machine_does_not_hold_its_replacement_back_at_max() -> None:
    cloud = fleet(agent_instance("i-a"), agent_instance("i-b"))
    assert len(plan_interruption(pool(max_instances=2), cloud, warning("i-a"), NOW).launches) == 1
    # Another machine going away already does not count either; a third kept one does.
    going = fleet(agent_instance("i-a"), interrupted(agent_instance("i-b")))
    assert len(plan_interruption(pool(max_instances=1), going, warning("i-a"), NOW).launches) == 1
    full = fleet(agent_instance("i-a"), agent_instance("i-b"), agent_instance("i-c"))
    plan = plan_interruption(pool(max_instances=2), full, warning("i-a"), NOW)
    assert plan.launches == () and plan.waiting and plan.marks


def test_a_redelivered_warning_plans_the_same_launch_and_no_mark() -> None:
    cloud = fleet(interrupted(agent_instance("i-busy")))
    plan = plan_interruption(pool(), cloud, warning("i-busy"), NOW)
    assert plan.marks == () and plan.interruptions == ()
    assert len(plan.launches) == 1 and plan.launch_key == "gpu:interruption:i-busy"


@pytest.mark.parametrize("missing", ["i-unknown", "i-stopped"])
def test_an_instance_not_live_in_the_pool_changes_nothing(missing: str) -> None:
    cloud = fleet(agent_instance("i-busy"), instance("i-stopped", state=InstanceState.STOPPED))
    plan = plan_interruption(pool(), cloud, warning(missing), NOW)
    assert plan.changes_nothing and plan.interruptions == ()


def test_a_rebalance_recommendation_only_marks() -> None:
    plan = plan_interruption(
        pool(), fleet(agent_instance("i-busy")), warning("i-busy", "rebalance"), NOW
    )
    assert plan.launches == ()
    assert [m.mark for m in plan.marks] == [Mark.REBALANCE_AT]
    assert plan.interruptions == (Interruption("i-busy", "rebalance"),)


def test_the_replacement_tries_the_reclaimed_offering_last() -> None:
    offerings = {
        "instance_types": ["p3.8xlarge", "p3.16xlarge"],
        "subnet_ids": ["subnet-a", "subnet-b"],
        "purchase": ["spot", "on-demand"],
    }
    spot_pool = pool(offerings=offerings)
    base = replace(agent_instance("i-busy"), instance_type="p3.8xlarge", zone="subnet-a", spot=True)
    (launch,) = plan_interruption(spot_pool, fleet(base), warning("i-busy"), NOW).launches
    first, last = launch.offerings[0], launch.offerings[-1]
    assert (first.instance_type, first.zone, first.purchase) == (
        "p3.8xlarge",
        "subnet-b",
        Purchase.SPOT,
    )
    assert (last.instance_type, last.zone, last.purchase) == (
        "p3.8xlarge",
        "subnet-a",
        Purchase.SPOT,
    )


def test_with_its_type_out_everywhere_the_replacement_is_the_cheapest_cover() -> None:
    offerings = {
        "instance_types": ["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"],
        "subnet_ids": ["subnet-a", "subnet-b"],
    }
    gpus = pool(instance_type="p3.16xlarge", offerings=offerings, max_instances=4)
    base = replace(agent_instance("i-busy"), instance_type="p3.16xlarge", zone="subnet-a")
    out = frozenset(f"p3.16xlarge@{s}/on-demand" for s in ("subnet-a", "subnet-b"))
    plan = plan_interruption(gpus, replace(fleet(base), unavailable=out), warning("i-busy"), NOW)
    # Its 8 slots on machines of a size that divides them: two 4-GPU ones, under a key
    # of their own, the same whichever pass chooses them.
    assert [launch.offerings[0].instance_type for launch in plan.launches] == ["p3.8xlarge"] * 2
    assert {o.instance_type for launch in plan.launches for o in launch.offerings} == {"p3.8xlarge"}
    assert all("p3.16xlarge has no capacity" in launch.reason for launch in plan.launches)
    assert plan.launch_key == "gpu:interruption:i-busy:cover" and plan.waiting == ()
    # The 4-GPU type out too: eight 1-GPU machines hold its 8 slots, within the cap in
    # slots (max_instances counts no machines of a pool with offerings).
    out |= {f"p3.8xlarge@{s}/on-demand" for s in ("subnet-a", "subnet-b")}
    plan = plan_interruption(gpus, replace(fleet(base), unavailable=out), warning("i-busy"), NOW)
    assert [launch.offerings[0].instance_type for launch in plan.launches] == ["p3.2xlarge"] * 8
    # Where the admin caps machines, eight would exceed it: the replacement waits, and
    # says why.
    capped = pool(
        instance_type="p3.16xlarge", offerings={**offerings, "max_machines": 4}, max_instances=4
    )
    plan = plan_interruption(capped, replace(fleet(base), unavailable=out), warning("i-busy"), NOW)
    assert plan.launches == ()
    (why,) = plan.waiting
    assert why.startswith("replacement for i-busy:") and "max_machines" in why, why


# --- How decide counts an interrupted instance ----------------------------------------


def test_its_free_slots_are_no_room_for_pending_tasks() -> None:
    cloud = fleet(interrupted(agent_instance("i-x", idle_since=ago(3))))
    plan = decide(pool(), cloud, snapshot(pending=[task("t", 4)], agents=[idle("i-x")]), NOW)
    assert len(plan.launches) == 1 and plan.terminations == ()


def test_it_does_not_count_toward_max_instances() -> None:
    cloud = fleet(interrupted(agent_instance("i-x")))
    plan = decide(
        pool(max_instances=1), cloud, snapshot(pending=[task("t", 4)], agents=[busy("i-x")]), NOW
    )
    assert len(plan.launches) == 1 and plan.waiting == ()


def test_it_is_left_to_the_cloud_however_idle_or_missing() -> None:
    cloud = fleet(
        interrupted(agent_instance("i-idle", idle_since=ago(60))),
        interrupted(agent_instance("i-gone", disconnected_since=ago(60))),
        interrupted(instance("i-never", launched=ago(60))),
    )
    plan = decide(pool(), cloud, snapshot(agents=[idle("i-idle")]), NOW)
    assert plan.terminations == () and plan.marks == ()
    assert decide(pool(), cloud, None, NOW).terminations == ()


def test_its_replacement_is_not_trimmed_as_over_max() -> None:
    cloud = fleet(interrupted(agent_instance("i-x")), starting("i-new"))
    plan = decide(pool(max_instances=1), cloud, snapshot(agents=[busy("i-x")]), NOW)
    assert plan.terminations == ()


def test_a_mark_past_its_grace_is_cleared_and_the_instance_counts_again() -> None:
    stale = interrupted(agent_instance("i-x"), at=NOW - INTERRUPTION_GRACE)
    plan = decide(
        pool(max_instances=1),
        fleet(stale),
        snapshot(pending=[task("t", 4)], agents=[busy("i-x")]),
        NOW,
    )
    assert plan.launches == () and plan.waiting  # at max again
    (write,) = plan.marks
    assert (write.mark, write.value, write.instance_ids) == (Mark.INTERRUPTED_AT, None, ("i-x",))


def test_a_stopped_instance_says_whether_it_was_interrupted() -> None:
    cloud = fleet(
        instance("i-stopped", state=InstanceState.STOPPED),
        interrupted(instance("i-warned", state=InstanceState.STOPPED)),
        replace(instance("i-preempted", state=InstanceState.STOPPED), spot=True, preempted=True),
    )
    plan = decide(pool(), cloud, None, NOW)
    causes = {t.instance_id: t.cause for t in plan.terminations}
    assert causes == {
        "i-stopped": "stopped",
        "i-warned": "interrupted",
        "i-preempted": "interrupted",
    }
    # Only the preemption is news here: the warning was counted when it came.
    assert plan.interruptions == (Interruption("i-preempted", "preempted"),)
