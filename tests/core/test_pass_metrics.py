"""The metric points of one pass, from plain data: what each metric counts, and when."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from dynagent.core.decide import decide
from dynagent.core.fleet import Instance, InstanceState
from dynagent.core.plan import Launch, Plan, Start, Stop, Termination
from dynagent.core.snapshot import Agent, Snapshot
from dynagent.report.metrics import BY_NAME, CATALOG, Point, point
from dynagent.report.pass_metrics import dead_letter_point, pass_points
from dynagent.run.provider import LaunchErrorKind, LaunchResult, StartResult
from dynagent.run.reconcile import Outcome
from tests.builders import (
    NOW,
    POOL_NAME,
    agent_instance,
    ago,
    fleet,
    instance,
    pool,
    snapshot,
    starting,
)

P38 = 12.24  # p3.8xlarge on demand, dollars per hour (dynagent.core.prices)


def values(points: list[Point]) -> dict[tuple[str, ...], float]:
    """Each point's value by (name, other dimension values...)."""
    found: dict[tuple[str, ...], float] = {}
    for item in points:
        key = (item.name, *(value for _, value in item.dimensions))
        assert key not in found, f"{key} emitted twice"
        assert item.pool == POOL_NAME
        found[key] = item.value
    return found


def snap(pending: list[tuple[str, int]] = (), agents: list[Agent] = (), age: float = 0) -> Snapshot:  # type: ignore[assignment]
    return snapshot(pending=pending, agents=agents, time=NOW - timedelta(seconds=age))


def test_a_snapshot_pass_reports_demand_agents_fleet_and_what_it_did() -> None:
    the_pool = pool(max_instances=5)
    observed = fleet(
        agent_instance("i-idle", idle_since=ago(2)),
        agent_instance("i-busy"),
        agent_instance("i-drain"),
        starting("i-new"),
        instance("i-gone", state=InstanceState.STOPPED),
    )
    snapshot = snap(
        pending=[("a", 4), ("b", 4), ("c", 4), ("d", 4), ("cmd", 0)],
        agents=[
            Agent(id="i-idle", slots=4, used_slots=0),
            Agent(id="i-busy", slots=4, used_slots=4),
            Agent(id="i-drain", slots=4, used_slots=0, draining=True),
        ],
        age=42,
    )
    plan = decide(the_pool, observed, snapshot, NOW)
    planned = [launch.cause for launch in plan.launches]
    # Two tasks go where there is room already (the idle agent, the booting instance; a
    # draining agent takes none), one to a new machine, one waits at max_instances.
    assert planned == ["demand"]
    outcome = Outcome(
        POOL_NAME,
        plan,
        LaunchResult(started=("i-1",)),
        seq=7,
        fleet=observed,
        snapshot=snapshot,
        duration=0.25,
    )

    assert values(pass_points(outcome, the_pool, NOW)) == {
        ("SnapshotAge",): 42.0,
        ("SnapshotsApplied",): 1,
        ("PendingSlots",): 16,
        ("Agents", "idle"): 1,
        ("Agents", "busy"): 1,
        ("Agents", "draining"): 1,
        ("PendingAtMax",): 1,
        ("ReconcileDuration",): 250.0,
        ("Instances", "starting"): 1,
        ("Instances", "running"): 3,
        ("Instances", "stopping"): 0,
        ("Instances", "stopped"): 1,
        # The stopped one costs nothing; the starting one does.
        ("CostPerHour",): round(4 * P38, 4),
        ("Launches", "demand"): 1,
        ("Terminations", "stopped"): 1,
    }


def test_a_sweep_reports_no_demand_nor_agents_nor_snapshot_age() -> None:
    the_pool = pool()
    observed = fleet(agent_instance("i-old", idle_since=ago(30)), agent_instance("i-b"))
    plan = decide(the_pool, observed, None, NOW)
    outcome = Outcome(POOL_NAME, plan, None, fleet=observed, duration=0.004)

    assert values(pass_points(outcome, the_pool, NOW)) == {
        ("ReconcileDuration",): 4.0,
        ("Instances", "starting"): 0,
        ("Instances", "running"): 2,
        ("Instances", "stopping"): 0,
        ("Instances", "stopped"): 0,
        ("CostPerHour",): round(2 * P38, 4),
        ("Terminations", "idle"): 1,
    }


def test_launches_count_what_the_cloud_started_by_the_plans_order() -> None:
    plan = Plan(
        POOL_NAME,
        "gpu:7",
        NOW,
        launches=(
            Launch("pending", cause="demand"),
            Launch("min", cause="min_instances"),
            Launch("min", cause="min_instances"),
            Launch("warm", cause="headroom"),
        ),
    )
    started = Outcome(POOL_NAME, plan, LaunchResult(started=("i-1", "i-2", "i-3")))
    assert values(pass_points(started, None, NOW)) == {
        ("Launches", "demand"): 1,
        ("Launches", "min_instances"): 2,
    }
    # A launch an earlier pass made (same token) was counted by that pass.
    replayed = Outcome(POOL_NAME, plan, LaunchResult(replayed=True))
    assert values(pass_points(replayed, None, NOW)) == {}


def test_launch_errors_count_each_refusal_once() -> None:
    plan = Plan(POOL_NAME, "gpu:7", NOW, launches=(Launch("pending"),) * 3)
    # Two offerings out of capacity and the fallback's summary of them: two errors.
    exhausted = LaunchResult(
        error="no capacity for 3 machine(s): tried a, b",
        error_kind=LaunchErrorKind.CAPACITY,
        unavailable=("a", "b"),
    )
    assert values(pass_points(Outcome(POOL_NAME, plan, exhausted), None, NOW)) == {
        ("LaunchErrors", "capacity"): 2
    }
    # One offering out of capacity, then a quota on the next: one of each.
    quota = LaunchResult(
        started=("i-1",),
        error="VcpuLimitExceeded: You have requested more vCPU",
        error_kind=LaunchErrorKind.QUOTA,
        unavailable=("a",),
    )
    assert values(pass_points(Outcome(POOL_NAME, plan, quota), None, NOW)) == {
        ("Launches", "demand"): 1,
        ("LaunchErrors", "capacity"): 1,
        ("LaunchErrors", "quota"): 1,
    }


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        (LaunchErrorKind.CAPACITY, "capacity"),
        (LaunchErrorKind.QUOTA, "quota"),
        (LaunchErrorKind.THROTTLED, "throttling"),
        (LaunchErrorKind.OTHER, "other"),
        (None, "other"),
    ],
)
def test_launch_errors_are_counted_by_the_kind_their_adapter_gave(
    kind: LaunchErrorKind | None, code: str
) -> None:
    # The metrics read the kind, never the message: the words here mean nothing.
    plan = Plan(POOL_NAME, "gpu:7", NOW, launches=(Launch("pending"),))

    def errors(launch: LaunchResult) -> dict[tuple[str, ...], float]:
        return values(pass_points(Outcome(POOL_NAME, plan, launch), None, NOW))

    assert errors(LaunchResult(error="words of a cloud", error_kind=kind)) == {
        ("LaunchErrors", code): 1
    }
    # A launch that only sums up the offerings refused for capacity counts those.
    summed = LaunchResult(error="x", error_kind=kind, unavailable=("a@1/spot", "b@1/spot"))
    expected = {("LaunchErrors", "capacity"): 2}
    if kind is not LaunchErrorKind.CAPACITY:
        expected[("LaunchErrors", code)] = expected.get(("LaunchErrors", code), 0) + 1
    assert errors(summed) == expected


def test_pending_at_max_is_set_only_when_max_instances_holds_demand_back() -> None:
    the_pool = pool(max_instances=1)
    snapshot = snap(pending=[("a", 4), ("b", 4)])
    plan = decide(the_pool, fleet(), snapshot, NOW)
    assert len(plan.launches) == 1 and plan.waiting
    outcome = Outcome(POOL_NAME, plan, LaunchResult(started=("i-1",)), snapshot=snapshot)
    assert values(pass_points(outcome, the_pool, NOW))[("PendingAtMax",)] == 1

    # A task larger than any machine waits too, but not for max_instances.
    roomy = pool(max_instances=5)
    too_big = snap(pending=[("huge", 6)])
    plan = decide(roomy, fleet(), too_big, NOW)
    outcome = Outcome(POOL_NAME, plan, None, snapshot=too_big)
    assert values(pass_points(outcome, roomy, NOW))[("PendingAtMax",)] == 0


def test_a_skipped_snapshot_reports_its_age_and_a_failed_pass_nothing() -> None:
    stale = snap(age=700)
    skipped = Outcome(POOL_NAME, seq=7, snapshot=stale, skipped="too old")
    assert values(pass_points(skipped, pool(), NOW)) == {("SnapshotAge",): 700.0}
    superseded = Outcome(POOL_NAME, seq=6, skipped="a newer snapshot is in the batch")
    assert pass_points(superseded, pool(), NOW) == []
    failed = Outcome(POOL_NAME, error="ClientError: boom")
    assert pass_points(failed, pool(), NOW) == []


def test_a_point_must_be_in_the_catalog() -> None:
    assert dead_letter_point("unknown").labels() == {"pool": "unknown"}
    assert point("Agents", 1, "gpu", state="idle").unit == "Count"
    with pytest.raises(ValueError, match="not in the metrics catalog"):
        point("Agent", 1, "gpu", state="idle")
    with pytest.raises(ValueError, match="dimensions"):
        point("Agents", 1, "gpu")
    with pytest.raises(ValueError, match="not one of"):
        point("Agents", 1, "gpu", state="asleep")
    with pytest.raises(ValueError, match="not a machine type"):
        point("StoppedInstances", 1, "gpu", instance_type="i-0123 (stopped)")
    assert point("StoppedInstances", 1, "gpu", instance_type="n1-standard-32").labels() == {
        "pool": "gpu",
        "instance_type": "n1-standard-32",
    }
    # Every dimension other than pool lists its values, or is a machine type the
    # emitter bounds by the pool's config: an emitter can check them.
    assert all(spec.values or spec.machine_types for spec in CATALOG if len(spec.dimensions) > 1)
    assert set(BY_NAME) == {spec.name for spec in CATALOG}


def _stopped(instance_id: str, kind: str, state: InstanceState = InstanceState.STOPPED) -> Instance:
    return replace(instance(instance_id, state=state), instance_type=kind)


WARM = {"max_stopped": 4}


def test_the_warm_pool_reports_the_stopped_machines_it_leaves_and_what_it_did() -> None:
    offerings = {"instance_types": ["g5.xlarge", "g5.12xlarge"]}
    the_pool = pool(instance_type="g5.12xlarge", offerings=offerings, warm_pool=WARM)
    observed = fleet(
        _stopped("i-kept", "g5.xlarge"),
        _stopped("i-stopping", "g5.12xlarge", InstanceState.STOPPING),
        _stopped("i-deleted", "g5.xlarge"),
        _stopped("i-started", "g5.xlarge"),
        _stopped("i-refused", "g5.12xlarge"),
        _stopped("i-old-type", "p3.8xlarge"),  # a type the pool no longer offers
        replace(agent_instance("i-idle", idle_since=ago(30)), instance_type="g5.xlarge"),
    )
    cold = Launch("exp-2 on i-refused's type elsewhere", ("exp-2",), cause="demand")
    plan = Plan(
        POOL_NAME,
        "gpu:7",
        NOW,
        terminations=(Termination("i-deleted", "drifted", cause="drifted"),),
        stops=(Stop("i-idle", "idle for 30m: kept for the warm pool"),),
        starts=(Start("i-started", "exp-1", cold), Start("i-refused", "exp-2", cold)),
    )
    start = StartResult(
        started=("i-started",),
        refused=(("i-refused", "InsufficientInstanceCapacity: none", LaunchErrorKind.CAPACITY),),
    )
    # The refused start's cold launch started a new machine in the same pass.
    outcome = Outcome(
        POOL_NAME, plan, LaunchResult(started=("i-new",)), fleet=observed, start=start
    )
    found = values(pass_points(outcome, the_pool, NOW))
    disk = the_pool.provider.stopped_disk_per_hour
    assert disk > 0
    warm = {k: v for k, v in found.items() if k[0] not in ("Instances", "CostPerHour")}
    assert warm == {
        # Kept: i-kept and i-idle (stopped now); i-stopping and i-refused; i-old-type.
        ("StoppedInstances", "g5.xlarge"): 2,
        ("StoppedInstances", "g5.12xlarge"): 2,
        ("StoppedInstances", "other"): 1,
        ("StoppedDiskCost",): round(5 * disk, 4),
        ("Stops",): 1,
        ("Starts",): 1,
        ("StartsRefused", "capacity"): 1,
        ("Terminations", "drifted"): 1,
        ("Launches", "demand"): 1,
    }


def test_stopped_gauges_are_zeros_for_a_warm_pool_and_absent_without_one() -> None:
    empty = Plan(POOL_NAME, "gpu:7", NOW)
    warm = pool(warm_pool=WARM)
    found = values(pass_points(Outcome(POOL_NAME, empty, fleet=fleet()), warm, NOW))
    assert found[("StoppedInstances", "p3.8xlarge")] == 0
    assert found[("StoppedDiskCost",)] == 0
    cold = pool()
    found = values(pass_points(Outcome(POOL_NAME, empty, fleet=fleet()), cold, NOW))
    assert not {"StoppedInstances", "StoppedDiskCost"} & {k[0] for k in found}
    # A pool without a warm pool that still has stopped machines (one turned off, a
    # machine stopped by hand) shows them until they are gone: they bill their disks.
    left = fleet(instance("i-left", state=InstanceState.STOPPED))
    found = values(pass_points(Outcome(POOL_NAME, empty, fleet=left), cold, NOW))
    assert found[("StoppedInstances", "p3.8xlarge")] == 1  # of unknown type: the pool's
    assert found[("StoppedDiskCost",)] == round(cold.provider.stopped_disk_per_hour, 4)


@pytest.mark.parametrize("kind", list(LaunchErrorKind))
def test_refused_starts_are_counted_by_the_kind_their_adapter_gave(kind: LaunchErrorKind) -> None:
    plan = Plan(POOL_NAME, "gpu:7", NOW)
    refused = StartResult(refused=(("i-1", "words", kind), ("i-2", "words", kind)))
    assert values(pass_points(Outcome(POOL_NAME, plan, start=refused), None, NOW)) == {
        ("StartsRefused", kind.value): 2
    }
