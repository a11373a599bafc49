"""The decision: (pool, fleet, snapshot or none, now) -> Plan, on plain data.

``SCENARIOS`` is the rule book as a table: each names a situation and the exact plan
it must produce. It is cloud-neutral on purpose, so an adapter's tests can replay it.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from dynagent.aws.refusals import UNFULFILLABLE_SPOT_STATUSES
from dynagent.core.config import Settings
from dynagent.core.decide import decide
from dynagent.core.fleet import Fleet, InstanceState, Mark, RequestState
from dynagent.core.plan import Adoption, MarkWrite, Plan
from dynagent.core.snapshot import Agent, Snapshot
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
    spot_request,
    starting,
    task,
)

ACTIVE = RequestState.ACTIVE
CANCELLED_RUNNING = RequestState.CANCELLED_INSTANCE_RUNNING


@dataclass(frozen=True)
class Scenario:
    """A situation and the plan it must produce, exactly.

    ``terminate`` and ``cancel`` map ids to a fragment of the reason; ``launches`` maps a
    fragment of the launch reason to how many launches must carry it.
    """

    id: str
    fleet: Fleet = field(default_factory=Fleet)
    snapshot: Snapshot | None = None
    pool: dict[str, Any] = field(default_factory=dict)
    launches: dict[str, int] = field(default_factory=dict)
    terminate: dict[str, str] = field(default_factory=dict)
    cancel: dict[str, str] = field(default_factory=dict)
    adopt: tuple[tuple[str, str], ...] = ()
    unschedulable: dict[str, str] = field(default_factory=dict)
    waiting: tuple[str, ...] = ()


def pending(*tasks: tuple[str, int], agents: tuple[Agent, ...] = ()) -> Snapshot:
    return snapshot(pending=[task(name, slots) for name, slots in tasks], agents=agents)


SCENARIOS = [
    # --- Demand ---------------------------------------------------------------------
    Scenario("quiet pool does nothing", snapshot=snapshot()),
    Scenario(
        "one task launches one instance",
        snapshot=pending(("t1", 2)),
        launches={"pending tasks: t1": 1},
    ),
    Scenario(
        "tasks pack first-fit-decreasing",
        snapshot=pending(("a", 2), ("b", 3), ("c", 1), ("d", 4), ("e", 2)),
        launches={"pending tasks": 3},
    ),
    Scenario(
        "a starting instance absorbs a task",
        fleet=fleet(starting("i-start")),
        snapshot=pending(("t1", 4)),
    ),
    Scenario(
        "starting instances absorb what fits, the rest launches",
        fleet=fleet(starting("i-s1"), starting("i-s2")),
        snapshot=pending(("a", 4), ("b", 3), ("c", 3), ("d", 1)),
        # a -> i-s1, b -> i-s2, c -> new, d -> i-s2.
        launches={"pending tasks: c": 1},
    ),
    Scenario(
        "an open spot request absorbs a task",
        fleet=fleet(requests=[spot_request("sir-open")]),
        snapshot=pending(("t1", 4)),
    ),
    Scenario(
        "an active request's unmanaged instance absorbs a task and is adopted",
        fleet=fleet(requests=[spot_request("sir-a", state=ACTIVE, instance_id="i-new")]),
        snapshot=pending(("t1", 4), ("t2", 4)),
        launches={"pending tasks: t2": 1},
        adopt=(("sir-a", "i-new"),),
    ),
    Scenario(
        "an active request whose instance is managed is counted once",
        fleet=fleet(
            starting("i-new"),
            requests=[spot_request("sir-a", state=ACTIVE, instance_id="i-new")],
        ),
        snapshot=pending(("t1", 4), ("t2", 4)),
        launches={"pending tasks: t2": 1},
    ),
    Scenario(
        "a busy agent's spare slots take a pending task that fits: the master places it next",
        fleet=fleet(agent_instance("i-busy")),
        snapshot=pending(("t1", 1), agents=(busy("i-busy", used=2),)),
    ),
    Scenario(
        "a busy agent's spare slots do not take a task larger than them",
        fleet=fleet(agent_instance("i-busy")),
        snapshot=pending(("t1", 3), agents=(busy("i-busy", used=2),)),
        launches={"pending tasks: t1": 1},
    ),
    Scenario(
        "an idle agent takes a pending task that fits: the master is about to place it",
        fleet=fleet(agent_instance("i-idle", idle_since=ago(2))),
        snapshot=pending(("t1", 2), agents=(idle("i-idle"),)),
    ),
    Scenario(
        "a gang task counts an idle agent as one of its whole instances",
        pool={"max_instances": 2},
        fleet=fleet(agent_instance("i-idle", idle_since=ago(2))),
        snapshot=pending(("big", 8), agents=(idle("i-idle"),)),
        launches={"pending tasks: big": 1},
    ),
    Scenario(
        "an idle agent past its period that a pending task fits is kept for it, not churned",
        fleet=fleet(agent_instance("i-idle", idle_since=ago(25))),
        snapshot=pending(("t1", 4), agents=(idle("i-idle"),)),
    ),
    Scenario(
        "a gang keeps the idle agent it counts on past the idle period",
        pool={"max_instances": 2},
        fleet=fleet(agent_instance("i-idle", idle_since=ago(25))),
        snapshot=pending(("big", 8), agents=(idle("i-idle"),)),
        launches={"pending tasks: big": 1},
    ),
    Scenario(
        "an idle agent past its period that pending tasks cannot use is reaped",
        fleet=fleet(agent_instance("i-idle", idle_since=ago(25))),
        snapshot=pending(("t1", 3), agents=(idle("i-idle", slots=2),)),
        terminate={"i-idle": "max_idle_agent_period"},
        launches={"pending tasks: t1": 1},
    ),
    Scenario(
        "a gang task takes whole instances",
        snapshot=pending(("big", 8)),
        launches={"pending tasks: big": 2},
    ),
    Scenario(
        "a gang task uses an empty starting instance",
        fleet=fleet(starting("i-start")),
        snapshot=pending(("big", 12)),
        launches={"pending tasks: big": 2},
    ),
    Scenario(
        "a gang task that is not a multiple of an instance is unschedulable",
        snapshot=pending(("odd", 6), ("t1", 4)),
        launches={"pending tasks: t1": 1},
        unschedulable={"odd": "not a multiple of the 4 slots"},
    ),
    Scenario(
        "a gang task over max_instances is unschedulable",
        snapshot=pending(("huge", 24)),
        unschedulable={"huge": "more than max_instances (5)"},
    ),
    Scenario(
        "demand over max_instances waits",
        pool={"max_instances": 2},
        snapshot=pending(("a", 4), ("b", 4), ("c", 4)),
        launches={"pending tasks": 2},
        waiting=("c",),
    ),
    Scenario(
        "max_instances counts registered agents",
        pool={"max_instances": 2},
        fleet=fleet(agent_instance("i-1")),
        snapshot=pending(("a", 4), ("b", 4), agents=(busy("i-1"),)),
        launches={"pending tasks: a": 1},
        waiting=("b",),
    ),
    Scenario(
        "max_instances counts open spot requests",
        pool={"max_instances": 2},
        fleet=fleet(agent_instance("i-1"), requests=[spot_request("sir-open")]),
        snapshot=pending(("a", 4), ("b", 4), agents=(busy("i-1"),)),
        waiting=("b",),
    ),
    Scenario(
        "a gang at max_instances gets what room there is, and smaller tasks take it meanwhile",
        pool={"max_instances": 2},
        fleet=fleet(agent_instance("i-1")),
        snapshot=pending(("big", 8), ("small", 2), agents=(busy("i-1"),)),
        launches={"pending tasks: big, small": 1},
        waiting=("big",),
    ),
    Scenario(
        "min_instances launches with no demand",
        pool={"min_instances": 2},
        snapshot=snapshot(),
        launches={"keep min_instances (2)": 2},
    ),
    Scenario(
        "min_instances launches in the sweep too",
        pool={"min_instances": 2},
        launches={"keep min_instances (2)": 2},
    ),
    Scenario(
        "min_instances counts instances launched for demand",
        pool={"min_instances": 2},
        snapshot=pending(("t1", 4)),
        launches={"pending tasks: t1": 1, "keep min_instances": 1},
    ),
    Scenario(
        "min_instances counts starting instances and requests",
        pool={"min_instances": 3},
        fleet=fleet(starting("i-start"), requests=[spot_request("sir-open")]),
        launches={"keep min_instances (3)": 1},
    ),
    Scenario(
        "the sweep launches nothing for demand",
        fleet=fleet(agent_instance("i-1")),
    ),
    # --- Terminations -----------------------------------------------------------------
    Scenario(
        "stopped and stopping instances are terminated",
        fleet=fleet(
            instance("i-stopped", state=InstanceState.STOPPED),
            instance("i-stopping", state=InstanceState.STOPPING),
            agent_instance("i-ok"),
        ),
        snapshot=snapshot(agents=(busy("i-ok"),)),
        terminate={"i-stopped": "stopped", "i-stopping": "stopping"},
    ),
    Scenario(
        "a stopped instance is replaced to keep min_instances",
        pool={"min_instances": 1},
        fleet=fleet(instance("i-stopped", state=InstanceState.STOPPED)),
        terminate={"i-stopped": "stopped"},
        launches={"keep min_instances (1)": 1},
    ),
    Scenario(
        "an agent idle past max_idle_agent_period is terminated",
        fleet=fleet(agent_instance("i-idle", idle_since=ago(25)), agent_instance("i-busy")),
        snapshot=snapshot(agents=(idle("i-idle"), busy("i-busy"))),
        terminate={"i-idle": "max_idle_agent_period"},
    ),
    Scenario(
        "an agent idle within max_idle_agent_period stays",
        fleet=fleet(agent_instance("i-idle", idle_since=ago(15))),
        snapshot=snapshot(agents=(idle("i-idle"),)),
    ),
    Scenario(
        "max_idle_agent_period comes from the pool",
        pool={"max_idle_agent_period": "5m"},
        fleet=fleet(agent_instance("i-idle", idle_since=ago(6))),
        snapshot=snapshot(agents=(idle("i-idle"),)),
        terminate={"i-idle": "idle for 6m"},
    ),
    Scenario(
        "an agent first seen idle now is not reaped",
        fleet=fleet(agent_instance("i-idle")),
        snapshot=snapshot(agents=(idle("i-idle"),)),
    ),
    Scenario(
        "a busy agent with an old idle mark stays",
        fleet=fleet(agent_instance("i-1", idle_since=ago(60))),
        snapshot=snapshot(agents=(busy("i-1", used=1),)),
    ),
    Scenario(
        "idle reaping stops at min_instances, oldest idle first",
        pool={"min_instances": 2},
        fleet=fleet(
            agent_instance("i-idle-30", idle_since=ago(30)),
            agent_instance("i-idle-60", idle_since=ago(60)),
            agent_instance("i-idle-45", idle_since=ago(45)),
        ),
        snapshot=snapshot(agents=(idle("i-idle-30"), idle("i-idle-60"), idle("i-idle-45"))),
        terminate={"i-idle-60": "idle for 1h"},
    ),
    Scenario(
        "idle reaping never goes below min_instances",
        pool={"min_instances": 1},
        fleet=fleet(agent_instance("i-idle", idle_since=ago(60))),
        snapshot=snapshot(agents=(idle("i-idle"),)),
    ),
    Scenario(
        "an instance that never registered is terminated after the starting period",
        fleet=fleet(instance("i-stuck", launched=ago(25)), starting("i-new", minutes_ago=5)),
        snapshot=snapshot(),
        terminate={"i-stuck": "never registered (max_agent_starting_period 20m)"},
    ),
    Scenario(
        "a stuck instance is not capacity for demand",
        fleet=fleet(instance("i-stuck", launched=ago(25))),
        snapshot=pending(("t1", 4)),
        terminate={"i-stuck": "never registered"},
        launches={"pending tasks: t1": 1},
    ),
    Scenario(
        "a slow starter that registers now stays",
        fleet=fleet(instance("i-slow", launched=ago(25))),
        snapshot=snapshot(agents=(busy("i-slow"),)),
    ),
    Scenario(
        "the sweep terminates instances that never registered",
        fleet=fleet(instance("i-stuck", launched=ago(21))),
        terminate={"i-stuck": "never registered"},
    ),
    Scenario(
        "a registered agent missing past max_disconnected_period is terminated",
        fleet=fleet(agent_instance("i-gone", disconnected_since=ago(11))),
        snapshot=snapshot(),
        terminate={"i-gone": "missing from snapshots for 11m (max_disconnected_period 10m)"},
    ),
    Scenario(
        "a registered agent missing briefly stays",
        fleet=fleet(agent_instance("i-gone", disconnected_since=ago(5))),
        snapshot=snapshot(),
    ),
    Scenario(
        "a registered agent missing for the first time stays",
        fleet=fleet(agent_instance("i-gone")),
        snapshot=snapshot(),
    ),
    Scenario(
        "a disconnected agent that is back stays",
        fleet=fleet(agent_instance("i-back", disconnected_since=ago(30))),
        snapshot=snapshot(agents=(busy("i-back"),)),
    ),
    # --- The sweep (no snapshot): marks are the memory ---------------------------------
    Scenario(
        "the sweep reaps idle agents from the idle-since mark",
        fleet=fleet(agent_instance("i-idle", idle_since=ago(25)), agent_instance("i-busy")),
        terminate={"i-idle": "max_idle_agent_period"},
    ),
    Scenario(
        "the sweep keeps min_instances when reaping idle agents",
        pool={"min_instances": 1},
        fleet=fleet(
            agent_instance("i-idle-25", idle_since=ago(25)),
            agent_instance("i-idle-40", idle_since=ago(40)),
        ),
        terminate={"i-idle-40": "idle for 40m"},
    ),
    Scenario(
        "the sweep terminates agents disconnected too long",
        fleet=fleet(agent_instance("i-gone", disconnected_since=ago(12))),
        terminate={"i-gone": "max_disconnected_period"},
    ),
    Scenario(
        "in the sweep a disconnected agent is not reaped as idle",
        fleet=fleet(agent_instance("i-gone", idle_since=ago(40), disconnected_since=ago(3))),
    ),
    Scenario(
        "the sweep does not call an unmarked agent disconnected",
        fleet=fleet(agent_instance("i-1")),
    ),
    # --- Spot requests ------------------------------------------------------------------
    Scenario(
        "an open spot request past the starting period is cancelled",
        fleet=fleet(requests=[spot_request("sir-old", created=ago(21)), spot_request("sir-ok")]),
        cancel={"sir-old": "open for 21m (max_agent_starting_period 20m)"},
    ),
    Scenario(
        "a cancelled request is not capacity for demand",
        fleet=fleet(requests=[spot_request("sir-old", created=ago(21))]),
        snapshot=pending(("t1", 4)),
        cancel={"sir-old": "max_agent_starting_period"},
        launches={"pending tasks: t1": 1},
    ),
    Scenario(
        "an unfulfillable spot request past the grace is cancelled",
        fleet=fleet(
            requests=[
                spot_request(
                    "sir-nocap",
                    created=ago(5),
                    status_code="capacity-not-available",
                    status_updated=ago(3),
                )
            ]
        ),
        cancel={"sir-nocap": "status capacity-not-available for 3m"},
    ),
    Scenario(
        "an unfulfillable spot request within the grace stays",
        fleet=fleet(
            requests=[
                spot_request(
                    "sir-nocap",
                    created=ago(5),
                    status_code="capacity-not-available",
                    status_updated=ago(1),
                )
            ]
        ),
    ),
    Scenario(
        "a spot request still being evaluated stays",
        fleet=fleet(requests=[spot_request("sir-eval", created=ago(10))]),
    ),
    Scenario(
        "a request whose spot instance runs on after cancelling is terminated",
        fleet=fleet(
            agent_instance("i-left"),
            requests=[spot_request("sir-c", state=CANCELLED_RUNNING, instance_id="i-left")],
        ),
        terminate={"i-left": "spot request sir-c was cancelled"},
    ),
    Scenario(
        "an unmanaged instance of a cancelled request is adopted, then terminated",
        fleet=fleet(
            requests=[spot_request("sir-c", state=CANCELLED_RUNNING, instance_id="i-stray")]
        ),
        adopt=(("sir-c", "i-stray"),),
        terminate={"i-stray": "spot request sir-c was cancelled"},
    ),
    Scenario(
        "the sweep adopts instances of active requests",
        fleet=fleet(requests=[spot_request("sir-a", state=ACTIVE, instance_id="i-new")]),
        adopt=(("sir-a", "i-new"),),
    ),
    # --- Over max_instances ---------------------------------------------------------------
    Scenario(
        "over max: open spot requests are cancelled first, newest first",
        pool={"max_instances": 2},
        fleet=fleet(
            agent_instance("i-1"),
            requests=[spot_request("sir-older", created=ago(5)), spot_request("sir-newer")],
        ),
        snapshot=snapshot(agents=(busy("i-1"),)),
        cancel={"sir-newer": "over max_instances (2)"},
    ),
    Scenario(
        "over max: then idle agents, before busy ones",
        pool={"max_instances": 1},
        fleet=fleet(agent_instance("i-busy"), agent_instance("i-idle", launched=ago(90))),
        snapshot=snapshot(agents=(busy("i-busy"), idle("i-idle"))),
        terminate={"i-idle": "over max_instances (1)"},
    ),
    Scenario(
        "over max: then instances that have not registered, newest first",
        pool={"max_instances": 2},
        fleet=fleet(
            agent_instance("i-busy", launched=ago(1)),
            starting("i-start-old", minutes_ago=10),
            starting("i-start-new", minutes_ago=3),
        ),
        snapshot=snapshot(agents=(busy("i-busy"),)),
        terminate={"i-start-new": "over max_instances (2)"},
    ),
    Scenario(
        "over max: then the newest busy agent",
        pool={"max_instances": 2},
        fleet=fleet(
            agent_instance("i-mid", launched=ago(hours=2)),
            agent_instance("i-new", launched=ago(hours=1)),
            agent_instance("i-old", launched=ago(hours=3)),
        ),
        snapshot=snapshot(agents=(busy("i-mid"), busy("i-new"), busy("i-old"))),
        terminate={"i-new": "over max_instances (2)"},
    ),
    Scenario(
        "over max: an active request's unmanaged instance is removed with it",
        pool={"max_instances": 1},
        fleet=fleet(
            agent_instance("i-1"),
            requests=[spot_request("sir-a", state=ACTIVE, instance_id="i-new")],
        ),
        snapshot=snapshot(agents=(busy("i-1"),)),
        cancel={"sir-a": "over max_instances (1)"},
        terminate={"i-new": "over max_instances (1)"},
        adopt=(("sir-a", "i-new"),),
    ),
    Scenario(
        "removals that already happen count toward the trim",
        pool={"max_instances": 1},
        fleet=fleet(
            agent_instance("i-busy"),
            instance("i-stopped", state=InstanceState.STOPPED),
            agent_instance("i-idle", idle_since=ago(30)),
        ),
        snapshot=snapshot(agents=(busy("i-busy"), idle("i-idle"))),
        terminate={"i-stopped": "stopped", "i-idle": "max_idle_agent_period"},
    ),
]


def plan_for(case: Scenario) -> Plan:
    return decide(pool(**case.pool), case.fleet, case.snapshot, NOW)


def launch_counts(plan: Plan, fragments: dict[str, int]) -> dict[str, int]:
    return {
        fragment: sum(fragment in launch.reason for launch in plan.launches)
        for fragment in fragments
    }


@pytest.mark.parametrize("case", SCENARIOS, ids=[case.id for case in SCENARIOS])
def test_scenario(case: Scenario) -> None:
    plan = plan_for(case)
    note = "\n".join(plan.describe())

    assert len(plan.launches) == sum(case.launches.values()), note
    assert launch_counts(plan, case.launches) == case.launches, note
    assert {t.instance_id for t in plan.terminations} == set(case.terminate), note
    for termination in plan.terminations:
        assert case.terminate[termination.instance_id] in termination.reason, note
    assert {c.request_id for c in plan.cancellations} == set(case.cancel), note
    for cancellation in plan.cancellations:
        assert case.cancel[cancellation.request_id] in cancellation.reason, note
    assert plan.adoptions == tuple(Adoption(r, i) for r, i in case.adopt), note
    assert {u.task for u in plan.unschedulable} == set(case.unschedulable), note
    for unschedulable in plan.unschedulable:
        assert case.unschedulable[unschedulable.task] in unschedulable.reason, note
    assert tuple(line.split(" ")[0] for line in plan.waiting) == case.waiting, note


@pytest.mark.parametrize("case", SCENARIOS, ids=[case.id for case in SCENARIOS])
def test_scenarios_never_exceed_max_instances(case: Scenario) -> None:
    plan = plan_for(case)
    provider = pool(**case.pool).provider
    removed = {t.instance_id for t in plan.terminations}
    cancelled = {c.request_id for c in plan.cancellations}
    managed = {i.id for i in case.fleet.instances}
    kept = sum(1 for i in case.fleet.instances if i.live and i.id not in removed)
    requests = sum(
        1
        for r in case.fleet.spot_requests
        if r.id not in cancelled
        and (
            r.state is RequestState.OPEN
            or (r.state is ACTIVE and r.instance_id not in managed | removed)
        )
    )

    assert kept + requests + len(plan.launches) <= provider.max_instances
    assert kept + requests + len(plan.launches) >= provider.min_instances


@pytest.mark.parametrize("case", SCENARIOS, ids=[case.id for case in SCENARIOS])
def test_scenarios_are_deterministic(case: Scenario) -> None:
    assert plan_for(case) == plan_for(case)


# --- Demand: which tasks each launch is for ------------------------------------------


def test_each_launch_lists_its_tasks_first_fit_decreasing() -> None:
    plan = decide(
        pool(),
        fleet(starting("i-s1")),
        pending(("a", 2), ("b", 3), ("c", 1), ("d", 4), ("e", 2)),
        NOW,
    )

    # d fills the starting instance; then b+c and a+e on two new ones.
    assert [launch.tasks for launch in plan.launches] == [("b", "c"), ("a", "e")]
    assert plan.launches[0].reason == "pending tasks: b, c"


def test_gang_launches_each_name_the_task() -> None:
    plan = decide(pool(), Fleet(), pending(("big", 8), ("t", 1)), NOW)

    assert [launch.tasks for launch in plan.launches] == [("big",), ("big",), ("t",)]


def test_eight_slot_instances_pack_differently() -> None:
    plan = decide(
        pool(instance_type="p4d.24xlarge"), Fleet(), pending(("a", 4), ("b", 4), ("c", 8)), NOW
    )
    assert [launch.tasks for launch in plan.launches] == [("c",), ("a", "b")]


def test_waiting_says_why() -> None:
    plan = decide(pool(max_instances=1), Fleet(), pending(("a", 4), ("b", 2)), NOW)

    assert plan.waiting == ("b (2 slots): pool is at max_instances (1)",)


# --- Over max_instances: the order things go in --------------------------------------

# A pool of 5: a fresh open request, an idle agent, a starting instance, two busy agents.
OVER_MAX_FLEET = fleet(
    agent_instance("i-busy-old", launched=ago(hours=3)),
    agent_instance("i-idle", launched=ago(hours=4), idle_since=ago(5)),
    starting("i-start"),
    agent_instance("i-busy-new", launched=ago(hours=1)),
    requests=[spot_request("sir-open")],
)
OVER_MAX_SNAPSHOT = snapshot(
    agents=(busy("i-busy-old"), idle("i-idle"), busy("i-busy-new")),
)
TRIM_ORDER = ["sir-open", "i-idle", "i-start", "i-busy-new", "i-busy-old"]


@pytest.mark.parametrize("max_instances", [5, 4, 3, 2, 1, 0])
def test_over_max_trims_in_order(max_instances: int) -> None:
    plan = decide(pool(max_instances=max_instances), OVER_MAX_FLEET, OVER_MAX_SNAPSHOT, NOW)

    removed = [c.request_id for c in plan.cancellations] + [
        t.instance_id for t in plan.terminations
    ]
    assert sorted(removed) == sorted(TRIM_ORDER[: 5 - max_instances])
    for action in (*plan.cancellations, *plan.terminations):
        assert action.reason == f"over max_instances ({max_instances})"
    assert plan.launches == ()


def test_over_max_in_the_sweep_uses_marks() -> None:
    # No snapshot: the idle mark says which agent is idle; the starting one goes next.
    plan = decide(pool(max_instances=2), OVER_MAX_FLEET, None, NOW)

    assert [c.request_id for c in plan.cancellations] == ["sir-open"]
    assert sorted(t.instance_id for t in plan.terminations) == ["i-idle", "i-start"]


def test_over_max_idle_agents_go_oldest_idle_first() -> None:
    plan = decide(
        pool(max_instances=1),
        fleet(
            agent_instance("i-idle-2", idle_since=ago(2)),
            agent_instance("i-idle-9", idle_since=ago(9)),
        ),
        snapshot(agents=(idle("i-idle-2"), idle("i-idle-9"))),
        NOW,
    )

    assert [t.instance_id for t in plan.terminations] == ["i-idle-9"]


# --- Spot requests --------------------------------------------------------------------


@pytest.mark.parametrize("status", sorted(UNFULFILLABLE_SPOT_STATUSES))
def test_every_unfulfillable_status_is_cancelled_after_the_grace(status: str) -> None:
    request = spot_request("sir-1", created=ago(4), status_code=status, status_updated=ago(3))

    plan = decide(pool(), fleet(requests=[request]), None, NOW)

    assert [(c.request_id, status in c.reason) for c in plan.cancellations] == [("sir-1", True)]


@pytest.mark.parametrize("status", ["capacity-not-available", "price-too-low", "bad-parameters"])
def test_the_unfulfillable_statuses_named_in_the_issue(status: str) -> None:
    assert status in UNFULFILLABLE_SPOT_STATUSES


def test_spot_grace_comes_from_settings() -> None:
    request = spot_request(
        "sir-1", created=ago(6), status_code="price-too-low", status_updated=ago(4)
    )
    settings = Settings(spot_request_grace=timedelta(minutes=5))

    assert decide(pool(), fleet(requests=[request]), None, NOW, settings).cancellations == ()
    assert decide(pool(), fleet(requests=[request]), None, NOW).cancellations != ()


def test_unfulfillable_without_a_status_time_counts_from_creation() -> None:
    request = spot_request("sir-1", created=ago(3), status_code="price-too-low")

    plan = decide(pool(), fleet(requests=[request]), None, NOW)

    assert [c.request_id for c in plan.cancellations] == ["sir-1"]


def test_adoption_comes_with_the_termination_it_allows() -> None:
    plan = decide(
        pool(),
        fleet(requests=[spot_request("sir-c", state=CANCELLED_RUNNING, instance_id="i-stray")]),
        None,
        NOW,
    )

    assert plan.adoptions == (Adoption("sir-c", "i-stray"),)
    assert [t.instance_id for t in plan.terminations] == ["i-stray"]
    assert "tag i-stray as managed: launched by spot request sir-c" in plan.describe()


# --- Marks ----------------------------------------------------------------------------


def marks_of(plan: Plan) -> dict[tuple[Mark, bool], tuple[str, ...]]:
    """Each write as (mark, set?) -> instance ids; asserts one write per (mark, value)."""
    keys = [(write.mark, write.value) for write in plan.marks]
    assert len(keys) == len(set(keys)), f"more than one write per (mark, value): {plan.marks}"
    return {(write.mark, write.value is not None): write.instance_ids for write in plan.marks}


def test_new_agents_are_marked_registered_and_idle_in_one_write_each() -> None:
    plan = decide(
        pool(),
        fleet(starting("i-1"), starting("i-2"), starting("i-3")),
        snapshot(agents=(idle("i-1"), idle("i-2"), busy("i-3"))),
        NOW,
    )

    assert plan.marks == (
        MarkWrite(Mark.REGISTERED, NOW, ("i-1", "i-2", "i-3"), "agent connected"),
        MarkWrite(Mark.IDLE_SINCE, NOW, ("i-1", "i-2"), "agent idle"),
    )


def test_marks_take_the_snapshot_time() -> None:
    seen = ago(2)
    plan = decide(pool(), fleet(starting("i-1")), snapshot(time=seen, agents=(idle("i-1"),)), NOW)

    assert {write.value for write in plan.marks} == {seen}


def test_a_snapshot_from_the_future_marks_now() -> None:
    plan = decide(
        pool(),
        fleet(starting("i-1")),
        snapshot(time=NOW + timedelta(seconds=30), agents=(idle("i-1"),)),
        NOW,
    )

    assert {write.value for write in plan.marks} == {NOW}


def test_idle_mark_is_kept_while_idle_and_removed_when_busy() -> None:
    plan = decide(
        pool(),
        fleet(
            agent_instance("i-still", idle_since=ago(5)),
            agent_instance("i-working", idle_since=ago(5)),
            agent_instance("i-working-2", idle_since=ago(8)),
        ),
        snapshot(agents=(idle("i-still"), busy("i-working", used=1), busy("i-working-2"))),
        NOW,
    )

    assert marks_of(plan) == {(Mark.IDLE_SINCE, False): ("i-working", "i-working-2")}
    assert plan.marks[0].reason == "agent busy"


def test_disconnected_mark_set_when_missing_and_removed_when_back() -> None:
    plan = decide(
        pool(),
        fleet(
            agent_instance("i-gone"),
            agent_instance("i-gone-2"),
            agent_instance("i-still-gone", disconnected_since=ago(3)),
            agent_instance("i-back", disconnected_since=ago(3)),
            starting("i-never"),
        ),
        snapshot(agents=(busy("i-back"),)),
        NOW,
    )

    assert marks_of(plan) == {
        (Mark.DISCONNECTED_SINCE, True): ("i-gone", "i-gone-2"),
        (Mark.DISCONNECTED_SINCE, False): ("i-back",),
    }


def test_settled_fleet_writes_no_marks() -> None:
    plan = decide(
        pool(),
        fleet(agent_instance("i-busy"), agent_instance("i-idle", idle_since=ago(3))),
        snapshot(agents=(busy("i-busy"), idle("i-idle"))),
        NOW,
    )

    assert plan.marks == ()
    assert plan.changes_nothing


def test_the_sweep_writes_no_marks() -> None:
    plan = decide(
        pool(),
        fleet(starting("i-1"), agent_instance("i-2"), agent_instance("i-3", idle_since=ago(1))),
        None,
        NOW,
    )

    assert plan.marks == ()
    assert plan.changes_nothing


def test_terminated_instances_get_no_marks() -> None:
    plan = decide(
        pool(),
        fleet(
            agent_instance("i-idle", idle_since=ago(30)),
            instance("i-stopped", state=InstanceState.STOPPED, registered=ago(30)),
        ),
        snapshot(agents=(idle("i-idle"),)),
        NOW,
    )

    assert {t.instance_id for t in plan.terminations} == {"i-idle", "i-stopped"}
    assert plan.marks == ()


# --- Keys, determinism, purity -----------------------------------------------------------


def test_launch_key_is_pool_and_seq_for_a_snapshot() -> None:
    plan = decide(pool(), Fleet(), snapshot(seq=42, pending=[task("t", 1)]), NOW)
    assert plan.launch_key == "gpu:42"
    assert plan.pool == "gpu"


def test_sweep_launch_key_changes_once_a_minute() -> None:
    key = decide(pool(), Fleet(), None, NOW).launch_key
    same_minute = NOW.replace(second=59)
    next_minute = NOW.replace(second=0) + timedelta(minutes=1)

    assert key.startswith("gpu:")
    assert key != "gpu:7"
    assert decide(pool(), Fleet(), None, same_minute).launch_key == key
    assert decide(pool(), Fleet(), None, next_minute).launch_key != key


def test_same_inputs_same_plan_for_a_busy_pool() -> None:
    def run() -> Plan:
        return decide(
            pool(max_instances=4, min_instances=1),
            OVER_MAX_FLEET,
            snapshot(
                pending=[task("b", 2), task("a", 2), task("c", 3)],
                agents=(busy("i-busy-old"), idle("i-idle")),
            ),
            NOW,
        )

    assert run() == run()
    assert run().describe() == run().describe()


def test_core_imports_no_cloud_sdk() -> None:
    code = (
        "import sys\n"
        "import dynagent.core.config, dynagent.core.decide, dynagent.core.durations\n"
        "import dynagent.core.fleet, dynagent.core.gpus, dynagent.core.packing\n"
        "import dynagent.core.plan, dynagent.core.snapshot\n"
        # Bare 'google' and 'google.cloud' are namespace packages that a .pth file of
        # functions-framework imports at start-up; the SDKs are what must stay out.
        "sdks = ('boto3', 'botocore', 'googleapiclient', 'google.cloud.compute_v1', "
        "'google.cloud.pubsub_v1', 'google.api_core', 'functions_framework')\n"
        "clouds = sorted(m for m in sys.modules if m.startswith(sdks))\n"
        "print(','.join(clouds))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )

    assert result.stdout.strip() == ""


def test_launch_key_for_the_first_snapshot() -> None:
    assert decide(pool(), Fleet(), snapshot(seq=0), NOW).launch_key == "gpu:0"


def test_an_idle_agent_a_gang_counts_on_is_not_reaped_by_the_sweep_either() -> None:
    gang_pool = pool(max_instances=2)
    waiting = fleet(agent_instance("i-idle", idle_since=ago(15)))
    plan = decide(gang_pool, waiting, pending(("big", 8), agents=(idle("i-idle"),)), NOW)

    [write] = [w for w in plan.marks if w.mark is Mark.IDLE_SINCE]
    assert (write.instance_ids, write.value, write.reason) == (
        ("i-idle",),
        NOW,
        "pending tasks count on it",
    )
    # The sweep five minutes later reads the mark: not idle for 20m yet.
    marked = fleet(agent_instance("i-idle", idle_since=write.value))
    later = decide(gang_pool, marked, None, NOW + timedelta(minutes=6))
    assert later.terminations == ()


def test_a_million_tasks_alike_wait_in_one_line() -> None:
    """Tasks of one size waiting for one reason are counted, not listed one a line."""
    tasks = [(f"trial-{n}", 4) for n in range(100_000)] + [
        ("huge", 2**31 - 1),
        ("huger", 2**31 - 1),
    ]
    plan = decide(pool(), Fleet(), snapshot(pending=tasks), NOW)
    lines = plan.describe()
    assert len(lines) == 5 + 2  # a launch for each of max_instances' 5, then two lines
    assert lines[-2].startswith("unschedulable 2 tasks of 2147483647 slots (huge, huger): ")
    assert lines[-1].startswith("waiting: 99,995 tasks of 4 slots (trial-5, trial-6, ")
    assert lines[-1].endswith("and 99975 more): pool is at max_instances (5)")
    single = decide(pool(), Fleet(), snapshot(pending=tasks[:6]), NOW)
    assert single.waiting == ("trial-5 (4 slots): pool is at max_instances (5)",)
