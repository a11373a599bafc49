"""What a provider observed of a pool: its instances, spot requests and the reservations it
names, cloud-neutral.

The marks (registered, idle since, disconnected since) are what earlier reconciles
learned from snapshots and wrote on the instances as tags or labels: the cloud is the
state, so a later run, or the sweep with no snapshot at all, reads them back here. The
interruption marks are written by the handler of the cloud's spot notices.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta


class InstanceState(enum.Enum):
    """Our view of an instance's life; each adapter maps its cloud's states here once."""

    STARTING = "starting"  # booting: pending on EC2, PROVISIONING/STAGING on GCE
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"  # stopped, or preempted and not deleted


class RequestState(enum.Enum):
    """A spot request's life, for clouds that launch spot capacity through requests."""

    OPEN = "open"  # waiting for capacity
    ACTIVE = "active"  # fulfilled: its instance exists
    CANCELLED_INSTANCE_RUNNING = "cancelled-instance-running"  # cancelled, instance left behind


class Mark(enum.Enum):
    """What reconciles record on an instance; values are the tag or label suffixes."""

    REGISTERED = "registered"
    IDLE_SINCE = "idle-since"
    DISCONNECTED_SINCE = "disconnected-since"
    # The cloud warned it will reclaim the spot machine (EC2: two minutes' notice).
    INTERRUPTED_AT = "interrupted-at"
    # The cloud recommended moving off it (EC2 rebalance recommendation): not a reclaim.
    REBALANCE_AT = "rebalance-at"
    # A reconcile stopped it for the pool's warm pool (its agent's marks cleared then).
    STOPPED_AT = "stopped-at"

    # Members are singletons, so identity hashing is exact; Enum's own hashes the name in
    # Python, and a decision looks marks up several times per instance of a large fleet.
    __hash__ = object.__hash__


@dataclass(frozen=True)
class Instance:
    """A managed instance of the pool."""

    id: str
    state: InstanceState
    launched_at: datetime
    marks: dict[Mark, datetime] = field(default_factory=dict)
    # The spot request that launched it, if any.
    spot_request_id: str | None = None
    # Its machine type, zone (subnet on EC2) and purchase, as the cloud reports them;
    # "" when unknown (the pool's one type is assumed).
    instance_type: str = ""
    zone: str = ""
    spot: bool = False
    # Other names its agent may have registered under: its hostnames (EC2's private DNS
    # name and its first label), for an agent started without DET_AGENT_ID.
    aliases: tuple[str, ...] = ()
    # The cloud stopped it to take its capacity back (a preempted Spot VM on GCP).
    preempted: bool = False
    # The hash of the boot config it was launched with (``boot.drift``): "" if unknown.
    boot_config: str = ""
    # The short hash of each part of it (``boot.drift.boot_parts``): "" if unknown.
    boot_parts: str = ""
    # The reservation it runs in (``core.reservations``), as the cloud reports it: "".
    reservation: str = ""

    @property
    def live(self) -> bool:
        state = self.state
        return state is InstanceState.STARTING or state is InstanceState.RUNNING

    @property
    def registered_at(self) -> datetime | None:
        return self.marks.get(Mark.REGISTERED)

    @property
    def idle_since(self) -> datetime | None:
        return self.marks.get(Mark.IDLE_SINCE)

    @property
    def disconnected_since(self) -> datetime | None:
        return self.marks.get(Mark.DISCONNECTED_SINCE)

    @property
    def interrupted_at(self) -> datetime | None:
        return self.marks.get(Mark.INTERRUPTED_AT)

    @property
    def stopped_at(self) -> datetime | None:
        return self.marks.get(Mark.STOPPED_AT)


@dataclass(frozen=True)
class SpotRequest:
    """A managed spot request of the pool."""

    id: str
    state: RequestState
    created_at: datetime
    # The cloud's status, for people (EC2: "capacity-not-available", ...).
    status_code: str = ""
    status_updated_at: datetime | None = None
    # The cloud says waiting will not fill it (since ``status_updated_at``): the adapter
    # reads that from its cloud's status codes.
    unfulfillable: bool = False
    instance_id: str | None = None


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


@dataclass(frozen=True)
class Fleet:
    """Everything observed of one pool in one pass."""

    instances: tuple[Instance, ...] = ()
    spot_requests: tuple[SpotRequest, ...] = ()
    # Keys of offerings the cloud recently had no capacity for (``Offering.key``): the
    # adapter remembers them a few minutes, so the decision chooses among the others.
    unavailable: frozenset[str] = frozenset()
    # Spot prices the cloud quotes, dollars per hour by machine type (lowest over zones).
    spot_prices: dict[str, float] = field(default_factory=dict)
    # The reservations the pool names, as the cloud reports them now.
    reservations: tuple[Reservation, ...] = ()

    def instance(self, instance_id: str) -> Instance | None:
        for instance in self.instances:
            if instance.id == instance_id:
                return instance
        return None
