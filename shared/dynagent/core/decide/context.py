"""One decision's inputs and what its rules share: the context (the pool, the fleet,
the snapshot, the time, and the removals chosen so far), the walk's survey, and the
counts several rules ask of the fleet (live machines, slots left under the cap).
"""

from __future__ import annotations

import functools
import itertools
import operator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dynagent.core.boot.drift import boot_config_and_parts
from dynagent.core.config import Pool, ProviderConfig, Settings
from dynagent.core.fleet import (
    Fleet,
    Instance,
    InstanceState,
    Mark,
    RequestState,
    Reservation,
    SpotRequest,
)
from dynagent.core.offerings import Catalog, Shape
from dynagent.core.packing import Demand, Existing, pack
from dynagent.core.plan import (
    Adoption,
    DrainNotice,
    Interruption,
    Termination,
)
from dynagent.core.snapshot import Agent, PendingTask, Snapshot

_ID = operator.attrgetter("id")
# How long before the drain of a reservation's agents the functions start telling the
# bridge when it is: a few bridge heartbeats, so one lost notice is repeated in time.
ANNOUNCE = timedelta(minutes=10)


_SLOTS = operator.attrgetter("slots")


_STATE = operator.attrgetter("state")


@dataclass
class Context:
    """One decision's inputs, and the removals chosen so far.

    A large pool has tens of thousands of instances, so what the rules ask of the whole
    fleet is kept here instead of counted again: each instance's agent, and how many
    live instances are kept (not terminated by this plan). Instance ids are unique
    within a fleet, as the clouds make them.
    """

    pool: Pool
    fleet: Fleet
    snapshot: Snapshot | None
    now: datetime
    settings: Settings
    terminations: dict[str, Termination] = field(default_factory=dict)
    cancellations: dict[str, str] = field(default_factory=dict)
    adoptions: list[Adoption] = field(default_factory=list)
    kept_count: int = 0
    unmatched: list[str] = field(default_factory=list)
    # Live instances the cloud is reclaiming (marked interrupted): going away on their
    # own, so they are neither capacity, nor counted toward max_instances, nor reaped.
    going: set[str] = field(default_factory=set)
    interruptions: list[Interruption] = field(default_factory=list)
    # Of ``terminations``, the idle agents stopped for the warm pool instead.
    stops: set[str] = field(default_factory=set)
    # The warm pool's stopped machines this plan keeps: those it may start, best first
    # (``warm_pool``), and how many it keeps in all (STOPPING ones and this plan's stops
    # included), which max_stopped bounds.
    startable: list[Instance] = field(default_factory=list)
    kept_stopped: int = 0
    # Spot machines the cloud stopped (preempted) that the warm pool keeps: marked
    # stopped now, so the preemption is counted once.
    kept_preempted: set[str] = field(default_factory=set)
    # Agents this plan keeps though they must go (``replace``: drifted or broken), by
    # instance id, with why and what happens to them now.
    retiring: dict[str, str] = field(default_factory=dict)
    # Every agent ``replace`` was given, with its cause (``drifted``, ``broken``).
    replacing: list[tuple[str, str]] = field(default_factory=list)
    # Drain notices for the bridge (``replace``), beside those of reservations' ends.
    drains: list[DrainNotice] = field(default_factory=list)
    # How many machines of the config now min_instances is short of (``replace``).
    floor_short: int = 0
    # Each instance's agent, in fleet order (None: not connected), looked up once.
    connected: list[Agent | None] = field(init=False)
    # When the snapshot saw what it says (never later than now).
    seen_at: datetime = field(init=False)
    # What the pool may buy now, less what the cloud recently had no capacity for.
    catalog: Catalog = field(init=False)
    shapes: tuple[Shape, ...] = field(init=False)
    # The pending tasks of no slots: read once, as several rules ask.
    zero_slot: list[PendingTask] = field(init=False)
    # The reservations the pool names and offers the type of (``core.reservations``):
    # those new work may go to now, those whose idle agents are kept (active and not
    # ending), and those whose machines the cloud is about to take back.
    usable: tuple[Reservation, ...] = field(init=False)
    held: frozenset[str] = field(init=False)
    ending: frozenset[str] = field(init=False)
    # Reservations with a hard end near enough to tell the bridge when to drain their
    # agents: by id, (when, why).
    announced: dict[str, tuple[datetime, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.seen_at = min(self.snapshot.time, self.now) if self.snapshot else self.now
        pending = self.snapshot.pending if self.snapshot else ()
        # map and ``in`` loop in C over what may be thousands of tasks.
        self.zero_slot = [t for t in pending if t.slots == 0] if 0 in map(_SLOTS, pending) else []
        self.catalog = self.pool.provider.catalog(self.fleet.spot_prices, self.fleet.unavailable)
        self.shapes = self.catalog.shapes()
        lead = self.pool.provider.drain_before_reservation_end
        offered = [r for r in self.fleet.reservations if self.catalog.offers(r.instance_type)]
        self.usable = tuple(r for r in offered if r.usable(self.now, lead))
        self.ending = frozenset(r.id for r in offered if r.ending(self.now, lead))
        self.held = frozenset(
            r.id for r in offered if r.active(self.now) and r.id not in self.ending
        )
        self.announced = {
            r.id: (r.ends_at - lead, f"reservation {r.id} ends at {r.ends_at:%Y-%m-%d %H:%M}Z")
            for r in offered
            if r.ends_hard and r.ends_at is not None and self.now >= r.ends_at - lead - ANNOUNCE
        }
        instances = self.fleet.instances
        # The agents by id are needed only here: dropped while what they point to is
        # still in the cache (at 100k agents, freeing them at the end of the pass cost
        # milliseconds of cache misses).
        agents: dict[str, Agent] = {}
        if self.snapshot:
            listed = self.snapshot.agents
            agents = dict(zip(map(_ID, listed), listed, strict=True))
        # map and count loop in C: they touch every instance.
        self.connected = list(map(agents.get, map(_ID, instances)))
        # Counted in C by identity: count(None) would call each Agent's __eq__, and a
        # truth test reads each Agent (at 100k agents, cache misses add up).
        matched = sum(map(operator.is_not, self.connected, itertools.repeat(None)))
        if self.snapshot and len(agents) > matched:
            self._match_hostnames(agents)
        states = list(map(_STATE, instances))
        self.kept_count = states.count(InstanceState.STARTING) + states.count(InstanceState.RUNNING)

    def _match_hostnames(self, agents: dict[str, Agent]) -> None:
        """Agents named by an instance's hostname instead of its id: connected to that
        instance; the ones matching no instance are reported in the plan."""
        by_alias = {a: i for i, inst in enumerate(self.fleet.instances) for a in inst.aliases}
        matched = {agent.id for agent in self.connected if agent is not None}
        for agent_id, agent in agents.items():
            if agent_id in matched:
                continue
            index = by_alias.get(agent_id)
            if index is not None and self.connected[index] is None:
                self.connected[index] = agent
            else:
                self.unmatched.append(agent_id)

    @functools.cached_property
    def by_id(self) -> dict[str, Instance]:
        """The managed instances by id; built when first needed, which a pass with no
        removal and no spot request never does."""
        instances = self.fleet.instances
        return dict(zip(map(_ID, instances), instances, strict=True))

    @functools.cached_property
    def agents_by_id(self) -> dict[str, Agent]:
        """Each connected instance's agent by instance id; built when first needed."""
        instances = self.fleet.instances
        return {i.id: a for i, a in zip(instances, self.connected, strict=True) if a is not None}

    @property
    def provider(self) -> ProviderConfig:
        return self.pool.provider

    def terminate(self, instance_id: str, reason: str, cause: str = "other") -> None:
        if instance_id in self.terminations:
            return
        self.terminations[instance_id] = Termination(instance_id, reason, cause)
        instance = self.by_id.get(instance_id)
        if instance is not None and instance.live and instance_id not in self.going:
            self.kept_count -= 1

    def stop(self, instance_id: str) -> None:
        """Stop, not terminate, what this plan already removes (an idle agent)."""
        assert instance_id in self.terminations
        self.stops.add(instance_id)
        self.kept_stopped += 1

    @functools.cached_property
    def _boot(self) -> tuple[str, str]:
        addresses = (self.snapshot.master_addresses if self.snapshot else None) or {}
        return boot_config_and_parts(self.pool, addresses)

    @property
    def boot_config(self) -> str:
        """The pool's boot config hash now (``boot.drift``): what launches carry."""
        return self._boot[0]

    @property
    def boot_parts(self) -> str:
        """Its parts' short hashes (``boot.drift.boot_parts``)."""
        return self._boot[1]

    def cancel(self, request_id: str, reason: str) -> None:
        self.cancellations.setdefault(request_id, reason)

    def kept(self, instance: Instance) -> bool:
        return (
            instance.live and instance.id not in self.terminations and instance.id not in self.going
        )

    def slots(self, instance: Instance, agent: Agent | None) -> int:
        """Slots of an instance: its agent's, or its type's."""
        if agent is not None:
            return agent.slots
        default = self.provider.slots_per_instance
        return self.catalog.slots_of(instance.instance_type, default)

    def price(self, instance: Instance) -> float:
        """What an instance costs per hour, by its type and purchase."""
        return self.catalog.hourly_price(instance)

    @property
    def smallest(self) -> Shape | None:
        """The shape warm headroom is kept on: the pool's smallest available."""
        return self.shapes[0] if self.shapes else None


@dataclass
class Survey:
    """What one walk over the fleet found for the rules that come after the review.

    Every instance is visited once, in fleet order; the rules then work on these few.
    Each entry is of an instance kept by the review: later rules may still remove it,
    so its users check ``ctx.terminations`` again.
    """

    # (idle since, instance id): idle longer than max_idle_agent_period.
    idle: list[tuple[datetime, str]] = field(default_factory=list)
    # Live instances with free slots, and how many: launched and not registered yet
    # (capacity on its way), idle agents, and agents with slots to spare. Pending tasks
    # go there first.
    room: list[tuple[str, Existing]] = field(default_factory=list)
    # Agents of ``room`` with nothing running that may be reaped soon: idle (by their
    # mark) half max_idle_agent_period or longer, or, in a drained pool, draining.
    waning: list[str] = field(default_factory=list)
    # (instance id, its mark changes), for instances whose marks the snapshot changes.
    marks: list[tuple[str, list[tuple[Mark, datetime | None, str]]]] = field(default_factory=list)


def slots_left(ctx: Context, floor: bool = True) -> int | None:
    """Slots the pool may still launch under its cap in slots (None: it has none): the
    cap, less the slots of the instances and spot requests this plan keeps (below 0
    when they are over it, unless ``floor``)."""
    cap = ctx.provider.slot_cap
    if cap is None:
        return None
    used = sum(
        ctx.slots(instance, agent)
        for instance, agent in zip(ctx.fleet.instances, ctx.connected, strict=True)
        if ctx.kept(instance)
    )
    requests = sum(1 for r in ctx.fleet.spot_requests if request_is_capacity(ctx, r))
    room = cap - used - requests * ctx.provider.slots_per_instance
    return max(0, room) if floor else room


def takes_tasks(agent: Agent, drain: bool) -> bool:
    """Whether pending tasks may count on the agent's free slots. A draining agent takes
    no task: only in a drained pool does its publisher enable it again for pending ones
    (the bridge does); elsewhere it is no room. A disabled one (an admin's, or one the
    master waits for) or a retired one is no room anywhere: nobody enables it for them."""
    return agent.enabled and not agent.retired and (drain or not agent.draining)


def idle_start(ctx: Context, instance: Instance, agent: Agent | None) -> datetime | None:
    """When the agent went idle: from the snapshot if connected, else from its mark."""
    if agent is not None:
        return (instance.idle_since or ctx.seen_at) if agent.idle else None
    if ctx.snapshot or instance.disconnected_since is not None:
        return None  # not connected now: the disconnection rule decides
    return instance.idle_since


def request_is_capacity(ctx: Context, request: SpotRequest) -> bool:
    """An open request, or an active one whose instance is not managed yet."""
    if request.id in ctx.cancellations:
        return False
    if request.state is RequestState.OPEN:
        return True
    return (
        request.state is RequestState.ACTIVE
        and request.instance_id is not None
        and request.instance_id not in ctx.by_id
        and request.instance_id not in ctx.terminations
    )


def live_count(ctx: Context) -> int:
    """Instances and requests that are or will become agents, after this plan's removals."""
    requests = ctx.fleet.spot_requests
    return ctx.kept_count + sum(1 for r in requests if request_is_capacity(ctx, r))


def pack_pending(
    ctx: Context,
    pending: tuple[PendingTask, ...],
    existing: list[Existing],
    live: int,
    held_slots: int = 0,
) -> Demand:
    """Where the master will put ``pending`` (``packing.pack``), within the pool's caps,
    less ``held_slots`` of the cap in slots."""
    provider = ctx.provider
    cap, machines = provider.slot_cap, provider.machine_cap
    slot_room = slots_left(ctx)
    return pack(
        pending,
        ctx.shapes,
        existing,
        room=None if machines is None else max(0, machines - live),
        max_machines=machines,
        largest_slots=provider.slots_per_instance,
        slot_room=None if slot_room is None else max(0, slot_room - held_slots),
        max_slots=cap,
        sizes=tuple({o.slots for o in ctx.catalog.offerings}),
        fitting_policy=ctx.snapshot.fitting_policy if ctx.snapshot else None,
    )
