"""Warm headroom sized from arrivals (``warm_headroom_slots: auto``): room for the work
that came in one lead time before most of the last hour's arrivals, of the sizes that
came, within the caps; nothing in a quiet pool, nothing for whole-machine tasks."""

from __future__ import annotations

from collections import Counter
from typing import Any

from dynagent.core.decide import decide
from dynagent.core.decide.expected_work import (
    BOOT_SECONDS,
    QUANTILE,
    START_SECONDS,
    burst_before,
)
from dynagent.core.fleet import Fleet
from dynagent.core.plan import Plan
from dynagent.core.snapshot import Agent, Arrival, Snapshot
from tests.builders import NOW, agent_instance, ago, fleet, pool, snapshot

V100S = ["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"]


def auto_pool(**overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "instance_type": "p3.16xlarge",
        "max_instances": 3000,
        "max_idle_agent_period": "5m",
        "offerings": {"instance_types": V100S},
        "warm_headroom_slots": "auto",
    }
    fields.update(overrides)
    return pool(**fields)


def with_arrivals(shot: Snapshot, *arrivals: tuple[int, int, int]) -> Snapshot:
    """The snapshot reporting (age, slots, count) arrivals, with 16 slots busy on agents
    of machines the pool does not manage: the room is at most the slots busy."""
    busy = (Agent("other-1", 8, 8), Agent("other-2", 8, 8))
    return shot.model_copy(
        update={"arrivals": tuple(Arrival(*a) for a in arrivals), "agents": shot.agents + busy}
    )


def launched(plan: Plan) -> Counter[str]:
    return Counter(launch.offerings[0].instance_type for launch in plan.launches)


def test_a_burst_gets_room_for_a_burst_of_its_sizes() -> None:
    # Six 1-GPU tasks and a 4-GPU one came together 2 minutes ago and run now.
    shot = with_arrivals(snapshot(), (120, 1, 6), (120, 4, 1))
    plan = decide(auto_pool(), Fleet(), shot, NOW)
    assert sum(la.offering.slots for la in plan.launches if la.offering) == 10
    assert {la.cause for la in plan.launches} == {"headroom"}
    assert "arrivals predict" in plan.launches[0].reason


def test_work_that_comes_alone_keeps_room_for_one_task() -> None:
    # One 1-GPU task every ten minutes: none came within a boot of another.
    shot = with_arrivals(snapshot(), *((600 * n + 30, 1, 1) for n in range(6)))
    assert launched(decide(auto_pool(), Fleet(), shot, NOW)) == {"p3.2xlarge": 1}


def test_free_slots_of_busy_agents_are_the_room() -> None:
    shot = with_arrivals(snapshot(agents=[("i-1", 8, 5)]), (60, 1, 3), (1200, 1, 1), (2400, 1, 1))
    cloud = fleet(agent_instance("i-1"))
    assert decide(auto_pool(), cloud, shot, NOW).launches == ()


def test_a_quiet_pool_keeps_no_room_and_its_idle_agents_go() -> None:
    # No task came for an hour (the bridge reports none): the night costs nothing.
    cloud = fleet(agent_instance("i-1", idle_since=ago(6)))
    shot = with_arrivals(snapshot(agents=[("i-1", 1, 0)]))
    plan = decide(auto_pool(), cloud, shot, NOW)
    assert plan.launches == ()
    assert [t.instance_id for t in plan.terminations] == ["i-1"]


def test_an_idle_agent_the_expected_work_needs_is_kept() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(6)))
    shot = with_arrivals(snapshot(agents=[("i-1", 1, 0)]), (300, 1, 1))
    plan = decide(auto_pool(), cloud, shot, NOW)
    assert plan.terminations == () and plan.launches == ()


def test_an_idle_machine_is_kept_for_whole_machine_tasks_but_none_launched() -> None:
    cloud = fleet(agent_instance("i-1", idle_since=ago(6)))
    shot = with_arrivals(snapshot(agents=[("i-1", 8, 0)]), (300, 8, 1), (900, 8, 1))
    plan = decide(auto_pool(), cloud, shot, NOW)
    assert plan.terminations == () and plan.launches == ()
    # A 16-GPU gang is no such task: the idle machine goes.
    shot = with_arrivals(snapshot(agents=[("i-1", 8, 0)]), (300, 16, 1))
    assert len(decide(auto_pool(), cloud, shot, NOW).terminations) == 1


def test_the_room_is_at_most_the_slots_busy() -> None:
    # Six 1-GPU tasks and a 4-GPU one came; 4 slots are busy: room for four of the 1-GPU
    # tasks, the smallest first.
    shot = snapshot(agents=[("other", 4, 4)]).model_copy(
        update={"arrivals": (Arrival(120, 1, 6), Arrival(120, 4, 1))}
    )
    assert launched(decide(auto_pool(), Fleet(), shot, NOW)) == {"p3.2xlarge": 4}
    # Nothing busy: no room at all.
    idle_pool = shot.model_copy(update={"agents": ()})
    assert decide(auto_pool(), Fleet(), idle_pool, NOW).launches == ()


def test_without_the_arrivals_nothing_is_kept() -> None:
    # A publisher that does not report arrivals: no prediction, no room.
    cloud = fleet(agent_instance("i-1", idle_since=ago(6)))
    plan = decide(auto_pool(), cloud, snapshot(agents=[("i-1", 1, 0)]), NOW)
    assert plan.launches == () and len(plan.terminations) == 1


def test_at_the_cap_no_room_is_launched() -> None:
    # Capped at 8 GPUs, all busy: the room kept stays within the cap.
    capped = auto_pool(offerings={"instance_types": V100S, "max_slots": 8})
    cloud = fleet(agent_instance("i-1"))
    shot = with_arrivals(snapshot(agents=[("i-1", 8, 8)]), (60, 1, 4))
    assert decide(capped, cloud, shot, NOW).launches == ()
    # With 2 GPUs of the cap left, room for two of the four.
    roomy = auto_pool(offerings={"instance_types": V100S, "max_slots": 10})
    assert sum(la.offering.slots for la in decide(roomy, cloud, shot, NOW).launches) == 2


def test_a_gang_arriving_gets_no_room() -> None:
    # Tasks of a whole 8-GPU machine or more start on empty machines only: no machine is
    # launched for them. The 1-GPU task beside them still gets its room.
    shot = with_arrivals(snapshot(), (60, 16, 1), (60, 8, 2))
    assert decide(auto_pool(), Fleet(), shot, NOW).launches == ()
    shot = with_arrivals(snapshot(), (60, 16, 1), (60, 1, 1))
    assert launched(decide(auto_pool(), Fleet(), shot, NOW)) == {"p3.2xlarge": 1}


def test_the_pending_tasks_come_first() -> None:
    # Two tasks wait and one came alone before: their machines, then room for one more.
    shot = with_arrivals(
        snapshot(pending=[("a", 1), ("b", 1)]), (0, 1, 2), (1800, 1, 1), (3000, 1, 1)
    )
    plan = decide(auto_pool(), Fleet(), shot, NOW)
    assert Counter(la.cause for la in plan.launches) == {"demand": 2, "headroom": 2}


def test_the_burst_is_counted_over_the_lead_time() -> None:
    # Five tasks 10 s apart, then two alone: the tasks in the lead time up to each are
    # 1, 2, 3, 4, 5, 1 and 1; at 90 % of the seven the room kept is for the burst of 5.
    assert QUANTILE == 0.9
    burst = [Arrival(3000 - 10 * n, 1, 1) for n in range(5)]
    arrivals = (*burst, Arrival(1000, 1, 1), Arrival(10, 1, 1))
    assert burst_before(arrivals, whole=8, lead=START_SECONDS) == [1] * 5
    assert burst_before(arrivals, whole=8, lead=BOOT_SECONDS) == [1] * 5
    # Within 10 s of each other only two at a time.
    assert burst_before(arrivals, whole=8, lead=10) == [1, 1]
    # Counted in slots, of the sizes that came: a 4-GPU task closing the burst.
    sized = (*burst[:4], Arrival(2960, 4, 1), Arrival(1000, 1, 1), Arrival(10, 1, 1))
    assert burst_before(sized, whole=8, lead=START_SECONDS) == [4, 1, 1, 1, 1]
    # Whole machines of 4 GPUs: the 4-GPU task is left out, and the burst is of four.
    assert burst_before(sized, whole=4, lead=START_SECONDS) == [1, 1, 1, 1]
