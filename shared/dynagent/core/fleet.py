"""What a provider observed of a pool: its instances and spot requests, cloud-neutral.

The marks (registered, idle since, disconnected since) are what earlier reconciles
learned from snapshots and wrote on the instances as tags or labels: the cloud is the
state, so a later run, or the sweep with no snapshot at all, reads them back here. The
interruption marks are written by the handler of the cloud's spot notices.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dynagent.core.reservations import Reservation


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
