"""The reservations an AWS pool names: each found, of a type the pool launches, in a zone
it has a subnet in, and when it starts and ends."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dynagent.aws.reservations import describe_named, pool_subnets, reservation_from, subnet_zones
from dynagent.cli.doctor.findings import Finding, fail, ok, warn
from dynagent.core.config import Pool
from dynagent.core.durations import format_duration
from dynagent.core.fleet import Reservation, ReservationKind

from . import shape
from .view import Ec2View

_KINDS = {
    ReservationKind.TARGETED: "targeted: used only by launches that name it",
    ReservationKind.OPEN: "open: the pool launches into it by name; other pools' launches "
    "opt out of it",
    ReservationKind.CAPACITY_BLOCK: "a Capacity Block for ML: launched in the capacity-block "
    "market, its instances terminated by EC2 from 30 minutes before its end",
}


def reservations(pool: Pool, view: Ec2View, now: datetime | None = None) -> list[Finding]:
    """One finding per reservation the pool names, and per entry that names none."""
    p = shape.provider(pool)
    if not p.reservations:
        return []
    now = now or datetime.now(UTC)
    label = shape.label(pool)
    items = describe_named(view.ec2, p.reservations)
    found_ids = {item["CapacityReservationId"] for item in items}
    findings = []
    for entry in p.reservations:
        if entry.startswith("cr-") and entry not in found_ids:
            findings.append(
                fail(
                    "aws.reservation",
                    f"{label}: reservation {entry}",
                    f"no such capacity reservation in {p.region}",
                    "check the id (aws ec2 describe-capacity-reservations), or remove it "
                    "from reservations",
                )
            )
        elif entry.startswith("tag:") and not _tagged(items, entry):
            findings.append(
                warn(
                    "aws.reservation",
                    f"{label}: reservations with {entry}",
                    f"no capacity reservation in {p.region} carries that tag",
                    "tag the reservations (aws ec2 create-tags), or fix the entry",
                )
            )
    subnets = pool_subnets(p)
    zones = subnet_zones(view.ec2, subnets, {})
    for item in items:
        reservation = reservation_from(item, (0, 0), subnets, zones, now)
        findings.append(_one(pool, reservation, str(item.get("State", "")), now))
    return findings


def _tagged(items: list[dict[str, Any]], entry: str) -> bool:
    key, _, value = entry.removeprefix("tag:").partition("=")
    return any(
        t.get("Key") == key and t.get("Value") == value
        for item in items
        for t in item.get("Tags") or []
    )


def _one(pool: Pool, r: Reservation, state: str, now: datetime) -> Finding:
    p = shape.provider(pool)
    what = f"{shape.label(pool)}: reservation {r.describe(now)}"
    if r.instance_type not in shape.instance_types(pool):
        return fail(
            "aws.reservation",
            what,
            f"it holds {r.instance_type}, which the pool does not launch",
            f"add {r.instance_type} to the pool's offerings.instance_types (or instance_type), "
            "or remove the reservation from reservations",
        )
    if not r.matched:
        return fail(
            "aws.reservation",
            what,
            f"the pool has no subnet in {r.place}, where the reservation is",
            f"add a subnet of {r.place} to offerings.subnet_ids",
        )
    if r.ends_at is not None and r.ends_at <= now:
        return warn(
            "aws.reservation",
            what,
            f"it is {state or 'over'}: it ended {format_duration(now - r.ends_at)} ago",
            "remove it from reservations",
        )
    when = ""
    if r.starts_at is not None and now < r.starts_at:
        when = f"; starts in {format_duration(r.starts_at - now)}, launches go elsewhere until then"
    if r.ends_hard and r.ends_at is not None:
        when += (
            f"; its machines count as going from "
            f"{format_duration(p.drain_before_reservation_end)} before its end"
        )
    return ok("aws.reservation", what, _KINDS[r.kind] + when)
