"""The warm pool in the decision: idle agents stopped instead of terminated while there
is room, stopped machines started for pending tasks before anything launches, and the
stopped kept within max_stopped, max_stopped_period and the pool's boot config."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from dynagent.core.boot.drift import boot_config
from dynagent.core.config import Pool
from dynagent.core.decide import decide
from dynagent.core.fleet import Instance, InstanceState, Mark
from dynagent.core.plan import Plan
from tests.builders import NOW, agent_instance, ago, fleet, idle, pool, snapshot, starting

TYPE = "p3.8xlarge"  # the builders' pool: 4 slots


def warm_pool(max_stopped: int = 2, **fields: object) -> Pool:
    return pool(warm_pool={"max_stopped": max_stopped, **fields}, max_instances=3)


def stopped(
    instance_id: str, of: Pool, *, hours_ago: float = 1, config: str | None = None
) -> Instance:
    """A machine the warm pool stopped ``hours_ago``, with the pool's boot config now."""
    return Instance(
        id=instance_id,
        state=InstanceState.STOPPED,
        launched_at=ago(hours=hours_ago + 2),
        marks={Mark.STOPPED_AT: ago(hours=hours_ago)},
        instance_type=TYPE,
        boot_config=boot_config(of, {}) if config is None else config,
    )


def idle_agent(instance_id: str, **changes: object) -> Instance:
    agent = agent_instance(instance_id, idle_since=ago(30))
    return replace(agent, **({"instance_type": TYPE} | changes))


def test_an_idle_agent_past_its_period_is_stopped_and_its_agent_marks_cleared() -> None:
    of = warm_pool()
    plan = decide(of, fleet(idle_agent("i-idle")), snapshot(agents=[idle("i-idle")]), NOW)
    assert [s.instance_id for s in plan.stops] == ["i-idle"]
    assert "idle for 30m" in plan.stops[0].reason and "warm pool" in plan.stops[0].reason
    assert plan.terminations == ()
    writes = {(w.mark, w.value) for w in plan.marks if w.instance_ids == ("i-idle",)}
    assert writes == {
        (Mark.STOPPED_AT, NOW),
        (Mark.REGISTERED, None),
        (Mark.IDLE_SINCE, None),
        (Mark.DISCONNECTED_SINCE, None),
    }
    assert plan.boot_config == boot_config(of, {})
    assert "stop i-idle: " in "\n".join(plan.describe())


def test_without_a_warm_pool_the_idle_agent_is_terminated_and_a_stopped_one_too() -> None:
    of = pool(max_instances=3)
    machines = fleet(idle_agent("i-idle"), stopped("i-old", of))
    plan = decide(of, machines, snapshot(agents=[idle("i-idle")]), NOW)
    assert plan.stops == ()
    assert {t.instance_id for t in plan.terminations} == {"i-idle", "i-old"}


def test_only_as_many_are_stopped_as_the_warm_pool_has_room_for() -> None:
    of = warm_pool(max_stopped=2)
    machines = fleet(stopped("i-s1", of), idle_agent("i-a"), idle_agent("i-b"))
    plan = decide(of, machines, snapshot(agents=[idle("i-a"), idle("i-b")]), NOW)
    assert len(plan.stops) == 1
    assert len(plan.terminations) == 1
    assert {plan.stops[0].instance_id, plan.terminations[0].instance_id} == {"i-a", "i-b"}


def test_a_spot_instance_on_ec2_is_terminated_for_it_cannot_be_stopped() -> None:
    of = warm_pool()
    spot = idle_agent("i-spot", spot=True)
    plan = decide(of, fleet(spot), snapshot(agents=[idle("i-spot")]), NOW)
    assert plan.stops == ()
    assert [t.instance_id for t in plan.terminations] == ["i-spot"]


def test_pending_work_starts_a_stopped_machine_and_launches_nothing() -> None:
    of = warm_pool()
    plan = decide(of, fleet(stopped("i-s1", of)), snapshot(pending=[("exp-1", 4)]), NOW)
    assert [s.instance_id for s in plan.starts] == ["i-s1"]
    assert plan.launches == ()
    # Its cold cover is the launch it replaced: the same tasks, on the same shape.
    cold = plan.starts[0].cold
    assert cold.tasks == ("exp-1",)
    assert cold.offering is not None and cold.offering.instance_type == TYPE
    assert plan.describe()[0] == "start i-s1: pending tasks: exp-1: started, not launched"


def test_only_the_stopped_machines_the_tasks_need_are_started() -> None:
    of = warm_pool(max_stopped=3)
    machines = fleet(*(stopped(f"i-s{n}", of, hours_ago=n) for n in (1, 2, 3)))
    plan = decide(of, machines, snapshot(pending=[("a", 4), ("b", 2), ("c", 2)]), NOW)
    # Two machines hold the tasks; the most recently stopped are the first offered.
    assert [s.instance_id for s in plan.starts] == ["i-s1", "i-s2"]
    assert plan.launches == ()


def test_more_work_than_the_stopped_machines_hold_launches_the_rest() -> None:
    of = warm_pool(max_stopped=1)
    plan = decide(of, fleet(stopped("i-s1", of)), snapshot(pending=[("a", 4), ("b", 4)]), NOW)
    assert [s.instance_id for s in plan.starts] == ["i-s1"]
    assert len(plan.launches) == 1


def test_a_started_machine_is_capacity_on_its_way_so_a_replay_launches_nothing() -> None:
    of = warm_pool()
    # After the start: running again, its agent's marks cleared when it was stopped.
    back = replace(starting("i-s1", minutes_ago=1), instance_type=TYPE)
    plan = decide(of, fleet(back), snapshot(pending=[("exp-1", 4)]), NOW)
    assert plan.launches == () and plan.starts == ()


def test_a_stopped_machine_of_another_boot_config_is_deleted_never_started() -> None:
    of = warm_pool()
    drifted = stopped("i-old", of, config="0123456789ab")
    plan = decide(of, fleet(drifted), snapshot(pending=[("exp-1", 4)]), NOW)
    assert plan.starts == ()
    assert len(plan.launches) == 1
    [removed] = plan.terminations
    assert (removed.instance_id, removed.cause) == ("i-old", "drifted")
    assert "boot config 0123456789ab" in removed.reason


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"agent_docker_image": "determinedai/determined-agent:0.38.1"}, "agent image"),
        ({"image_id": "ami-0fedcba9876543210"}, "image"),
        ({"master_url": "http://10.0.0.9:8080"}, "master address"),
        ({"startup_script": "echo hello"}, "boot script"),
        ({"iam_instance_profile_arn": "arn:aws:iam::1:instance-profile/p"}, "profile"),
    ],
)
def test_each_part_of_the_boot_config_changes_its_hash(change: dict[str, str], field: str) -> None:
    assert boot_config(pool(**change), {}) != boot_config(pool(), {}), field


def test_the_hash_is_unknown_while_the_master_alias_is_unresolved() -> None:
    aliased = pool(master_url="http://local-ipv4:8080")
    assert boot_config(aliased, {}) == ""
    assert boot_config(aliased, {"local-ipv4": "10.0.0.5"}) == boot_config(
        pool(master_url="http://10.0.0.5:8080"), {}
    )


def test_a_machine_stopped_past_its_period_is_deleted() -> None:
    of = warm_pool(max_stopped_period="24h")
    plan = decide(of, fleet(stopped("i-old", of, hours_ago=25)), None, NOW)
    [removed] = plan.terminations
    assert removed.instance_id == "i-old"
    assert removed.reason == "stopped for 25h (warm_pool.max_stopped_period 24h)"


def test_beyond_max_stopped_the_longest_stopped_go() -> None:
    of = warm_pool(max_stopped=1)
    plan = decide(of, fleet(stopped("i-new", of), stopped("i-old", of, hours_ago=5)), None, NOW)
    assert [t.instance_id for t in plan.terminations] == ["i-old"]
    assert "beyond warm_pool.max_stopped (1)" in plan.terminations[0].reason


def test_a_stopping_machine_is_kept_and_counted_but_not_started() -> None:
    of = warm_pool(max_stopped=1)
    going = replace(stopped("i-going", of), state=InstanceState.STOPPING)
    machines = fleet(going, idle_agent("i-idle"))
    plan = decide(of, machines, snapshot(pending=[], agents=[idle("i-idle")]), NOW)
    assert plan.stops == () and plan.starts == ()
    assert [t.instance_id for t in plan.terminations] == ["i-idle"]  # no room left


def test_at_the_cap_a_stopped_machine_is_not_started() -> None:
    of = warm_pool()  # max_instances 3
    busy = [replace(agent_instance(f"i-b{n}"), instance_type=TYPE) for n in range(3)]
    agents = [(f"i-b{n}", 4, 4) for n in range(3)]
    plan = decide(
        of, fleet(*busy, stopped("i-s1", of)), snapshot(pending=[("a", 4)], agents=agents), NOW
    )
    assert plan.starts == () and plan.launches == ()


def test_a_preempted_stopped_machine_is_an_interruption_then_kept() -> None:
    of = warm_pool()
    preempted = replace(stopped("i-p", of), preempted=True, marks={}, spot=True)
    plan = decide(of, fleet(preempted), None, NOW)
    assert [(i.instance_id, i.kind) for i in plan.interruptions] == [("i-p", "preempted")]
    assert plan.terminations == ()
    # Marked stopped now: the adapter no longer reads it as preempted, so it counts once.
    writes = {(w.mark, w.value) for w in plan.marks if w.instance_ids == ("i-p",)}
    assert (Mark.STOPPED_AT, NOW) in writes
    # Without a warm pool it goes, as an interruption.
    plan = decide(pool(max_instances=3), fleet(preempted), None, NOW)
    assert [t.cause for t in plan.terminations] == ["interrupted"]


def test_a_stopped_machine_of_a_type_no_longer_offered_is_deleted() -> None:
    of = warm_pool()
    other = replace(stopped("i-s1", of), instance_type="p3.2xlarge")
    plan: Plan = decide(of, fleet(other), snapshot(pending=[("a", 1)]), NOW)
    assert [t.cause for t in plan.terminations] == ["drifted"]
    assert plan.starts == () and len(plan.launches) == 1


def test_a_machine_stopped_without_our_mark_counts_from_its_launch() -> None:
    of = warm_pool(max_stopped_period="2h")
    plain = replace(stopped("i-s1", of), marks={}, launched_at=NOW - timedelta(hours=3))
    plan = decide(of, fleet(plain), None, NOW)
    assert [t.instance_id for t in plan.terminations] == ["i-s1"]


def test_validate_explains_the_warm_pool_and_its_disks_cost() -> None:
    from dynagent.cli.main import describe_config
    from tests.builders import config, pool_entry

    lines = describe_config(config(pool_entry(warm_pool={"max_stopped": 3}, root_volume_size=500)))
    [said] = [line for line in lines if "warm pool" in line]
    # 500 GB of gp3 at $0.08 a GB-month, 730 hours a month: $0.055 an hour, $3.95 a day for 3.
    assert "up to 3 stopped machines, each kept 168h at most" in said
    assert "$0.055/h, $3.95 a day for all" in said
    assert not [line for line in describe_config(config(pool_entry())) if "warm pool" in line]


def test_while_the_master_is_unknown_no_stopped_machine_is_started() -> None:
    of = pool(warm_pool={"max_stopped": 2}, master_url="http://local-ipv4:8080")
    machine = stopped("i-s1", of, config="0123456789ab")
    plan = decide(of, fleet(machine), snapshot(pending=[("exp-1", 4)]), NOW)
    assert plan.starts == () and plan.launches == ()
    assert any("launches held" in note for note in plan.waiting)


def one_and_eight(max_stopped: int) -> Pool:
    """1- and 8-GPU machines, as an admin writes it (the 8-GPU type its instance_type)."""
    return pool(
        instance_type="p3.16xlarge",
        offerings={"instance_types": ["p3.2xlarge", "p3.16xlarge"]},
        warm_pool={"max_stopped": max_stopped},
        max_instances=4,
    )


def test_a_full_warm_pool_keeps_the_shapes_the_work_uses_most() -> None:
    of = one_and_eight(max_stopped=1)
    small = replace(stopped("i-small", of), instance_type="p3.2xlarge")
    big_idle = idle_agent("i-big", instance_type="p3.16xlarge")
    big_busy = replace(agent_instance("i-busy"), instance_type="p3.16xlarge")
    machines = fleet(small, big_idle, big_busy)
    agents = [idle("i-big", 8), ("i-busy", 8, 8)]
    plan = decide(of, machines, snapshot(agents=agents), NOW)
    # The work runs on 8-GPU machines: the idle one takes the stopped 1-GPU one's place.
    assert [s.instance_id for s in plan.stops] == ["i-big"]
    [replaced] = plan.terminations
    assert replaced.instance_id == "i-small" and "uses more" in replaced.reason
    # Alike machines are not swapped: the one stopped already stays, the idle one goes.
    alike = replace(stopped("i-old", of), instance_type="p3.16xlarge")
    plan = decide(of, fleet(alike, big_idle, big_busy), snapshot(agents=agents), NOW)
    assert plan.stops == () and [t.instance_id for t in plan.terminations] == ["i-big"]


def test_small_tasks_go_to_stopped_small_machines_rather_than_a_new_large_one() -> None:
    of = one_and_eight(max_stopped=8)
    small = [replace(stopped(f"i-s{n}", of), instance_type="p3.2xlarge") for n in range(8)]
    ones = [(f"t{n}", 1) for n in range(8)]
    plan = decide(of, fleet(*small), snapshot(pending=ones), NOW)
    # The packing covers them with one 8-GPU machine, as cheap as eight 1-GPU ones: the
    # eight stopped machines start instead.
    assert len(plan.starts) == 8 and plan.launches == ()
    # An 8-GPU task is not split across machines: it launches its 8-GPU machine.
    plan = decide(of, fleet(*small), snapshot(pending=[("big", 8)]), NOW)
    assert plan.starts == () and len(plan.launches) == 1
