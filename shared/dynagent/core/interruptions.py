"""What to do when the cloud says it will take a spot machine back: a pure decision.

EC2 warns two minutes before it reclaims a spot instance (the interruption warning), and
sends a rebalance recommendation earlier, when the instance is at elevated risk of one.
Waiting for the next snapshot to notice the agent gone costs a boot on top: the task
on it restarts only once a replacement has booted. So on the warning the replacement is
launched at once, when something needs it.

There is no snapshot here, and no database: what the agent is doing is read from the
instance's marks, which the reconciles wrote from the snapshots. Registered, not idle
and not disconnected means busy: its tasks will be requeued by the master when the
agent goes, and need a machine. Not registered yet means it was launched for pending
tasks that wait for it. An idle agent is replaced only when its pool has demand waiting
(the last snapshot's summary, which the reconcile keeps in the snapshot queue's tags for
``dynagent status``): otherwise the next snapshot launches for whatever needs a machine.

A rebalance recommendation only marks the instance (and is counted): it often comes
long before an interruption, or with none at all, and a replacement would bill a second
machine meanwhile. If the warning follows, it launches the replacement then.

The replacement is a machine of the reclaimed one's type, bought where it may be (its
own offering, the capacity being reclaimed, last; then larger types). When its type has
no offering with capacity left, it is the cheapest cover of its slots, as packing opens
machines for a task of that many slots: one larger machine, or machines of a size that
divides it (two 4-GPU machines for an 8-GPU one). That cover assumes the agent's tasks
may be split so (a trial's may; an 8-slot command may not, and waits for the launch the
next snapshot decides). The notice function decides again on what a launch refused in
the same invocation (``dynagent.run.repack``), so the cover comes at once.

Idempotent: the launch key derives from the pool, the instance and the notice's kind,
so a redelivered notice launches nothing more; a cover's key is that key and
``:cover``, whichever pass chose it (a warm function remembers the refusals and chooses
it first), and each launch call's token derives from the key and the offering. The
mark (and the count) is written only by the first delivery.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dynagent.core.config import Pool
from dynagent.core.durations import format_duration
from dynagent.core.fleet import Fleet, Instance, Mark, RequestState
from dynagent.core.offerings import Catalog, Offering, Purchase, offering_key
from dynagent.core.packing import pack
from dynagent.core.plan import DrainNotice, Interruption, Launch, MarkWrite, Plan
from dynagent.core.snapshot import PendingTask

# The notices this decides on, as the kinds plan.INTERRUPTION_KINDS names them.
INTERRUPTION = "interruption"
REBALANCE = "rebalance"
NOTICE_MARKS = {INTERRUPTION: Mark.INTERRUPTED_AT, REBALANCE: Mark.REBALANCE_AT}


@dataclass(frozen=True)
class Notice:
    """The cloud's word about one instance."""

    instance_id: str
    kind: str  # INTERRUPTION or REBALANCE
    # When the cloud sent it: the mark's value, and what a retry's launch derives from.
    time: datetime

    def __post_init__(self) -> None:
        if self.kind not in NOTICE_MARKS:
            raise ValueError(f"unknown notice kind {self.kind!r}")


def launch_key(pool: str, notice: Notice) -> str:
    return f"{pool}:{notice.kind}:{notice.instance_id}"


def cover_key(pool: str, notice: Notice) -> str:
    """The launch key of a cover: the same whichever pass, or re-pack round, chose it."""
    return f"{launch_key(pool, notice)}:cover"


def plan_interruption(
    pool: Pool, fleet: Fleet, notice: Notice, now: datetime, pending_slots: int = 0
) -> Plan:
    """Mark the instance, and for a warning launch its replacement if anything needs it.

    ``fleet`` is what the pool's provider observed; an instance not in it is not the
    pool's (unmanaged, another pool's, or gone already), and changes nothing.
    ``pending_slots`` is the demand the pool's last snapshot left waiting (the summary
    a reconcile keeps for ``dynagent status``; 0 when none is known or it is stale).
    """
    empty = Plan(pool=pool.name, launch_key=launch_key(pool.name, notice), launch_at=notice.time)
    instance = fleet.instance(notice.instance_id)
    if instance is None or not instance.live:
        return empty  # a stopped one is the sweep's to remove
    mark = NOTICE_MARKS[notice.kind]
    first = mark not in instance.marks
    marks: tuple[MarkWrite, ...] = ()
    interruptions: tuple[Interruption, ...] = ()
    if first:
        reason = f"EC2 {notice.kind} notice at {notice.time:%H:%M:%S}"
        marks = (MarkWrite(mark, notice.time, (instance.id,), reason),)
        interruptions = (Interruption(instance.id, notice.kind),)
    launches: tuple[Launch, ...] = ()
    waiting: tuple[str, ...] = ()
    key = empty.launch_key
    need = _need(pool, fleet, instance, now, pending_slots) if notice.kind == INTERRUPTION else None
    if need is not None:
        cap = pool.provider.machine_cap
        room = None if cap is None else cap - _counted(fleet, instance)
        if room is not None and room <= 0:
            name = "max_instances" if pool.provider.offerings is None else "offerings.max_machines"
            waiting = (f"replacement for {instance.id}: at {name} ({cap})",)
        else:
            reason = f"replaces {instance.id}, which the cloud reclaims: {need}"
            launches, waiting, covered = _replacement(pool, fleet, instance, reason, room)
            key = cover_key(pool.name, notice) if covered else key
    drains: tuple[DrainNotice, ...] = ()
    if notice.kind == INTERRUPTION and instance.registered_at is not None:
        # The master places no new work there in its last two minutes (the agent's id
        # is its instance's); sent on every notice, as a lost one is not sent again.
        why = f"EC2 reclaims its spot machine (interruption notice at {notice.time:%H:%M:%S})"
        drains = (DrainNotice(instance.id, notice.time, why),)
    return Plan(
        pool=pool.name,
        launch_key=key,
        launch_at=notice.time,
        launches=launches,
        marks=marks,
        waiting=waiting,
        interruptions=interruptions,
        drain_notices=drains,
    )


def _need(
    pool: Pool, fleet: Fleet, instance: Instance, now: datetime, pending_slots: int
) -> str | None:
    """Why the interrupted instance needs a replacement, or None if nothing does."""
    marks = instance.marks
    if instance.registered_at is None:
        age = format_duration(now - instance.launched_at)
        return f"launched {age} ago for pending tasks, not registered yet"
    if Mark.IDLE_SINCE not in marks and Mark.DISCONNECTED_SINCE not in marks:
        return "its agent is busy: its tasks restart on the replacement"
    minimum = pool.provider.min_instances
    if _counted(fleet, instance) < minimum:
        return f"keep min_instances ({minimum})"
    if pending_slots > 0:
        # An idle agent the master would have placed waiting work on.
        return f"its pool has demand waiting ({pending_slots} slots in the last snapshot)"
    return None


def _counted(fleet: Fleet, interrupted: Instance) -> int:
    """Live instances and open spot requests the pool keeps, as decide counts them: not
    the interrupted one, nor others going away."""
    instances = sum(
        1
        for i in fleet.instances
        if i.live and i.id != interrupted.id and Mark.INTERRUPTED_AT not in i.marks
    )
    requests = sum(1 for r in fleet.spot_requests if r.state is RequestState.OPEN)
    return instances + requests


def _replacement(
    pool: Pool, fleet: Fleet, instance: Instance, reason: str, room: int | None
) -> tuple[tuple[Launch, ...], tuple[str, ...], bool]:
    """The launches that replace ``instance``, at most ``room`` machines, why any of it
    must wait, and whether they are a cover (its type had no offering left)."""
    catalog: Catalog = pool.provider.catalog(fleet.spot_prices, fleet.unavailable)
    # An instance of unknown type is of the pool's first (its one type without offerings).
    first = catalog.offerings[0].instance_type if catalog.offerings else ""
    instance_type = instance.instance_type or first
    shapes = catalog.shapes()
    own = next((s for s in shapes if s.instance_type == instance_type), None)
    if own is not None:
        offerings = _reclaimed_last(catalog.fallbacks(own), _own(instance))
        return (Launch(reason=reason, offerings=offerings, cause="interrupted"),), (), False
    slots = max(1, catalog.slots_of(instance_type, pool.provider.slots_per_instance))
    largest = max((shape.slots for shape in shapes), default=0)
    if largest <= 0:
        return (), (f"replacement for {instance.id}: no offering has capacity now",), True
    task = PendingTask(f"replacement for {instance.id}", slots)
    provider = pool.provider
    cover = pack(
        (task,), shapes, (), room, provider.machine_cap, largest, max_slots=provider.slot_cap
    )
    launches = tuple(
        Launch(
            reason=f"{reason}; {instance_type} has no capacity: {machine.shape.instance_type}",
            offerings=catalog.fallbacks(machine.shape),
            cause="interrupted",
        )
        for machine in cover.new_machines
    )
    why = [why for _, why in cover.waiting] + [u.reason for u in cover.unschedulable]
    return launches, tuple(f"replacement for {instance.id}: {w}" for w in why), True


def _own(instance: Instance) -> str:
    """The key of the offering the reclaimed machine was bought at."""
    purchase = Purchase.SPOT if instance.spot else Purchase.ON_DEMAND
    return offering_key(instance.instance_type, instance.zone, purchase)


def _reclaimed_last(fallbacks: tuple[Offering, ...], own: str) -> tuple[Offering, ...]:
    """The capacity being reclaimed is the least likely to hold a new machine."""
    return tuple(o for o in fallbacks if o.key != own) + tuple(o for o in fallbacks if o.key == own)
