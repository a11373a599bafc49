"""The decision: a pure function of (pool, observed fleet, snapshot or none, now) -> Plan.

It calls no cloud and reads no clock, so the Lambda, the Cloud Function, ``dynagent
plan``, the simulator and the tests all run exactly this code. Every action it returns
says why.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dynagent.boot.master import MasterUrlError, master_address
from dynagent.config import Pool, ProviderConfig, Settings
from dynagent.durations import format_duration
from dynagent.fitting import agents_for_zero_slot, zero_slot_room
from dynagent.fleet import Fleet, Instance, InstanceState, Mark, RequestState, SpotRequest
from dynagent.offerings import Catalog, Offering, Shape
from dynagent.packing import AT_CAP, AT_MAX, Demand, Existing, NewMachine, pack
from dynagent.plan import (
    Adoption,
    Cancellation,
    Interruption,
    Launch,
    MarkWrite,
    Plan,
    Termination,
    Unschedulable,
)
from dynagent.snapshot import DRAINING_REPORT_LEASE, Agent, PendingTask, Snapshot

_ID = operator.attrgetter("id")
_SLOTS = operator.attrgetter("slots")
_STATE = operator.attrgetter("state")

# Spot request status codes that will not turn into an instance by waiting.
UNFULFILLABLE_SPOT_STATUSES = frozenset(
    {
        "bad-parameters", "capacity-not-available", "capacity-oversubscribed",
        "constraint-not-fulfillable", "launch-group-constraint", "az-group-constraint",
        "placement-group-constraint", "price-too-low", "not-scheduled-yet",
        "schedule-expired", "system-error", "limit-exceeded",
    }
)  # fmt: skip

# EC2 reclaims a spot machine two minutes after its interruption warning. One still
# running well past that was not reclaimed after all: it counts as the pool's again
# (its replacement is reaped by the usual rules if nothing needs it).
INTERRUPTION_GRACE = timedelta(minutes=10)
# Machines the zero-slot rule may want when no cap counts them.
_NO_ROOM_LIMIT = 1 << 62


@dataclass
class _Context:
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
    # Each instance's agent, in fleet order (None: not connected), looked up once.
    connected: list[Agent | None] = field(init=False)
    # When the snapshot saw what it says (never later than now).
    seen_at: datetime = field(init=False)
    # What the pool may buy now, less what the cloud recently had no capacity for.
    catalog: Catalog = field(init=False)
    shapes: tuple[Shape, ...] = field(init=False)
    # The pending tasks of no slots: read once, as several rules ask.
    zero_slot: list[PendingTask] = field(init=False)

    def __post_init__(self) -> None:
        self.seen_at = min(self.snapshot.time, self.now) if self.snapshot else self.now
        pending = self.snapshot.pending if self.snapshot else ()
        # map and ``in`` loop in C over what may be thousands of tasks.
        self.zero_slot = [t for t in pending if t.slots == 0] if 0 in map(_SLOTS, pending) else []
        self.catalog = self.pool.provider.catalog(self.fleet.spot_prices, self.fleet.unavailable)
        self.shapes = self.catalog.shapes()
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
class _Survey:
    """What one walk over the fleet found for the rules that come after the review.

    Every instance is visited once, in fleet order; the rules then work on these few.
    Each entry is of an instance kept by the review: later rules may still remove it,
    so its users check ``ctx.terminations`` again.
    """

    # (idle since, instance id): idle for max_idle_agent_period or longer.
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


def decide(
    pool: Pool,
    fleet: Fleet,
    snapshot: Snapshot | None,
    now: datetime,
    settings: Settings | None = None,
) -> Plan:
    """What to do to ``pool`` now, given what the cloud shows and the master said."""
    ctx = _Context(pool, fleet, snapshot, now, settings or Settings())
    _review_spot_requests(ctx)
    survey = _walk_fleet(ctx)
    counted_on = _counted_on(ctx, survey)
    _reap_idle(ctx, survey.idle, survey.room, counted_on)
    _trim_to_max(ctx)
    launches, demand = _launches(ctx, survey.room)
    addresses = (snapshot.master_addresses if snapshot else None) or {}
    held = _master_unknown(pool, addresses) if launches else None
    waiting = [f"{task.task} ({task.slots} slots): {why}" for task, why in demand.waiting]
    if held:
        waiting.append(f"{len(launches)} launches held: {held}")
        launches = ()
    return Plan(
        pool=pool.name,
        launch_key=_launch_key(pool.name, snapshot, now),
        launch_at=snapshot.time if snapshot else now.replace(second=0, microsecond=0),
        launches=launches,
        terminations=tuple(ctx.terminations.values()),
        cancellations=tuple(Cancellation(i, r) for i, r in ctx.cancellations.items()),
        # Adopted before terminated: the managed tags are what allow the terminate.
        adoptions=tuple(ctx.adoptions),
        marks=_mark_writes(ctx, survey.marks + _still_wanted(ctx, counted_on)),
        unschedulable=tuple(demand.unschedulable),
        waiting=tuple(waiting),
        pending_at_max=any(why.startswith(AT_CAP) for _, why in demand.waiting),
        unmatched_agents=tuple(sorted(ctx.unmatched)),
        interruptions=tuple(ctx.interruptions),
        master_addresses=tuple(sorted(addresses.items())),
    )


def _master_unknown(pool: Pool, addresses: dict[str, str]) -> str | None:
    """Why no agent could reach the master, or None: an alias in ``master_url`` that no
    snapshot resolved (``boot.master``)."""
    try:
        master_address(pool.provider.master_url).resolved(addresses)
    except MasterUrlError as error:
        return str(error)
    return None


def _launches(ctx: _Context, room: list[tuple[str, Existing]]) -> tuple[tuple[Launch, ...], Demand]:
    """New machines for pending tasks, then up to min_instances, then warm headroom."""
    provider = ctx.provider
    live = _live_count(ctx)
    existing = _existing(ctx, room)
    pending = ctx.snapshot.pending if ctx.snapshot else ()
    if ctx.zero_slot:
        pending = tuple(task for task in pending if task.slots > 0)
    demand = _pack(ctx, pending, existing, live)
    catalog = ctx.catalog
    launches = _for_demand(catalog, demand.new_machines)
    smallest = ctx.smallest
    launches += _for_zero_slot(ctx, demand, smallest, live, len(launches))
    if smallest is None:
        return tuple(launches), demand
    below_min = provider.min_instances - live - len(launches)
    launches += [
        Launch(
            reason=f"keep min_instances ({provider.min_instances})",
            offerings=catalog.fallbacks(smallest),
            cause="min_instances",
        )
    ] * max(0, below_min)
    launches += _headroom(ctx, demand, smallest, live + len(launches))
    return tuple(launches), demand


def _for_zero_slot(
    ctx: _Context, demand: Demand, smallest: Shape | None, live: int, planned: int
) -> list[Launch]:
    """Agents for the pending zero-slot tasks no agent has room for.

    An agent runs up to max_aux_containers_per_agent zero-slot tasks, busy or not
    (``fitting.zero_slot_room``): they wait only where every agent that takes tasks is
    full of them, or the pool has none. For those, Determined's provisioner wants one
    agent per max_aux_containers_per_agent of them (``scaling.go``
    ``calculateDesiredNewAgentNum``: ``fitting.agents_for_zero_slot``), of the smallest
    shape here, within the pool's caps. Machines still booting, open spot requests and
    the ``planned`` launches of this plan count as agents with all that room. With
    max_aux_containers_per_agent 0 no agent ever runs one: they are unschedulable.
    """
    tasks = ctx.zero_slot
    if not tasks:
        return []
    max_aux = ctx.pool.max_aux_containers_per_agent
    if max_aux == 0:
        demand.unschedulable += [
            Unschedulable(
                t.task, 0, "max_aux_containers_per_agent is 0: no agent runs a task of no slots"
            )
            for t in tasks
        ]
        return []
    left = tasks[_zero_slot_room(ctx, max_aux, len(tasks)) + planned * max_aux :]
    if not left or smallest is None:
        return []
    need = agents_for_zero_slot(len(left), max_aux)
    budget = demand.budget
    cap = ctx.provider.machine_cap
    room = _NO_ROOM_LIMIT if cap is None else max(0, cap - live - planned)
    allowed = budget.count(smallest.slots) if budget is not None else room
    count = min(need, allowed)
    if count < need:
        why = budget.why(smallest.slots) if budget else f"{AT_MAX} ({cap})"
        demand.waiting += [(task, why) for task in left[count * max_aux :]]
    offerings = ctx.catalog.fallbacks(smallest)
    chunks = [[t.task for t in left[k * max_aux : (k + 1) * max_aux]] for k in range(count)]
    return [
        Launch(
            reason=f"pending zero-slot tasks need an agent: {', '.join(names)}",
            tasks=tuple(names),
            offerings=offerings,
            cause="zero_slot",
        )
        for names in chunks
    ]


def _zero_slot_room(ctx: _Context, max_aux: int, wanted: int) -> int:
    """Zero-slot tasks the machines this plan keeps may take, counted up to ``wanted``:
    an agent that takes tasks, its room (``fitting.zero_slot_room``; a draining or
    disabled one has none, ``agent_state.go`` ``numEmptyZeroSlots``); a machine not
    connected (booting, or away for now) and an open spot request, all of it once up."""
    drain = ctx.provider.drain_idle_agents
    room = max_aux * sum(1 for r in ctx.fleet.spot_requests if _request_is_capacity(ctx, r))
    for instance, agent in zip(ctx.fleet.instances, ctx.connected, strict=True):
        if room >= wanted:
            break
        if not ctx.kept(instance):
            continue
        if agent is None:
            room += max_aux
        elif _takes_tasks(agent, drain):
            room += zero_slot_room(agent.tasks, agent.used_slots, max_aux)
    return room


def _for_demand(catalog: Catalog, machines: list[NewMachine]) -> list[Launch]:
    """A launch for each new machine pending tasks need; thousands in a large pass."""
    launches = []
    shape: Shape | None = None
    offerings: tuple[Offering, ...] = ()
    for machine in machines:
        # Machines of one shape come in runs: their fallbacks are asked once per run.
        if machine.shape is not shape:
            shape = machine.shape
            offerings = catalog.fallbacks(shape)
        tasks = machine.tasks
        launches.append(Launch(f"pending tasks: {', '.join(tasks)}", tuple(tasks), offerings))
    return launches


def _pack(
    ctx: _Context, pending: tuple[PendingTask, ...], existing: list[Existing], live: int
) -> Demand:
    """Where the master will put ``pending`` (``packing.pack``), within the pool's caps."""
    provider = ctx.provider
    cap, machines = provider.slot_cap, provider.machine_cap
    return pack(
        pending,
        ctx.shapes,
        existing,
        room=None if machines is None else max(0, machines - live),
        max_machines=machines,
        largest_slots=provider.slots_per_instance,
        slot_room=_slot_room(ctx),
        max_slots=cap,
        sizes=tuple({o.slots for o in ctx.catalog.offerings}),
        fitting_policy=ctx.snapshot.fitting_policy if ctx.snapshot else None,
    )


def _slot_room(ctx: _Context, floor: bool = True) -> int | None:
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
    requests = sum(1 for r in ctx.fleet.spot_requests if _request_is_capacity(ctx, r))
    room = cap - used - requests * ctx.provider.slots_per_instance
    return max(0, room) if floor else room


def _existing(ctx: _Context, room: list[tuple[str, Existing]]) -> list[Existing]:
    """Machines pending tasks can go to before new ones, if this plan keeps them: those
    not registered yet, agents with free slots, and spot requests.

    An idle agent counts because a pending task that fits on it is the master's to place
    (the snapshot caught it just before), and a task larger than one instance can take
    it as one of its whole instances.
    """
    existing = [machine for instance_id, machine in room if instance_id not in ctx.terminations]
    slots = ctx.provider.slots_per_instance
    requests = sum(1 for r in ctx.fleet.spot_requests if _request_is_capacity(ctx, r))
    return existing + [Existing(slots, slots)] * requests


def _headroom(ctx: _Context, demand: Demand, smallest: Shape, live: int) -> list[Launch]:
    """Machines of the smallest shape to keep ``warm_headroom_slots`` free slots."""
    provider = ctx.provider
    wanted = provider.warm_headroom_slots
    # Without a snapshot the free slots of busy agents are unknown, and would count as
    # none: the sweep would launch headroom that is there. The next snapshot keeps it.
    if not wanted or smallest.slots <= 0 or ctx.snapshot is None:
        return []
    free = sum(f for slots, f in demand.free_after if slots == smallest.slots)
    free += sum(
        m.shape.slots - m.used for m in demand.new_machines if m.shape.slots == smallest.slots
    )
    missing = -(-(wanted - free) // smallest.slots)
    cap = provider.machine_cap
    count = missing if cap is None else min(missing, cap - live)
    if demand.budget is not None and provider.slot_cap is not None:
        count = min(count, demand.budget.count(smallest.slots))
    if count <= 0:
        return []
    launch = Launch(
        reason=f"keep warm_headroom_slots ({wanted}): {free} free on {smallest.instance_type}",
        offerings=ctx.catalog.fallbacks(smallest),
        cause="headroom",
    )
    return [launch] * count


def _launch_key(pool: str, snapshot: Snapshot | None, now: datetime) -> str:
    if snapshot:
        return f"{pool}:{snapshot.seq}"
    # A sweep launches only to keep min_instances; one key per minute.
    return f"{pool}:sweep:{now:%Y%m%dT%H%M}"


def _review_spot_requests(ctx: _Context) -> None:
    if not ctx.fleet.spot_requests:
        return
    managed = ctx.by_id
    for request in ctx.fleet.spot_requests:
        if request.state is RequestState.CANCELLED_INSTANCE_RUNNING and request.instance_id:
            if request.instance_id not in managed:
                ctx.adoptions.append(Adoption(request.id, request.instance_id))
            ctx.terminate(
                request.instance_id,
                f"its spot request {request.id} was cancelled",
                "spot_cancelled",
            )
        elif request.state is RequestState.OPEN:
            reason = _stale_request_reason(ctx, request)
            if reason:
                ctx.cancel(request.id, reason)
        elif (
            request.state is RequestState.ACTIVE
            and request.instance_id
            and request.instance_id not in managed
        ):
            ctx.adoptions.append(Adoption(request.id, request.instance_id))


def _stale_request_reason(ctx: _Context, request: SpotRequest) -> str | None:
    waited = ctx.now - request.created_at
    # The starting period bounds how long capacity may take to arrive, request or not.
    limit = ctx.provider.max_agent_starting_period
    if waited >= limit:
        return (
            f"open for {format_duration(waited)} "
            f"(max_agent_starting_period {format_duration(limit)})"
        )
    if request.status_code in UNFULFILLABLE_SPOT_STATUSES:
        stuck = ctx.now - (request.status_updated_at or request.created_at)
        if stuck >= ctx.settings.spot_request_grace:
            return f"status {request.status_code} for {format_duration(stuck)}"
    return None


def _walk_fleet(ctx: _Context) -> _Survey:
    """Review each instance (stopped, never registered, disconnected too long: terminate)
    and note what the later rules need of those it keeps."""
    survey = _Survey()
    # since <= now - period is now - since >= period, with one subtraction per pass.
    cutoff = ctx.now - ctx.provider.max_idle_agent_period
    half = ctx.now - ctx.provider.max_idle_agent_period / 2
    terminations, with_snapshot = ctx.terminations, ctx.snapshot is not None
    # A draining report is a lease for the terminate: past it, the publisher may have
    # enabled the agent again and the master placed work there (DRAINING_REPORT_LEASE).
    drain = ctx.provider.drain_idle_agents
    drain_lease = ctx.snapshot is not None and ctx.now - ctx.snapshot.time <= DRAINING_REPORT_LEASE
    # This loop runs once per instance of fleets of tens of thousands: the names it asks
    # of each are local, and Instance.live is inlined.
    running, starting = InstanceState.RUNNING, InstanceState.STARTING
    registered, idle, interrupted = Mark.REGISTERED, Mark.IDLE_SINCE, Mark.INTERRUPTED_AT
    disconnected = Mark.DISCONNECTED_SINCE
    for instance, agent in zip(ctx.fleet.instances, ctx.connected, strict=True):
        state, marks = instance.state, instance.marks
        if state is not running and state is not starting:
            _remove_stopped(ctx, instance)
            continue
        if interrupted in marks and _going_away(ctx, instance, survey):
            continue
        if agent is None:
            _review_absent(ctx, instance)
        if instance.id in terminations:
            continue
        marked = False
        if agent is not None:
            # Whether its marks already say what the snapshot does (agent.idle inlined).
            used = agent.used_slots
            marked = (
                registered in marks
                and disconnected not in marks
                and (idle in marks) == (used == 0 and agent.tasks == 0)
            )
            if marked and used:
                # Busy, and its marks say so: the common case; only spare slots to note.
                if used < agent.slots and _takes_tasks(agent, drain):
                    spare = Existing(agent.slots, agent.slots - used, arriving=False)
                    survey.room.append((instance.id, spare))
                continue
        since = _idle_since(ctx, instance, agent)
        if drain:
            # The master drained it (the bridge waited out the idle period first) and
            # nothing runs on it: nothing new can land there before the terminate.
            if drain_lease and agent is not None and agent.draining and agent.idle:
                survey.idle.append((since or ctx.seen_at, instance.id))
        elif since is not None and since <= cutoff:
            survey.idle.append((since, instance.id))
        if agent is None and instance.registered_at is None:
            slots = ctx.slots(instance, None)
            survey.room.append((instance.id, Existing(slots, slots)))
        elif agent is None and not with_snapshot and since is not None:
            # The sweep knows an agent's free slots only from its idle mark: all of them.
            # The warm headroom guard counts them, so the sweep keeps what it needs.
            slots = ctx.slots(instance, None)
            survey.room.append((instance.id, Existing(slots, slots, arriving=False)))
        elif agent is not None and agent.used_slots < agent.slots and _takes_tasks(agent, drain):
            free = agent.slots - agent.used_slots
            survey.room.append((instance.id, Existing(agent.slots, free, arriving=False)))
            if agent.idle and (
                agent.draining if drain else (mark := marks.get(idle)) is not None and mark <= half
            ):
                survey.waning.append(instance.id)
        if with_snapshot and not marked:
            changes = _mark_changes(instance, agent, ctx.seen_at)
            if changes:
                survey.marks.append((instance.id, changes))
    return survey


def _takes_tasks(agent: Agent, drain: bool) -> bool:
    """Whether pending tasks may count on the agent's free slots. A draining agent takes
    no task: only in a drained pool does its publisher enable it again for pending ones
    (the bridge does); elsewhere it is no room. A disabled one (an admin's, or one the
    master waits for) is no room anywhere: nobody enables it for them."""
    return agent.enabled and (drain or not agent.draining)


def _remove_stopped(ctx: _Context, instance: Instance) -> None:
    """A stopped instance bills for its disks and will not serve again: terminate it,
    saying whether the cloud took it back (then it is an interruption, for metrics)."""
    reason = f"instance is {instance.state.value}"
    if instance.preempted:
        ctx.interruptions.append(Interruption(instance.id, "preempted"))
        ctx.terminate(instance.id, f"{reason}: preempted by the cloud", "interrupted")
    elif instance.interrupted_at is not None:
        ctx.terminate(instance.id, f"{reason} after its interruption warning", "interrupted")
    else:
        ctx.terminate(instance.id, reason, "stopped")


def _going_away(ctx: _Context, instance: Instance, survey: _Survey) -> bool:
    """A live instance marked interrupted: the cloud reclaims it within minutes, so it is
    not terminated (nothing to gain, and a busy agent's task runs until then), not
    capacity for pending tasks, and not counted toward max_instances, so the replacement
    the interruption handler launched, or this pass launches, is not held back by it.

    Returns False when the mark is stale (the cloud kept the machine after all): the
    mark is cleared and the instance counts as any other from this pass on.
    """
    if instance.id in ctx.terminations:  # removed already (its spot request cancelled)
        return True
    when = instance.interrupted_at
    assert when is not None
    if ctx.now - when >= INTERRUPTION_GRACE:
        survey.marks.append(
            (
                instance.id,
                [
                    (
                        Mark.INTERRUPTED_AT,
                        None,
                        f"still running {format_duration(ctx.now - when)} "
                        "after its interruption warning",
                    )
                ],
            )
        )
        return False
    ctx.going.add(instance.id)
    ctx.kept_count -= 1
    return True


def _review_absent(ctx: _Context, instance: Instance) -> None:
    """A live instance with no agent in the snapshot: still starting, or gone too long."""
    provider = ctx.provider
    if instance.registered_at is None:
        starting_for = ctx.now - instance.launched_at
        limit = provider.max_agent_starting_period
        if starting_for >= limit:
            ctx.terminate(
                instance.id,
                f"launched {format_duration(starting_for)} ago and never registered "
                f"(max_agent_starting_period {format_duration(limit)})",
                "never_registered",
            )
        return
    since = _disconnected_since(ctx, instance)
    limit = provider.max_disconnected_period
    if since is not None and ctx.now - since >= limit:
        ctx.terminate(
            instance.id,
            f"registered agent missing from snapshots for {format_duration(ctx.now - since)} "
            f"(max_disconnected_period {format_duration(limit)})",
            "disconnected",
        )


def _disconnected_since(ctx: _Context, instance: Instance) -> datetime | None:
    if instance.disconnected_since is not None:
        return instance.disconnected_since
    return ctx.seen_at if ctx.snapshot else None


def _idle_since(ctx: _Context, instance: Instance, agent: Agent | None) -> datetime | None:
    """When the agent went idle: from the snapshot if connected, else from its mark."""
    if agent is not None:
        return (instance.idle_since or ctx.seen_at) if agent.idle else None
    if ctx.snapshot or instance.disconnected_since is not None:
        return None  # not connected now: the disconnection rule decides
    return instance.idle_since


def _counted_on(ctx: _Context, survey: _Survey) -> set[str]:
    """Idle agents that pending tasks are packed onto: neither this pass nor the sweep
    may reap them while the tasks wait.

    A task larger than one machine waits for all its machines to be idle at once, so it
    counts an idle agent as one of them; reaping that agent meanwhile would make it wait
    for a second boot (found on the ITP traces: a 16-GPU task waited 355 s where
    Determined's provisioner, which never counts idle agents, took 184 s).
    """
    pending = ctx.snapshot.pending if ctx.snapshot else ()
    if not pending:
        return set()
    # Only agents idle half their period or longer can be reaped soon or need their mark
    # renewed; with none, there is nothing to keep (the common case: no second packing).
    # In a drained pool only drained agents can be reaped; the bridge enables them again
    # for the tasks. The walk noted both kinds (``_Survey.waning``).
    if not survey.waning:
        return set()
    idle = set(survey.waning)
    candidates = [(i, m) for i, m in survey.room if i not in ctx.terminations]
    sized = tuple(task for task in pending if task.slots > 0)
    demand = _pack(ctx, sized, [machine for _, machine in candidates], _live_count(ctx))
    return {
        instance_id
        for (instance_id, machine), (_, free) in zip(candidates, demand.free_after, strict=True)
        if free < machine.free and instance_id in idle
    }


def _still_wanted(
    ctx: _Context, counted_on: set[str]
) -> list[tuple[str, list[tuple[Mark, datetime | None, str]]]]:
    """Idle agents pending tasks count on are idle since now, as far as reaping goes: the
    sweep reads the mark and must not reap them either. Written once half their idle
    period has passed, not on every pass."""
    half = ctx.provider.max_idle_agent_period / 2
    changes: list[tuple[str, list[tuple[Mark, datetime | None, str]]]] = []
    for instance_id in sorted(counted_on):
        since = ctx.by_id[instance_id].idle_since
        if since is not None and ctx.now - since >= half:
            changes.append(
                (instance_id, [(Mark.IDLE_SINCE, ctx.seen_at, "pending tasks count on it")])
            )
    return changes


def _reap_idle(
    ctx: _Context,
    idle: list[tuple[datetime, str]],
    room: list[tuple[str, Existing]],
    counted_on: set[str],
) -> None:
    """Terminate agents idle past max_idle_agent_period, not below min_instances: the
    costliest first (they save most), then the oldest idle; not those pending tasks are
    counted on, and machines of the smallest shape only while the warm headroom stays."""
    provider = ctx.provider
    limit = provider.max_idle_agent_period
    live = _live_count(ctx)
    by_id = ctx.by_id if idle else {}
    headroom = _HeadroomGuard(ctx, room)
    ranked = sorted(idle, key=lambda item: (-ctx.price(by_id[item[1]]), item))
    # A pending zero-slot task is the master's to place on any agent: keep one for it.
    aux = ctx.pool.max_aux_containers_per_agent
    floor = max(provider.min_instances, agents_for_zero_slot(len(ctx.zero_slot), aux))
    for since, instance_id in ranked:
        if live <= floor:
            break
        if instance_id in counted_on or not headroom.may_remove(instance_id):
            continue
        reason = f"idle for {format_duration(ctx.now - since)}"
        if provider.drain_idle_agents:
            reason = f"drained by the master and empty ({reason})"
        ctx.terminate(
            instance_id, f"{reason} (max_idle_agent_period {format_duration(limit)})", "idle"
        )
        live -= 1


class _HeadroomGuard:
    """Keeps ``warm_headroom_slots`` free on the smallest shape while idle agents go."""

    def __init__(self, ctx: _Context, room: list[tuple[str, Existing]]) -> None:
        smallest = ctx.smallest
        self.wanted = ctx.provider.warm_headroom_slots
        self.slots = smallest.slots if smallest else 0
        self.free = {i: m.free for i, m in room if m.slots == self.slots} if self.wanted else {}
        self.total = sum(self.free.values())

    def may_remove(self, instance_id: str) -> bool:
        free = self.free.get(instance_id)
        if free is None:
            return True
        if self.total - free < self.wanted:
            return False
        self.total -= free
        return True


def _trim_to_max(ctx: _Context) -> None:
    """Over the pool's caps (``max_instances``; with offerings ``max_slots`` and any
    ``max_machines``): open requests first, then idle, never-registered, newest."""
    provider = ctx.provider
    machines, cap = provider.machine_cap, provider.slot_cap
    excess = 0 if machines is None else _live_count(ctx) - machines
    slot_room = _slot_room(ctx, floor=False)
    over = 0 if slot_room is None else -slot_room
    if excess <= 0 and over <= 0:
        return
    if provider.offerings is None:
        reason = f"over max_instances ({machines})"
    elif excess > 0:
        reason = f"over offerings.max_machines ({machines})"
    else:
        reason = f"over max_slots ({cap})"
    requests = sorted(
        (r for r in ctx.fleet.spot_requests if _request_is_capacity(ctx, r)),
        key=lambda r: (r.state is RequestState.ACTIVE, -r.created_at.timestamp()),
    )
    for request in requests:
        if excess <= 0 and over <= 0:
            return
        ctx.cancel(request.id, reason)
        if request.state is RequestState.ACTIVE and request.instance_id:
            ctx.terminate(request.instance_id, reason, "over_max")
        excess, over = excess - 1, over - provider.slots_per_instance
    candidates = sorted(
        (
            pair
            for pair in zip(ctx.fleet.instances, ctx.connected, strict=True)
            if ctx.kept(pair[0])
        ),
        key=lambda pair: _trim_rank(ctx, *pair),
    )
    for instance, agent in candidates:
        if excess <= 0 and over <= 0:
            return
        ctx.terminate(instance.id, reason, "over_max")
        excess, over = excess - 1, over - ctx.slots(instance, agent)


def _trim_rank(ctx: _Context, instance: Instance, agent: Agent | None) -> tuple[int, float]:
    idle_since = _idle_since(ctx, instance, agent)
    if idle_since is not None:
        return (0, idle_since.timestamp())  # oldest idle first
    if instance.registered_at is None and agent is None:
        return (1, -instance.launched_at.timestamp())
    return (2, -instance.launched_at.timestamp())  # then the newest


def _request_is_capacity(ctx: _Context, request: SpotRequest) -> bool:
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


def _live_count(ctx: _Context) -> int:
    """Instances and requests that are or will become agents, after this plan's removals."""
    requests = ctx.fleet.spot_requests
    return ctx.kept_count + sum(1 for r in requests if _request_is_capacity(ctx, r))


def _mark_writes(
    ctx: _Context, changes: list[tuple[str, list[tuple[Mark, datetime | None, str]]]]
) -> tuple[MarkWrite, ...]:
    """What the snapshot taught about each instance, grouped into one write per value."""
    groups: dict[tuple[Mark, datetime | None, str], list[str]] = defaultdict(list)
    for instance_id, instance_changes in changes:
        if instance_id in ctx.terminations:
            continue
        for change in instance_changes:
            groups[change].append(instance_id)
    return tuple(
        MarkWrite(mark, value, tuple(ids), reason) for (mark, value, reason), ids in groups.items()
    )


def _mark_changes(
    instance: Instance, agent: Agent | None, seen_at: datetime
) -> list[tuple[Mark, datetime | None, str]]:
    changes: list[tuple[Mark, datetime | None, str]] = []
    marks = instance.marks
    if agent is None:
        if instance.registered_at is not None and Mark.DISCONNECTED_SINCE not in marks:
            changes.append((Mark.DISCONNECTED_SINCE, seen_at, "agent missing from the snapshot"))
        return changes
    if Mark.REGISTERED not in marks:
        changes.append((Mark.REGISTERED, seen_at, "agent connected"))
    if Mark.DISCONNECTED_SINCE in marks:
        changes.append((Mark.DISCONNECTED_SINCE, None, "agent connected again"))
    if agent.idle and Mark.IDLE_SINCE not in marks:
        changes.append((Mark.IDLE_SINCE, seen_at, "agent idle"))
    elif not agent.idle and Mark.IDLE_SINCE in marks:
        changes.append((Mark.IDLE_SINCE, None, "agent busy"))
    return changes
