"""The reservations a GCP pool names: each found in one of its zones, of a machine it
launches, and when it ends."""

from __future__ import annotations

from datetime import UTC, datetime

from dynagent.cli.doctor.findings import Finding, fail, ok, warn
from dynagent.core.config import Pool
from dynagent.core.fleet import Reservation, ReservationKind
from dynagent.gcp.reservations import read_named, reservation_from

from . import shape
from .apis import GcpApis

_KINDS = {
    ReservationKind.TARGETED: "specific: used only by VMs that name it",
    ReservationKind.OPEN: "any matching VM may use it; the pool's VMs name it, and its "
    "other VMs ask for no reservation",
}


def reservations(pool: Pool, apis: GcpApis, now: datetime | None = None) -> list[Finding]:
    p = shape.provider(pool)
    if not p.reservations:
        return []
    now = now or datetime.now(UTC)
    label = shape.label(pool)
    found = read_named(
        apis.compute("ReservationsClient"), p.reservations, p.project, shape.zones(pool)
    )
    named = {entry for entry, _, _ in found}
    findings = [
        fail(
            "gcp.reservation",
            f"{label}: reservation {entry}",
            f"not found in the pool's zones ({', '.join(shape.zones(pool))})",
            "check its name and zone (gcloud compute reservations list), add its zone to "
            "offerings.zones, or remove it from reservations",
        )
        for entry in p.reservations
        if entry not in named
    ]
    machines = {m.machine_type for m in shape.machines(pool)}
    for entry, zone, item in found:
        reservation = reservation_from(entry, zone, item, (0, 0))
        findings.append(_one(label, reservation, machines, item.status, now))
    return findings


def _one(label: str, r: Reservation, machines: set[str], status: str, now: datetime) -> Finding:
    what = f"{label}: reservation {r.describe(now)}"
    if r.instance_type not in machines:
        return fail(
            "gcp.reservation",
            what,
            f"it holds {r.instance_type}, which the pool does not launch",
            f"add {r.instance_type} to the pool's machines, or remove the reservation",
        )
    if status != "READY":
        return warn(
            "gcp.reservation",
            what,
            f"its status is {status}: no VM goes into it until it is READY",
            "wait for it, or check it: gcloud compute reservations describe",
        )
    ends = "; its VMs count as going before its deleteAtTime" if r.ends_hard else ""
    return ok("gcp.reservation", what, _KINDS[r.kind] + ends)
