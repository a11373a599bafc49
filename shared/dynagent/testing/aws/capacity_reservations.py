"""Capacity reservations as EC2 keeps them, where moto has none: On-Demand Capacity
Reservations (targeted or open) and Capacity Blocks for ML.

- ``LocalAws.create_capacity_reservation`` / ``create_capacity_block`` make them;
  DescribeCapacityReservations serves them (by id, with the ``state``,
  ``instance-type``, ``availability-zone`` and ``tag:KEY`` filters, paged), counting
  AvailableInstanceCount as the total less the pending and running instances in each.
  An unknown id is ``InvalidCapacityReservationId.NotFound``.
- RunInstances with ``CapacityReservationSpecification.CapacityReservationTarget``
  launches into that reservation: its type and zone must be the launch's
  (``InvalidParameterValue`` otherwise), and it launches what the reservation still
  holds, up to MaxCount, or fails ``ReservationCapacityExceeded`` when that is below
  MinCount. A Capacity Block must be asked for in the ``capacity-block`` market
  (``InvalidParameterCombination`` otherwise), and before its start the launch fails
  ``InsufficientInstanceCapacity``. Reserved launches do not draw on the double's
  scarce on-demand capacity.
- A launch that names no reservation and does not opt out (``CapacityReservationPreference``
  absent or ``open``) uses an active open reservation of its type and zone with room;
  ``none`` never does.
- DescribeInstances shows ``CapacityReservationId`` and ``CapacityReservationSpecification``
  on instances in a reservation.
- EC2 terminates a Capacity Block's instances from 30 minutes before its end: here, at
  the first DescribeInstances or DescribeCapacityReservations from then on. An ODCR that
  ends leaves its instances running.

Simpler than EC2: states follow the wall clock at each call (no ``payment-pending`` or
``assessing``); no capacity reservation groups or fleets, tenancy, platform or EBS
optimisation matching; CreateFleet does not launch into reservations (dynagent launches
into them with RunInstances); a stopped instance keeps no place.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response

from dynagent.testing.aws.fleet import ServerError, Site
from dynagent.testing.aws.knobs import STATE_LOCK, Knobs, knobs_for

# EC2 starts terminating a Capacity Block's instances this long before its end.
BLOCK_RECLAIM_BEFORE = timedelta(minutes=30)
_LIVE = ("pending", "running")


@dataclass
class CapacityReservation:
    id: str
    instance_type: str
    zone: str
    total: int
    match: str  # "targeted" or "open"
    block: bool
    created: datetime
    start: datetime | None = None
    end: datetime | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # Instances launched into it, by id (the live ones hold a place).
    instances: list[str] = field(default_factory=list)

    def state(self, now: datetime) -> str:
        if self.end is not None and now >= self.end:
            return "expired"
        if self.start is not None and now < self.start:
            return "scheduled"
        return "active"


def new_id() -> str:
    return "cr-" + secrets.token_hex(9)[:17]


def reservations_of(knobs: Knobs) -> dict[str, CapacityReservation]:
    """The account's reservations by id (kept in its knobs, so reset() clears them)."""
    return knobs.reservations


def _used(backend: Any, reservation: CapacityReservation) -> int:
    live = 0
    for instance_id in reservation.instances:
        instance = backend.get_multi_instances_by_id([instance_id])
        if instance and instance[0].state in _LIVE:
            live += 1
    return live


def _reclaim_ended_blocks(
    backend: Any, reservations: dict[str, CapacityReservation], now: datetime
) -> None:
    """EC2 takes a block's instances back from 30 minutes before its end."""
    for reservation in reservations.values():
        if not reservation.block or reservation.end is None:
            continue
        if now < reservation.end - BLOCK_RECLAIM_BEFORE:
            continue
        live = [
            i.id
            for i in backend.get_multi_instances_by_id(reservation.instances)
            if i.state in _LIVE or i.state == "stopped"
        ]
        if live:
            backend.terminate_instances(live)


def item(backend: Any, reservation: CapacityReservation, now: datetime) -> dict[str, Any]:
    """The reservation as DescribeCapacityReservations answers."""
    state = reservation.state(now)
    used = _used(backend, reservation)
    found: dict[str, Any] = {
        "CapacityReservationId": reservation.id,
        "OwnerId": backend.account_id,
        "CapacityReservationArn": f"arn:aws:ec2:{backend.region_name}:{backend.account_id}:"
        f"capacity-reservation/{reservation.id}",
        "InstanceType": reservation.instance_type,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": reservation.zone,
        "Tenancy": "default",
        "TotalInstanceCount": reservation.total,
        "AvailableInstanceCount": max(0, reservation.total - used) if state == "active" else 0,
        "InstanceMatchCriteria": reservation.match,
        "State": state,
        "StartDate": reservation.start or reservation.created,
        "EndDateType": "limited" if reservation.end else "unlimited",
        "CreateDate": reservation.created,
        "ReservationType": "capacity-block" if reservation.block else "default",
        "Tags": [{"Key": k, "Value": v} for k, v in reservation.tags.items()],
    }
    if reservation.end:
        found["EndDate"] = reservation.end
    return found


def _matches(found: dict[str, Any], filters: list[dict[str, Any]]) -> bool:
    for entry in filters:
        name, values = entry["Name"], entry.get("Values", [])
        if name.startswith("tag:"):
            key = name.removeprefix("tag:")
            value = next((t["Value"] for t in found["Tags"] if t["Key"] == key), None)
        else:
            field_of = {
                "state": "State",
                "instance-type": "InstanceType",
                "availability-zone": "AvailabilityZone",
            }.get(name)
            if field_of is None:
                raise EC2ClientError("InvalidParameterValue", f"The filter '{name}' is invalid")
            value = found[field_of]
        if value not in values:
            return False
    return True


def describe_capacity_reservations(self: Any) -> Any:
    knobs = knobs_for(self.current_account)
    if knobs is None:
        raise EC2ClientError("InvalidAction", "DescribeCapacityReservations is not modelled")
    backend, now = self.ec2_backend, datetime.now(UTC)
    filters = [
        {"Name": name, "Values": values}
        for name, values in self._filters_from_querystring().items()
    ]
    ids = self._get_param("CapacityReservationIds", [])
    with STATE_LOCK:
        reservations = reservations_of(knobs)
        _reclaim_ended_blocks(backend, reservations, now)
        unknown = [i for i in ids if i not in reservations]
        if unknown:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{unknown[0]}' does not exist",
            )
        chosen = [reservations[i] for i in ids] if ids else list(reservations.values())
        found = [item(backend, r, now) for r in chosen]
    found = [f for f in found if _matches(f, filters)]
    size = int(self._get_param("MaxResults") or 1000)
    start = int(self._get_param("NextToken") or 0)
    page: dict[str, Any] = {"CapacityReservations": found[start : start + size]}
    if start + size < len(found):
        page["NextToken"] = str(start + size)
    return ActionResult(page)


def placement(
    response: Any, knobs: Knobs, site: Site, min_count: int, count: int
) -> tuple[CapacityReservation | None, int]:
    """The reservation a RunInstances request launches into, and how many it launches
    there (None: none; the launch goes on as any other). Raises EC2's errors."""
    backend, now = response.ec2_backend, datetime.now(UTC)
    reservations = reservations_of(knobs)
    target = response._get_param("CapacityReservationSpecification.CapacityReservationTarget")
    preference = response._get_param(
        "CapacityReservationSpecification.CapacityReservationPreference"
    )
    market = response._get_param("InstanceMarketOptions.MarketType")
    if target:
        reservation_id = target.get("CapacityReservationId")
        reservation = reservations.get(reservation_id)
        if reservation is None:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{reservation_id}' does not exist",
            )
        if (reservation.instance_type, reservation.zone) != (site.instance_type, site.zone):
            raise EC2ClientError(
                "InvalidParameterValue",
                f"The instance type and Availability Zone of the request ({site.instance_type}, "
                f"{site.zone}) do not match the capacity reservation {reservation.id} "
                f"({reservation.instance_type}, {reservation.zone})",
            )
        if reservation.block and market != "capacity-block":
            raise EC2ClientError(
                "InvalidParameterCombination",
                f"{reservation.id} is a Capacity Block: launch into it with "
                "InstanceMarketOptions MarketType capacity-block",
            )
        if not reservation.block and market == "capacity-block":
            raise EC2ClientError(
                "InvalidParameterCombination",
                f"{reservation.id} is not a Capacity Block",
            )
        state = reservation.state(now)
        if state != "active":
            if reservation.block and state == "scheduled":
                raise ServerError(
                    "InsufficientInstanceCapacity",
                    f"The Capacity Block {reservation.id} has not started yet",
                )
            raise EC2ClientError(
                "ReservationCapacityExceeded",
                f"The capacity reservation {reservation.id} is {state}",
            )
        free = reservation.total - _used(backend, reservation)
        if free < min_count:
            raise EC2ClientError(
                "ReservationCapacityExceeded",
                "Insufficient capacity in the Capacity Reservation",
            )
        return reservation, min(count, free)
    if preference == "none" or market not in (None, "", "on-demand"):
        return None, 0
    for reservation in reservations.values():
        if (
            reservation.match == "open"
            and not reservation.block
            and reservation.state(now) == "active"
            and (reservation.instance_type, reservation.zone) == (site.instance_type, site.zone)
        ):
            free = reservation.total - _used(backend, reservation)
            if free > 0:
                return reservation, min(count, free)
    return None, 0


def record(
    reservation: CapacityReservation, instances: list[Any], targeted: bool, how_many: int
) -> None:
    """Put the first ``how_many`` launched instances in the reservation, as DescribeInstances
    shows them."""
    for instance in instances[:how_many]:
        reservation.instances.append(instance.id)
        instance.capacity_reservation_id = reservation.id
        spec: dict[str, Any] = {"CapacityReservationPreference": "open"}
        if targeted:
            spec = {"CapacityReservationTarget": {"CapacityReservationId": reservation.id}}
        instance.capacity_reservation_specification = spec


def opted_out(instances: list[Any], preference: str | None) -> None:
    for instance in instances:
        if not getattr(instance, "capacity_reservation_id", None):
            instance.capacity_reservation_specification = {
                "CapacityReservationPreference": preference or "open"
            }


def reclaim_before_describe(response: Any) -> None:
    knobs = knobs_for(response.current_account)
    if knobs is None:
        return
    with STATE_LOCK:
        _reclaim_ended_blocks(response.ec2_backend, reservations_of(knobs), datetime.now(UTC))


def patches() -> tuple[tuple[type, str, object], ...]:
    return ((EC2Response, "describe_capacity_reservations", describe_capacity_reservations),)
