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

Idempotent: the launch key derives from the pool, the instance and the notice's kind,
so a redelivered notice launches nothing more; the mark (and the count) is written
only by the first delivery.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dynagent.config import Pool
from dynagent.durations import format_duration
from dynagent.fleet import Fleet, Instance, Mark, RequestState
from dynagent.offerings import Catalog, Offering, Purchase, Shape, offering_key
from dynagent.plan import Interruption, Launch, MarkWrite, Plan

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
    need = _need(pool, fleet, instance, now, pending_slots) if notice.kind == INTERRUPTION else None
    if need is not None:
        provider = pool.provider
        if _counted(fleet, instance) >= provider.max_instances:
            waiting = (
                f"replacement for {instance.id}: at max_instances ({provider.max_instances})",
            )
        else:
            launch = Launch(
                reason=f"replaces {instance.id}, which the cloud reclaims: {need}",
                offerings=_offerings(pool, fleet, instance),
                cause="interrupted",
            )
            launches = (launch,)
    return Plan(
        pool=pool.name,
        launch_key=empty.launch_key,
        launch_at=notice.time,
        launches=launches,
        marks=marks,
        waiting=waiting,
        interruptions=interruptions,
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


def _offerings(pool: Pool, fleet: Fleet, instance: Instance) -> tuple[Offering, ...]:
    """Where the replacement may be bought: the fallbacks of the interrupted machine's
    shape, with its own offering (the capacity being reclaimed) tried last."""
    catalog: Catalog = pool.provider.catalog(fleet.spot_prices, fleet.unavailable)
    shapes = catalog.shapes()
    slots = catalog.slots_of(instance.instance_type, pool.provider.slots_per_instance)
    shape = next((s for s in shapes if s.instance_type == instance.instance_type), None)
    if shape is None:  # its type is out for now, or not offered any more: the next size up
        shape = next((s for s in shapes if s.slots >= slots), shapes[-1] if shapes else None)
    if shape is None:
        return ()
    fallbacks = catalog.fallbacks(Shape(shape.instance_type, shape.slots, shape.price))
    purchase = Purchase.SPOT if instance.spot else Purchase.ON_DEMAND
    own = offering_key(instance.instance_type, instance.zone, purchase)
    return tuple(o for o in fallbacks if o.key != own) + tuple(o for o in fallbacks if o.key == own)
