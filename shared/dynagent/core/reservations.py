"""Capacity bought ahead, as the decision uses it: a reservation (``fleet.Reservation``,
what each adapter reads of its cloud's ODCRs, Capacity Blocks or Compute Engine
reservations) holds machines of one type in one zone, for a window, paid for whether or
not anything runs in it.

While a reservation is active its free places cost nothing more, so pending work goes
there first (``decide.launches``) and its idle agents are kept (``decide.idle``). A
reservation whose machines the cloud takes back at its end (a Capacity Block, a GCP
calendar-mode reservation) stops counting ``lead`` before then: no launch goes there and
its agents are no room, so the work still queued gets machines elsewhere in time.
"""

from __future__ import annotations

from collections.abc import Iterable

from dynagent.core.fleet import Instance, Reservation, ReservationKind
from dynagent.core.offerings import Offering, Purchase


def reserved_offering(reservation: Reservation, slots: int) -> Offering:
    """A launch into ``reservation``: its type and zone, at no price beyond what is paid
    already (machines of ``slots`` slots)."""
    return Offering(
        reservation.instance_type,
        slots,
        0.0,
        reservation.zone,
        Purchase.RESERVED,
        reservation=reservation.id,
        capacity_block=reservation.kind is ReservationKind.CAPACITY_BLOCK,
    )


def machines_in_each(instances: Iterable[Instance]) -> dict[str, int]:
    """How many of a pool's live machines run in each reservation, by its id."""
    counts: dict[str, int] = {}
    for instance in instances:
        if instance.reservation and instance.live:
            counts[instance.reservation] = counts.get(instance.reservation, 0) + 1
    return counts
