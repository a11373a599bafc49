"""The decision with reservations: free places used first, idle agents in them kept,
machines about to be taken back at a hard end counted out."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from dynagent.core.config import Pool
from dynagent.core.decide import decide
from dynagent.core.drain_notices import InvalidNotice, notice_message, parse_notice
from dynagent.core.fleet import Fleet, InstanceState, Mark, Reservation, ReservationKind
from dynagent.core.offerings import Purchase
from dynagent.core.plan import DrainNotice
from dynagent.core.reservations import reserved_offering
from tests.builders import NOW, agent_instance, ago, idle, instance, pool, snapshot

SUBNET_A, SUBNET_B = "subnet-0a", "subnet-0b"
# Work for six whole p4d.24xlarge machines.
SIX = [(f"exp-{n}.trial-1", 8) for n in range(6)]


def p4d_pool(**overrides: Any) -> Pool:
    """A p4d pool as an admin writes it: max_instances, two subnets, one reservation."""
    fields: dict[str, Any] = {
        "instance_type": "p4d.24xlarge",
        "max_instances": 10,
        "mixed_gpu_models": True,
        "offerings": {
            "instance_types": ["p4d.24xlarge", "p3.16xlarge"],
            "subnet_ids": [SUBNET_A, SUBNET_B],
            "prices": {"p4d.24xlarge": 32.77, "p3.16xlarge": 24.48},
        },
        "reservations": ["cr-0123456789abcdef0"],
    }
    fields.update(overrides)
    return pool(**fields)


def odcr(available: int = 4, **overrides: object) -> Reservation:
    fields: dict[str, object] = {
        "id": "cr-0123456789abcdef0",
        "kind": ReservationKind.TARGETED,
        "instance_type": "p4d.24xlarge",
        "zone": SUBNET_B,
        "place": "us-east-1b",
        "total": 4,
        "available": available,
    }
    fields.update(overrides)
    return Reservation(**fields)  # type: ignore[arg-type]


def test_work_for_six_machines_fills_the_reservation_then_buys_two() -> None:
    plan = decide(p4d_pool(), Fleet(reservations=(odcr(),)), snapshot(pending=SIX), NOW)

    offerings = [launch.offering for launch in plan.launches]
    reserved = [o for o in offerings if o is not None and o.purchase is Purchase.RESERVED]
    assert len(plan.launches) == 6
    assert [(o.reservation, o.zone, o.instance_type) for o in reserved] == [
        ("cr-0123456789abcdef0", SUBNET_B, "p4d.24xlarge")
    ] * 4
    # The rest on the cheapest 8-GPU machine the pool buys.
    others = [o for o in offerings if o is not None and o.purchase is not Purchase.RESERVED]
    assert [o.instance_type for o in others] == ["p3.16xlarge"] * 2
    # Each reserved launch names its task, and buys a machine if the place is gone.
    tasks = [task for launch in plan.launches for task in launch.tasks]
    assert sorted(tasks) == sorted(name for name, _ in SIX)
    assert plan.launches[0].offerings[1].purchase is Purchase.ON_DEMAND
    assert plan.launches[0].offerings[1].instance_type == "p4d.24xlarge"


def test_small_tasks_go_into_a_free_reserved_machine_before_a_cheaper_new_one() -> None:
    plan = decide(
        p4d_pool(), Fleet(reservations=(odcr(),)), snapshot(pending=[("a", 2), ("b", 2)]), NOW
    )

    assert len(plan.launches) == 1
    (launch,) = plan.launches
    assert launch.offering is not None and launch.offering.reservation == "cr-0123456789abcdef0"
    assert sorted(launch.tasks) == ["a", "b"]


def test_places_taken_by_running_machines_are_not_launched_into() -> None:
    plan = decide(p4d_pool(), Fleet(reservations=(odcr(available=1),)), snapshot(pending=SIX), NOW)

    reserved = [la for la in plan.launches if la.offering and la.offering.reservation]
    assert len(reserved) == 1
    assert len(plan.launches) == 6


def test_places_stay_within_max_instances() -> None:
    plan = decide(
        p4d_pool(max_instances=3), Fleet(reservations=(odcr(),)), snapshot(pending=SIX), NOW
    )

    assert len(plan.launches) == 3
    assert all(la.offering and la.offering.reservation for la in plan.launches)


def test_a_reservation_not_started_or_in_a_zone_the_pool_lacks_is_not_used() -> None:
    later = odcr(starts_at=NOW + timedelta(hours=1), kind=ReservationKind.CAPACITY_BLOCK)
    elsewhere = odcr(matched=False)
    for reservation in (later, elsewhere):
        plan = decide(p4d_pool(), Fleet(reservations=(reservation,)), snapshot(pending=SIX), NOW)
        assert len(plan.launches) == 6
        assert not any(la.offering and la.offering.reservation for la in plan.launches)


def test_a_capacity_block_is_launched_into_in_its_own_market() -> None:
    block = odcr(
        kind=ReservationKind.CAPACITY_BLOCK,
        starts_at=ago(10),
        ends_at=NOW + timedelta(days=1),
        ends_hard=True,
    )
    plan = decide(p4d_pool(), Fleet(reservations=(block,)), snapshot(pending=SIX[:2]), NOW)

    assert [la.offering.capacity_block for la in plan.launches if la.offering] == [True, True]


def test_the_block_ending_first_is_used_first_and_every_block_is_used() -> None:
    soon = odcr(
        id="cr-0000000000000000a",
        kind=ReservationKind.CAPACITY_BLOCK,
        available=2,
        ends_at=NOW + timedelta(hours=5),
        ends_hard=True,
    )
    late = replace(soon, id="cr-0000000000000000b", ends_at=NOW + timedelta(days=2))
    plan = decide(
        p4d_pool(reservations=[late.id, soon.id]),
        Fleet(reservations=(late, soon)),
        snapshot(pending=SIX[:4]),
        NOW,
    )

    used = [la.offering.reservation for la in plan.launches if la.offering]
    assert used == [soon.id, soon.id, late.id, late.id]


def test_idle_agents_in_an_active_reservation_stay_and_the_others_go() -> None:
    reserved = [
        replace(agent_instance(f"i-r{n}", idle_since=ago(60)), reservation=odcr().id)
        for n in range(2)
    ]
    bought = [agent_instance(f"i-b{n}", idle_since=ago(60)) for n in range(2)]
    agents = [idle(i.id, 8) for i in reserved + bought]
    plan = decide(
        p4d_pool(),
        Fleet(instances=(*reserved, *bought), reservations=(odcr(available=2),)),
        snapshot(agents=agents),
        NOW,
    )

    assert sorted(t.instance_id for t in plan.terminations) == ["i-b0", "i-b1"]


def test_after_an_odcr_ends_its_idle_machines_are_reaped_like_any_other() -> None:
    ended = odcr(available=2, ends_at=ago(5))
    reserved = replace(agent_instance("i-r0", idle_since=ago(60)), reservation=ended.id)
    plan = decide(
        p4d_pool(),
        Fleet(instances=(reserved,), reservations=(ended,)),
        snapshot(agents=[idle("i-r0", 8)]),
        NOW,
    )

    assert [t.instance_id for t in plan.terminations] == ["i-r0"]


def test_near_a_block_end_its_agents_are_no_room_and_the_work_goes_elsewhere() -> None:
    block = odcr(
        kind=ReservationKind.CAPACITY_BLOCK,
        available=0,
        starts_at=ago(hours=20),
        ends_at=NOW + timedelta(minutes=35),
        ends_hard=True,
    )
    machine = replace(agent_instance("i-r0", idle_since=ago(1)), reservation=block.id)
    plan = decide(
        p4d_pool(),
        Fleet(instances=(machine,), reservations=(block,)),
        snapshot(pending=SIX[:1], agents=[idle("i-r0", 8)]),
        NOW,
    )

    # Left for the cloud to take back, not terminated; the task gets a new machine.
    assert plan.terminations == ()
    assert len(plan.launches) == 1
    assert plan.launches[0].offering is not None
    assert plan.launches[0].offering.purchase is Purchase.ON_DEMAND


def test_a_reservation_refused_lately_is_skipped() -> None:
    offering = reserved_offering(odcr(), 8)
    plan = decide(
        p4d_pool(),
        Fleet(reservations=(odcr(),), unavailable=frozenset({offering.key})),
        snapshot(pending=SIX[:2]),
        NOW,
    )

    assert not any(la.offering and la.offering.reservation for la in plan.launches)


def test_a_warm_pool_start_does_not_replace_a_launch_into_a_reservation() -> None:
    stopped = replace(
        instance("i-s0", state=InstanceState.STOPPED),
        instance_type="p4d.24xlarge",
        zone=SUBNET_A,
        marks={Mark.STOPPED_AT: ago(10)},
    )
    plan = decide(
        p4d_pool(warm_pool={"max_stopped": 2}),
        Fleet(instances=(stopped,), reservations=(odcr(available=1),)),
        snapshot(pending=SIX[:2]),
        NOW,
    )

    reserved = [la for la in plan.launches if la.offering and la.offering.reservation]
    assert len(reserved) == 1
    assert len(plan.starts) + len(plan.launches) == 2


def test_a_pool_names_reservations_by_id_or_tag_and_hears_why_a_group_is_refused() -> None:
    named = p4d_pool(reservations=["cr-0123456789abcdef0", "cr-01234567", "tag:team=ml"])
    assert named.provider.reservations == ("cr-0123456789abcdef0", "cr-01234567", "tag:team=ml")
    group = "arn:aws:resource-groups:us-east-1:123456789012:group/ml-blocks"
    with pytest.raises(ValidationError, match="groups are not read yet"):
        p4d_pool(reservations=[group])
    with pytest.raises(ValidationError, match="twice"):
        p4d_pool(reservations=["tag:a=b", "tag:a=b"])


def test_a_gcp_pool_names_its_own_or_a_shared_reservation() -> None:
    fields = {
        "type": "gcp",
        "project": "ml-project",
        "zone": "us-central1-a",
        "reservations": ["a3-reserved", "projects/shared-host/reservations/h100-block"],
    }
    gcp = Pool.model_validate({"name": "h100", "provider": fields})
    assert gcp.provider.reservations[1] == "projects/shared-host/reservations/h100-block"
    with pytest.raises(ValidationError, match="is not a reservation"):
        Pool.model_validate({"name": "h100", "provider": {**fields, "reservations": ["A3"]}})


def test_the_bridge_is_told_to_drain_a_block_s_agents_ahead_of_its_end() -> None:
    ends = NOW + timedelta(minutes=45)
    block = odcr(
        kind=ReservationKind.CAPACITY_BLOCK,
        available=0,
        starts_at=ago(hours=20),
        ends_at=ends,
        ends_hard=True,
    )
    machine = replace(agent_instance("i-r0"), reservation=block.id)
    plain = agent_instance("i-b0")
    plan = decide(
        p4d_pool(),
        Fleet(instances=(machine, plain), reservations=(block,)),
        snapshot(agents=[("i-r0", 8, 8), ("i-b0", 8, 8)]),
        NOW,
    )

    (notice,) = plan.drain_notices
    assert (notice.agent_id, notice.at) == ("i-r0", ends - timedelta(minutes=40))
    assert block.id in notice.reason
    # Far from its end, nothing is said yet; an ODCR's end is no reason to drain.
    later = replace(block, ends_at=NOW + timedelta(hours=2))
    calm = decide(p4d_pool(), Fleet(instances=(machine,), reservations=(later,)), snapshot(), NOW)
    assert calm.drain_notices == ()
    odcr_end = replace(block, kind=ReservationKind.TARGETED, ends_hard=False)
    assert (
        decide(
            p4d_pool(), Fleet(instances=(machine,), reservations=(odcr_end,)), snapshot(), NOW
        ).drain_notices
        == ()
    )


def test_drain_notices_read_back_as_sent_and_bad_ones_are_named() -> None:
    notices = (DrainNotice("i-r0", NOW, "reservation cr-1 ends"),)
    body = notice_message("gpu", notices, NOW)
    assert parse_notice(body) == ("gpu", list(notices))
    for bad, says in [
        ("{", "not JSON"),
        ('{"type": "pool.snapshot"}', "type"),
        ('{"type": "pool.drain", "version": 2}', "version"),
        (
            '{"type": "pool.drain", "version": 1, "pool": "gpu", "agents": [{"id": "i"}]}',
            r"agents\[0\]: .at",
        ),
    ]:
        with pytest.raises(InvalidNotice, match=says):
            parse_notice(bad)
