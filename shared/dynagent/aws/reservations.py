"""The capacity reservations an EC2 pool names, read into ``core.reservations``.

A pool's ``reservations`` lists On-Demand Capacity Reservations and Capacity Blocks for
ML by id (``cr-...``) or by a tag they carry (``tag:KEY=VALUE``). DescribeCapacity-
Reservations answers for all of them in one or two calls, which a warm function makes
at most once a minute (``RESERVATIONS_FOR``): a pass does not ask once per reservation,
and thousands of passes an hour do not ask thousands of times.

The places free are counted fresh each pass all the same: what the cloud said was free
when it was read, plus the pool's machines in it then, less the pool's machines in it
now. So a launch into the reservation counts at once, not a minute later.

A reservation is the pool's to use where the pool has a subnet in its availability zone
(or launches into the default subnets: then EC2 places the machine in the
reservation's zone). EC2 reports these kinds, as ``ReservationKind``:

- ``ReservationType`` ``capacity-block``: a Capacity Block, launched in the
  ``capacity-block`` market, its instances terminated from 30 minutes before its end;
- ``InstanceMatchCriteria`` ``open``: any matching launch uses it unless it opts out;
- ``targeted``: only launches that name it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from dynagent.core.config import AwsProvider
from dynagent.core.fleet import Reservation, ReservationKind

# How long a warm function trusts the reservations it read: their counts are corrected
# each pass by the pool's own machines (module docstring); others' use and a
# reservation's state may lag this much.
RESERVATIONS_FOR = timedelta(minutes=1)
# States in which launches may go there, or will once it starts.
_LIVE = frozenset({"active", "scheduled", "payment-pending", "pending", "assessing"})
_NOT_FOUND = "InvalidCapacityReservationId.NotFound"


@dataclass
class ReservationCache:
    """What a warm function keeps of one pool's reservations between passes."""

    read_at: datetime | None = None
    # DescribeCapacityReservations items, each with the pool's machines in it then.
    items: list[tuple[dict[str, Any], int]] = field(default_factory=list)
    # Subnet id -> its availability zone (a subnet never moves).
    subnet_zones: dict[str, str] = field(default_factory=dict)


def describe_named(ec2: Any, entries: Iterable[str]) -> list[dict[str, Any]]:
    """DescribeCapacityReservations items for a pool's ``reservations`` entries, each
    once. An id EC2 does not know is left out (``validate`` and ``doctor`` name it)."""
    ids = [e for e in entries if e.startswith("cr-")]
    selectors = [e.removeprefix("tag:").split("=", 1) for e in entries if e.startswith("tag:")]
    found: dict[str, dict[str, Any]] = {}
    if ids:
        try:
            items = list(_pages(ec2, CapacityReservationIds=ids))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != _NOT_FOUND:
                raise
            # One unknown id fails the call: ask for each alone, to keep the others.
            items = [item for one in ids for item in _one(ec2, one)]
        found.update((item["CapacityReservationId"], item) for item in items)
    for key, value in selectors:
        filters = [{"Name": f"tag:{key}", "Values": [value]}]
        found.update((i["CapacityReservationId"], i) for i in _pages(ec2, Filters=filters))
    return list(found.values())


def _one(ec2: Any, reservation_id: str) -> list[dict[str, Any]]:
    try:
        return list(_pages(ec2, CapacityReservationIds=[reservation_id]))
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == _NOT_FOUND:
            return []
        raise


def _pages(ec2: Any, **request: Any) -> Iterator[dict[str, Any]]:
    pages = ec2.get_paginator("describe_capacity_reservations").paginate(**request)
    for page in pages:
        yield from page.get("CapacityReservations", [])


def subnet_zones(ec2: Any, subnets: Iterable[str], known: dict[str, str]) -> dict[str, str]:
    """Each subnet's availability zone, asking EC2 only for those not known yet."""
    wanted = [s for s in subnets if s and s not in known]
    if wanted:
        for subnet in ec2.describe_subnets(SubnetIds=wanted)["Subnets"]:
            known[subnet["SubnetId"]] = subnet["AvailabilityZone"]
    return known


def pool_subnets(config: AwsProvider) -> tuple[str, ...]:
    """The subnets the pool launches into, as its offerings name them ("": default)."""
    spec = config.offerings
    if spec is not None and spec.subnet_ids:
        return spec.subnet_ids
    return (config.network_interface.subnet_id or "",)


def reservation_from(
    item: dict[str, Any],
    counts: tuple[int, int],
    subnets: tuple[str, ...],
    zones: dict[str, str],
    now: datetime,
) -> Reservation:
    """One DescribeCapacityReservations item as the decision reads it; ``counts`` are the
    pool's machines in it when it was read and now."""
    place = item.get("AvailabilityZone", "")
    zone = next((s for s in subnets if s and zones.get(s) == place), None)
    if zone is None and subnets == ("",):
        zone = ""  # the default subnets: EC2 launches in the reservation's zone
    if item.get("ReservationType") == "capacity-block":
        kind = ReservationKind.CAPACITY_BLOCK
    elif item.get("InstanceMatchCriteria") == "open":
        kind = ReservationKind.OPEN
    else:
        kind = ReservationKind.TARGETED
    total = int(item.get("TotalInstanceCount", 0))
    free = int(item.get("AvailableInstanceCount", 0)) + counts[0] - counts[1]
    ends_at: datetime | None = item.get("EndDate")
    if item.get("EndDateType") == "unlimited":
        ends_at = None
    state = item.get("State", "")
    starts_at: datetime | None = item.get("StartDate") if state != "active" else None
    if state not in _LIVE:
        # Expired or cancelled: over, whatever its end date said.
        ends_at, free = min(ends_at or now, now), 0
    elif state != "active":
        # Not started: EC2 may count nothing free yet; at its start all of it is.
        free = total - counts[1]
    return Reservation(
        id=item["CapacityReservationId"],
        kind=kind,
        instance_type=item.get("InstanceType", ""),
        zone=zone or "",
        place=place,
        total=total,
        available=max(0, min(total, free)),
        starts_at=starts_at,
        ends_at=ends_at,
        ends_hard=kind is ReservationKind.CAPACITY_BLOCK,
        matched=zone is not None,
    )
