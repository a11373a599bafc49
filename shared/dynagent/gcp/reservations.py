"""The Compute Engine reservations a pool names, read into ``core.reservations``.

A pool's ``reservations`` lists reservations of its own project by name, or shared ones
of another as ``projects/P/reservations/R``. A reservation is zonal: each is looked up
in the pool's zones (``reservations.get``), at most once a minute by a warm function
(``RESERVATIONS_FOR``), and its free places are counted fresh each pass from the pool's
own VMs in it, as on EC2 (``aws.reservations``).

- ``specificReservationRequired``: only VMs naming it use it (``TARGETED``); otherwise
  any VM of its shape that allows ANY_RESERVATION does (``OPEN``). The pool's VMs name
  the reservation they go into (``reservationAffinity`` SPECIFIC_RESERVATION), and every
  other VM of the pool asks for NO_RESERVATION.
- ``deleteAtTime``: Compute Engine deletes the reservation then, and a calendar-mode
  reservation's VMs with it. dynagent takes every such end as hard: the VMs stop counting
  ``drain_before_reservation_end`` before it. A VM that survives the end counts again
  once the reservation is gone.
- A reservation not READY (being created or changed) takes no launch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from dynagent.core.fleet import Reservation, ReservationKind

RESERVATIONS_FOR = timedelta(minutes=1)
# reservationAffinity's key for naming reservations.
RESERVATION_NAME_KEY = "compute.googleapis.com/reservation-name"


@dataclass
class ReservationCache:
    """What a warm function keeps of one pool's reservations between passes."""

    read_at: datetime | None = None
    # (the pool's entry, its zone, the reservation as read, the pool's VMs in it then)
    items: list[tuple[str, str, Any, int]] = field(default_factory=list)


def where(entry: str, own_project: str) -> tuple[str, str]:
    """(project, name) of a pool's ``reservations`` entry."""
    if entry.startswith("projects/"):
        _, project, _, name = entry.split("/")
        return project, name
    return own_project, entry


def read_named(
    client: Any, entries: Iterable[str], own_project: str, zones: Iterable[str]
) -> list[tuple[str, str, Any]]:
    """(entry, zone, reservation) for each entry found in one of the pool's zones."""
    from google.api_core import exceptions as google_errors

    found = []
    for entry in entries:
        project, name = where(entry, own_project)
        for zone in zones:
            try:
                item = client.get(project=project, zone=zone, reservation=name)
            except google_errors.NotFound:
                continue
            found.append((entry, zone, item))
    return found


def reservation_from(entry: str, zone: str, item: Any, counts: tuple[int, int]) -> Reservation:
    """One reservation as the decision reads it; ``counts`` are the pool's VMs in it when
    it was read and now. Its id is the pool's entry: what the VMs' affinity names."""
    specific = item.specific_reservation
    total = int(specific.count)
    free = total - int(specific.in_use_count) + counts[0] - counts[1]
    ready = item.status == "READY"
    ends_at = datetime.fromisoformat(item.delete_at_time) if item.delete_at_time else None
    kind = ReservationKind.TARGETED if item.specific_reservation_required else ReservationKind.OPEN
    return Reservation(
        id=entry,
        kind=kind,
        instance_type=specific.instance_properties.machine_type.rsplit("/", 1)[-1],
        zone=zone,
        place=zone,
        total=total,
        available=max(0, min(total, free)) if ready else 0,
        ends_at=ends_at,
        ends_hard=ends_at is not None,
    )


def affinity(reservation: str) -> dict[str, Any]:
    """A VM's ``reservationAffinity``: into ``reservation``, or into none ("")."""
    if not reservation:
        return {"consumeReservationType": "NO_RESERVATION"}
    return {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": RESERVATION_NAME_KEY,
        "values": [reservation],
    }


def reservation_of(item: Any) -> str:
    """The reservation a listed VM was put into, by the name its affinity gives."""
    named = item.reservation_affinity
    if named.consume_reservation_type != "SPECIFIC_RESERVATION" or not named.values:
        return ""
    return str(named.values[0])
