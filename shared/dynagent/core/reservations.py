"""Capacity bought ahead, as the decision sees it: a reservation of machines of one type in
one zone, for a window, paid for whether or not anything runs in it.

Cloud-neutral: each adapter reads its cloud's reservations (EC2's On-Demand Capacity
Reservations and Capacity Blocks for ML, Compute Engine's reservations) into these, so
the decision, ``dynagent plan`` and the simulator read the same thing.

While a reservation is active its free places cost nothing more, so pending work goes
there first (``decide.launches``) and its idle agents are kept (``decide.idle``). A
reservation whose machines the cloud takes back at its end (a Capacity Block, a GCP
calendar-mode reservation) stops counting ``lead`` before then: no launch goes there and
its agents are no room, so the work still queued gets machines elsewhere in time.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from dynagent.core.fleet import Instance
from dynagent.core.offerings import Offering, Purchase


class ReservationKind(enum.Enum):
    # Used only by launches that name it (EC2's targeted ODCR, GCP's specific reservation).
    TARGETED = "targeted"
    # Used by any launch of its type and zone that does not opt out of it.
    OPEN = "open"
    # EC2 Capacity Block for ML: named, bought in its own market, taken back at its end.
    CAPACITY_BLOCK = "capacity-block"


@dataclass(frozen=True)
class Reservation:
    """One reservation a pool names, as the cloud reports it now."""

    id: str
    kind: ReservationKind
    instance_type: str
    # Where the pool launches into it, as its offerings name zones: the pool's subnet in
    # its zone on EC2 ("" for a pool launching into the default subnets), the zone on
    # Compute Engine.
    zone: str
    # Its zone as the cloud names it, for people (EC2's availability zone).
    place: str
    total: int
    # Places no machine holds now, this pool's or anyone's.
    available: int
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    # The cloud deletes its machines at its end (a Capacity Block, a calendar-mode
    # reservation); an ODCR that ends leaves them running at on-demand prices.
    ends_hard: bool = False
    # The pool can launch into it: it has a subnet or zone where the reservation is.
    matched: bool = True

    def active(self, now: datetime) -> bool:
        """Launches may go there now (it has started and not ended)."""
        return (self.starts_at is None or self.starts_at <= now) and (
            self.ends_at is None or now < self.ends_at
        )

    def ending(self, now: datetime, lead: timedelta) -> bool:
        """Its machines are about to be taken back: within ``lead`` of a hard end."""
        return self.ends_hard and self.ends_at is not None and now >= self.ends_at - lead

    def usable(self, now: datetime, lead: timedelta) -> bool:
        """New work may go there: active, matching the pool, and not ending."""
        return self.matched and self.active(now) and not self.ending(now, lead)

    def offering(self, slots: int) -> Offering:
        """A launch into it: its type and zone, at no price beyond what is paid already."""
        return Offering(
            self.instance_type,
            slots,
            0.0,
            self.zone,
            Purchase.RESERVED,
            reservation=self.id,
            capacity_block=self.kind is ReservationKind.CAPACITY_BLOCK,
        )

    def describe(self, now: datetime) -> str:
        """What it is, for people: ``cr-1 (targeted, 4 x p4d.24xlarge in us-east-1a, 1
        free, ends 2026-12-01 12:00 UTC)``."""
        window = []
        if self.starts_at is not None and now < self.starts_at:
            window.append(f"starts {self.starts_at:%Y-%m-%d %H:%M} UTC")
        if self.ends_at is not None:
            window.append(f"ends {self.ends_at:%Y-%m-%d %H:%M} UTC")
        where = self.place or self.zone or "the default zone"
        return (
            f"{self.id} ({self.kind.value}, {self.total} x {self.instance_type} in {where}, "
            f"{self.available} free{''.join(', ' + w for w in window)})"
        )


def reservation_of(instance: Instance, reservations: Iterable[Reservation]) -> Reservation | None:
    """The reservation a managed instance runs in, if the pool names it."""
    if not instance.reservation:
        return None
    return next((r for r in reservations if r.id == instance.reservation), None)


def machines_in_each(instances: Iterable[Instance]) -> dict[str, int]:
    """How many of a pool's live machines run in each reservation, by its id."""
    counts: dict[str, int] = {}
    for instance in instances:
        if instance.reservation and instance.live:
            counts[instance.reservation] = counts.get(instance.reservation, 0) + 1
    return counts
