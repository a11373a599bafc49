"""New machines: for the pending tasks, where the master will put them (``packing``),
into the pool's reservations first, with a spare for a large gang (``gang_spares``) and
the rest of the cap near it (``cap_fill``); then for zero-slot work, min_instances and
warm headroom. Held, each saying why, while
no agent could reach the master.
"""

from __future__ import annotations

from datetime import datetime

from dynagent.core.boot.master import MasterUrlError, master_address
from dynagent.core.config import Pool
from dynagent.core.decide.cap_fill import cap_fill_launches
from dynagent.core.decide.context import (
    Context,
    live_count,
    pack_pending,
    request_is_capacity,
    slots_left,
)
from dynagent.core.decide.gang_spares import gang_spare_launches
from dynagent.core.decide.headroom import headroom_launches
from dynagent.core.decide.replace import replacement_launches
from dynagent.core.decide.warm_pool import start_instead
from dynagent.core.decide.zero_slot import zero_slot_launches
from dynagent.core.offerings import Catalog, Offering, Shape
from dynagent.core.packing import NO_CAP, Demand, Existing, NewMachine
from dynagent.core.plan import Launch, Start
from dynagent.core.reservations import reserved_offering
from dynagent.core.snapshot import PendingTask, Snapshot


def master_unknown(pool: Pool, addresses: dict[str, str]) -> str | None:
    """Why no agent could reach the master, or None: an alias in ``master_url`` that no
    snapshot resolved (``boot.master``)."""
    try:
        master_address(pool.provider.master_url).resolved(addresses)
    except MasterUrlError as error:
        return str(error)
    return None


def plan_launches(
    ctx: Context, room: list[tuple[str, Existing]]
) -> tuple[tuple[Launch, ...], tuple[Start, ...], Demand]:
    """New machines for pending tasks, then up to min_instances, then warm headroom; a
    stopped machine of the warm pool started instead of each launch of its type."""
    provider = ctx.provider
    live = live_count(ctx)
    existing = existing_machines(ctx, room)
    pending = ctx.snapshot.pending if ctx.snapshot else ()
    if ctx.zero_slot:
        pending = tuple(task for task in pending if task.slots > 0)
    places = reserved_places(ctx, live) if pending else []
    demand, used = pack_with_places(ctx, pending, existing, places, live)
    catalog = ctx.catalog
    launches = [*used, *launches_for_demand(catalog, demand.new_machines)]
    live += len(used)
    for_work = len(launches)
    launches += gang_spare_launches(ctx, demand, live + len(demand.new_machines))
    if len(used) == len(places):  # free reserved places are the slack already
        launches += cap_fill_launches(ctx, demand, for_work)
    smallest = ctx.smallest
    launches += zero_slot_launches(ctx, demand, smallest, live, len(launches))
    if smallest is None:
        launches, starts = start_instead(ctx, launches)
        return tuple(launches), tuple(starts), demand
    below_min = provider.min_instances - live - len(launches)
    launches += [
        Launch(
            reason=f"keep min_instances ({provider.min_instances})",
            offerings=catalog.fallbacks(smallest),
            cause="min_instances",
        )
    ] * max(0, below_min)
    launches += replacement_launches(ctx, live + len(launches))
    launches += headroom_launches(ctx, demand, smallest, live + len(launches), launches)
    launches, starts = start_instead(ctx, launches)
    return tuple(launches), tuple(starts), demand


def reserved_places(ctx: Context, live: int) -> list[Offering]:
    """A launch's offering for each free place of the reservations new work may go to,
    within the caps' room; the reservation that ends first is used first (what it does
    not hold is lost at its end)."""
    provider = ctx.provider
    machines = provider.machine_cap
    room = NO_CAP if machines is None else max(0, machines - live)
    slot_room = slots_left(ctx)
    refused = ctx.fleet.unavailable
    places: list[Offering] = []
    last = datetime.max.replace(tzinfo=ctx.now.tzinfo)
    for reservation in sorted(ctx.usable, key=lambda r: (r.ends_at or last, r.id)):
        slots = ctx.catalog.slots_of(reservation.instance_type, provider.slots_per_instance)
        offering = reserved_offering(reservation, slots)
        if offering.key in refused or slots <= 0:
            continue
        for _ in range(reservation.available):
            if len(places) >= room or (slot_room is not None and slot_room < slots):
                return places
            places.append(offering)
            if slot_room is not None:
                slot_room -= slots
    return places


def pack_with_places(
    ctx: Context,
    pending: tuple[PendingTask, ...],
    existing: list[Existing],
    places: list[Offering],
    live: int,
) -> tuple[Demand, list[Launch]]:
    """Pack ``pending`` with the reservations' free ``places`` as machines already paid
    for: after the machines booting, before any new one; the launches into the places
    used. The caps' room the places take is held for them; if tasks wait at a cap while
    some places went unused, the packing is done again without those."""
    if not places:
        return pack_pending(ctx, pending, existing, live), []
    first = len(existing)
    for _ in range(2):
        virtual = [Existing(o.slots, o.slots) for o in places]
        held = sum(o.slots for o in places)
        demand = pack_pending(ctx, pending, existing + virtual, live + len(places), held)
        used = [
            index for index, (slots, free) in enumerate(demand.free_after[first:]) if free < slots
        ]
        if len(used) == len(places) or not demand.waiting:
            break
        places = [places[index] for index in used]
    launches = []
    for index in used:
        offering = places[index]
        tasks = demand.placed_on.get(first + index, [])
        launches.append(
            Launch(
                f"pending tasks: {', '.join(tasks)} (reservation {offering.reservation})",
                tuple(tasks),
                (offering, *ctx.catalog.fallbacks(shape_of(ctx, offering))),
            )
        )
    return demand, launches


def shape_of(ctx: Context, offering: Offering) -> Shape:
    """The pool's shape of an offering's type, for its fallbacks."""
    for shape in ctx.shapes:
        if shape.instance_type == offering.instance_type:
            return shape
    price = ctx.catalog.price_of(offering.instance_type, spot=False)
    return Shape(offering.instance_type, offering.slots, price)


def launches_for_demand(catalog: Catalog, machines: list[NewMachine]) -> list[Launch]:
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


def existing_machines(ctx: Context, room: list[tuple[str, Existing]]) -> list[Existing]:
    """Machines pending tasks can go to before new ones, if this plan keeps them: those
    not registered yet, agents with free slots, and spot requests.

    An idle agent counts because a pending task that fits on it is the master's to place
    (the snapshot caught it just before), and a task larger than one instance can take
    it as one of its whole instances.
    """
    existing = [machine for instance_id, machine in room if instance_id not in ctx.terminations]
    slots = ctx.provider.slots_per_instance
    requests = sum(1 for r in ctx.fleet.spot_requests if request_is_capacity(ctx, r))
    return existing + [Existing(slots, slots)] * requests


def launch_key(pool: str, snapshot: Snapshot | None, now: datetime) -> str:
    if snapshot:
        return f"{pool}:{snapshot.seq}"
    # A sweep launches only to keep min_instances; one key per minute.
    return f"{pool}:sweep:{now:%Y%m%dT%H%M}"
