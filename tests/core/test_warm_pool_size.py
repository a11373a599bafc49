"""``warm_pool.max_stopped: auto``: as many stopped machines as bring the pool back to
the most agents it had at once over max_stopped_period (the snapshot's
``peak_agents``), less those it runs; none deleted for the count where the peak is
unknown."""

from __future__ import annotations

from dynagent.core.config import Pool
from dynagent.core.decide import decide
from dynagent.core.plan import Plan
from dynagent.core.snapshot import Snapshot
from tests.builders import NOW, agent_instance, busy, fleet, idle, pool, snapshot

from .test_warm_pool import idle_agent, stopped


def auto_pool() -> Pool:
    return pool(warm_pool={"max_stopped": "auto", "max_stopped_period": "48h"}, max_instances=10)


def peaked(shot: Snapshot, peak: int | None) -> Snapshot:
    return shot.model_copy(update={"peak_agents": peak})


def test_stopped_machines_beyond_the_return_to_the_peak_are_deleted() -> None:
    of = auto_pool()
    # Four stopped, the oldest first; one agent runs; the pool peaked at 3 agents.
    machines = [stopped(f"s-{n}", of, hours_ago=4 - n) for n in range(4)]
    cloud = fleet(*machines, agent_instance("i-1"))
    plan = decide(of, cloud, peaked(snapshot(agents=[busy("i-1")]), 3), NOW)
    assert sorted(t.instance_id for t in plan.terminations) == ["s-0", "s-1"]
    assert "auto: 2" in plan.terminations[0].reason and "peak of 3" in plan.terminations[0].reason


def test_reaped_agents_are_stopped_while_the_peak_leaves_room() -> None:
    of = auto_pool()
    cloud = fleet(idle_agent("i-1"), idle_agent("i-2"), stopped("s-0", of))
    shot = peaked(snapshot(agents=[idle("i-1"), idle("i-2")]), 3)
    plan = decide(of, cloud, shot, NOW)
    assert sorted(s.instance_id for s in plan.stops) == ["i-1", "i-2"]
    assert plan.terminations == ()
    # At a peak of 2 only two places: the one stopped already keeps its own (a swap of
    # alike machines gains nothing), one reaped agent is stopped, the other terminated.
    plan = decide(of, cloud, peaked(shot, 2), NOW)
    assert len(plan.stops) == 1
    (gone,) = [t.instance_id for t in plan.terminations if t.instance_id not in plan_stops(plan)]
    assert gone in {"i-1", "i-2"}


def plan_stops(plan: Plan) -> set[str]:
    return {s.instance_id for s in plan.stops}


def test_without_the_peak_no_stopped_machine_goes_for_the_count() -> None:
    of = auto_pool()
    machines = [stopped(f"s-{n}", of) for n in range(5)]
    assert decide(of, fleet(*machines), peaked(snapshot(), None), NOW).terminations == ()
    assert decide(of, fleet(*machines), None, NOW).terminations == ()
    # The period still applies.
    old = stopped("s-old", of, hours_ago=49)
    assert [t.instance_id for t in decide(of, fleet(old), None, NOW).terminations] == ["s-old"]


def test_machines_started_for_pending_work_are_never_the_ones_trimmed() -> None:
    of = auto_pool()
    # Three stopped, a peak of 1 agent: two tasks start two of them; the one left is
    # beyond what brings the pool back to its peak, which it passes now.
    machines = [stopped(f"s-{n}", of, hours_ago=3 - n) for n in range(3)]
    shot = peaked(snapshot(pending=[("a", 4), ("b", 4)]), 1)
    plan = decide(of, fleet(*machines), shot, NOW)
    started = {s.instance_id for s in plan.starts}
    assert started == {"s-1", "s-2"} and plan.launches == ()
    assert [t.instance_id for t in plan.terminations] == ["s-0"]
