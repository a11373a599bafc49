"""DescribeCapacityReservations items as the decision reads them: kind, the pool's subnet
in the reservation's zone, the free places counted against the pool's machines now, and
a window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from dynagent.aws.reservations import reservation_from
from dynagent.core.fleet import ReservationKind

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
SUBNETS = ("subnet-0a", "subnet-0b")
ZONES = {"subnet-0a": "us-east-1a", "subnet-0b": "us-east-1b"}


def item(**overrides: Any) -> dict[str, Any]:
    """An item as EC2 answers it for an active targeted ODCR of 4 p4d.24xlarge."""
    fields: dict[str, Any] = {
        "CapacityReservationId": "cr-0123456789abcdef0",
        "InstanceType": "p4d.24xlarge",
        "AvailabilityZone": "us-east-1b",
        "TotalInstanceCount": 4,
        "AvailableInstanceCount": 3,
        "InstanceMatchCriteria": "targeted",
        "State": "active",
        "StartDate": NOW - timedelta(days=3),
        "EndDateType": "unlimited",
        "ReservationType": "default",
    }
    fields.update(overrides)
    return fields


def test_a_targeted_odcr_in_the_zone_of_the_second_subnet() -> None:
    r = reservation_from(item(), (1, 1), SUBNETS, ZONES, NOW)

    assert (r.kind, r.zone, r.place, r.total, r.available) == (
        ReservationKind.TARGETED,
        "subnet-0b",
        "us-east-1b",
        4,
        3,
    )
    assert r.starts_at is None and r.ends_at is None and not r.ends_hard
    assert r.usable(NOW, timedelta(minutes=40))


def test_places_are_counted_again_from_the_pool_s_machines_now() -> None:
    # Read when the pool had 1 machine there; it has launched 2 more since.
    assert reservation_from(item(), (1, 3), SUBNETS, ZONES, NOW).available == 1
    # And one of its machines has gone since.
    assert reservation_from(item(), (1, 0), SUBNETS, ZONES, NOW).available == 4


def test_an_open_one_and_a_capacity_block() -> None:
    assert (
        reservation_from(item(InstanceMatchCriteria="open"), (0, 0), SUBNETS, ZONES, NOW).kind
        is ReservationKind.OPEN
    )
    block = reservation_from(
        item(
            ReservationType="capacity-block",
            State="scheduled",
            StartDate=NOW + timedelta(hours=2),
            EndDate=NOW + timedelta(days=1, hours=2),
            EndDateType="limited",
        ),
        (0, 0),
        SUBNETS,
        ZONES,
        NOW,
    )
    assert block.kind is ReservationKind.CAPACITY_BLOCK and block.ends_hard
    assert block.starts_at == NOW + timedelta(hours=2)
    assert not block.active(NOW) and block.active(NOW + timedelta(hours=3))
    assert block.ending(NOW + timedelta(days=1, hours=1, minutes=30), timedelta(minutes=40))


def test_a_zone_the_pool_has_no_subnet_in_is_not_usable() -> None:
    r = reservation_from(item(AvailabilityZone="us-east-1c"), (0, 0), SUBNETS, ZONES, NOW)
    assert not r.matched
    assert not r.usable(NOW, timedelta(minutes=40))


def test_a_pool_of_the_default_subnets_launches_into_any_zone() -> None:
    r = reservation_from(item(AvailabilityZone="us-east-1c"), (0, 0), ("",), {}, NOW)
    assert r.matched and r.zone == ""


def test_an_expired_reservation_is_over_and_has_no_place() -> None:
    r = reservation_from(
        item(State="expired", EndDate=NOW - timedelta(hours=1), EndDateType="limited"),
        (0, 0),
        SUBNETS,
        ZONES,
        NOW,
    )
    assert r.available == 0 and not r.active(NOW)
    cancelled = reservation_from(item(State="cancelled"), (0, 0), SUBNETS, ZONES, NOW)
    assert not cancelled.active(NOW)


def test_a_block_not_started_has_all_its_places_at_its_start() -> None:
    start = NOW + timedelta(hours=1)
    scheduled = item(
        ReservationType="capacity-block",
        State="scheduled",
        AvailableInstanceCount=0,
        StartDate=start,
        EndDate=start + timedelta(days=1),
        EndDateType="limited",
    )
    r = reservation_from(scheduled, (0, 0), SUBNETS, ZONES, NOW)
    assert r.available == 4 and not r.usable(NOW, timedelta(minutes=40))
    assert r.usable(start, timedelta(minutes=40))
