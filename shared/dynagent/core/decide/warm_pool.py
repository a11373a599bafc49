"""The warm pool (``warm_pool``): idle agents stopped instead of terminated, stopped
machines started for pending tasks before new ones launch, and the stopped ones kept
within ``max_stopped``, ``max_stopped_period`` and the pool's boot config.

A stopped machine bills only its disks and keeps its Docker images, so a start brings
its agent back without the boot's image pull. The ones kept are of the shapes the pool's
work uses most (its busy agents' types), then the most recently stopped: what the next
scale-up most likely needs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from dynagent.core.config import AwsProvider
from dynagent.core.decide.context import Context
from dynagent.core.decide.removals import remove_stopped
from dynagent.core.decide.warm_pool_size import kept_for
from dynagent.core.durations import format_duration
from dynagent.core.fleet import Instance, InstanceState, Mark
from dynagent.core.offerings import offering_of
from dynagent.core.plan import Interruption, Launch, Start


def busy_types(ctx: Context) -> Counter[str]:
    """Busy agents by machine type: the shapes the pool's work uses now (by machines,
    not GPUs, so that small machines for small tasks keep their places too)."""
    return Counter(
        instance.instance_type
        for instance, agent in zip(ctx.fleet.instances, ctx.connected, strict=True)
        if agent is not None and agent.used_slots > 0
    )


def keep_warm(ctx: Context, stopped: Iterable[Instance]) -> None:
    """Of the pool's stopped machines, terminate those the warm pool may not keep:
    interrupted by the cloud (EC2 reclaims a spot machine), of another boot config
    (``boot.drift``) or a type no longer offered, stopped past ``max_stopped_period``
    (with ``auto``, past its break-even time: ``warm_pool_size``), and beyond
    ``max_stopped``. The others stay; the STOPPED ones may be started. A Spot
    VM the cloud preempted and stopped (GCE, ``instanceTerminationAction: STOP``) is an
    interruption, counted once, and then a stopped machine like the others."""
    now_config = ctx.boot_config
    candidates = []
    for instance in stopped:
        if instance.interrupted_at is not None:
            remove_stopped(ctx, instance)
            continue
        if instance.preempted:
            ctx.interruptions.append(Interruption(instance.id, "preempted"))
            ctx.kept_preempted.add(instance.id)
            instance = replace(instance, marks={**instance.marks, Mark.STOPPED_AT: ctx.now})
        if now_config and instance.boot_config != now_config:
            ctx.terminate(
                instance.id,
                f"stopped with boot config {instance.boot_config or 'unknown'}, the pool's is "
                f"{now_config} now: deleted, never started",
                "drifted",
            )
            continue
        if instance.instance_type and not ctx.catalog.offers(instance.instance_type):
            ctx.terminate(
                instance.id,
                f"stopped {instance.instance_type}, which the pool no longer offers",
                "drifted",
            )
            continue
        since = instance.stopped_at or instance.launched_at
        period = kept_for(ctx.provider, ctx.price(instance))
        if ctx.now - since >= period:
            ctx.terminate(
                instance.id,
                f"stopped for {format_duration(ctx.now - since)} "
                f"(warm_pool.max_stopped_period {format_duration(period)})",
                "stopped",
            )
            continue
        candidates.append(instance)
    limit = max_stopped(ctx)
    usage = busy_types(ctx) if len(candidates) > limit else Counter[str]()
    candidates.sort(key=lambda i: (-usage[i.instance_type], -_stopped_since(i), i.id))
    for instance in candidates[limit:]:
        ctx.terminate(instance.id, f"beyond warm_pool.max_stopped ({limit})", "stopped")
    kept = candidates[:limit]
    ctx.kept_stopped = len(kept)
    ctx.startable = [i for i in kept if i.state is InstanceState.STOPPED]


def max_stopped(ctx: Context) -> int:
    """``max_stopped``; with ``auto`` no count (as many as the pool has machines): each
    stopped machine goes at its own break-even time instead (``warm_pool_size``)."""
    warm = ctx.provider.warm_pool
    return len(ctx.fleet.instances) if warm.auto else warm.stopped_limit


def _stopped_since(instance: Instance) -> float:
    return (instance.stopped_at or instance.launched_at).timestamp()


def can_stop(ctx: Context, instance: Instance) -> bool:
    """Whether the cloud can stop it: a running machine; on EC2 an on-demand one (a
    one-time Spot instance cannot be stopped, only terminated). GCE stops Spot VMs."""
    if instance.state is not InstanceState.RUNNING:
        return False
    return not (instance.spot and isinstance(ctx.provider, AwsProvider))


def stop_reaped(ctx: Context, reaped: list[str]) -> None:
    """Stop, instead of terminate, the idle agents just reaped while the warm pool has
    room. When it has too little, the machines it keeps are the shapes the pool's work
    uses most (busy agents by type), those stopped already before those reaped now (a
    swap of alike machines would gain nothing), then the costliest: a stopped machine of
    a shape less used than a reaped one is terminated in its place."""
    if not reaped:
        return
    by_id = ctx.by_id
    stoppable = [by_id[i] for i in reaped if can_stop(ctx, by_id[i])]
    limit = max_stopped(ctx)
    room = limit - ctx.kept_stopped
    if len(stoppable) <= room:
        for instance in stoppable:
            ctx.stop(instance.id)
        return
    usage = busy_types(ctx)
    # Those stopping now cannot be started or replaced: they keep their places.
    stopping = ctx.kept_stopped - len(ctx.startable)
    places = limit - stopping
    now_reaped = set(reaped)

    def rank(instance: Instance) -> tuple[int, bool, float, str]:
        fresh = instance.id in now_reaped
        return (-usage[instance.instance_type], fresh, -ctx.price(instance), instance.id)

    ranked = sorted([*ctx.startable, *stoppable], key=rank)
    kept = {instance.id for instance in ranked[:places]}
    for instance in ctx.startable:
        if instance.id not in kept:
            ctx.terminate(
                instance.id,
                f"beyond warm_pool.max_stopped ({limit}): its place goes to a machine of a "
                "shape the pool's work uses more",
                "stopped",
            )
    ctx.kept_stopped -= sum(1 for i in ctx.startable if i.id not in kept)
    ctx.startable = [i for i in ctx.startable if i.id in kept]
    for instance in stoppable:
        if instance.id in kept:
            ctx.stop(instance.id)


def start_instead(ctx: Context, launches: list[Launch]) -> tuple[list[Launch], list[Start]]:
    """A stopped machine started in place of each launch of its type, while there are
    some: the packing chose that machine for the tasks, so a start costs what the launch
    would and counts the same against the caps, and the tasks wait a start, not a boot.
    The launch is the start's cold cover, if the cloud refuses the start; a machine whose
    offering the cloud refused lately is not started."""
    reserved = [launch for launch in launches if launch.reserved]
    if reserved:
        # A place in a reservation is paid for already: it stays a launch.
        cold, started = start_instead(ctx, [la for la in launches if not la.reserved])
        return [*reserved, *cold], started
    if not launches:
        return launches, []
    refused = ctx.fleet.unavailable
    default = ctx.catalog.offerings[0].instance_type if ctx.catalog.offerings else ""
    stopped: dict[str, list[Instance]] = {}
    for instance in ctx.startable:
        if offering_of(instance) not in refused:
            stopped.setdefault(instance.instance_type or default, []).append(instance)
    if not stopped:
        return launches, []
    kept: list[Launch] = []
    starts: list[Start] = []
    for launch in launches:
        machine = launch.offering.instance_type if launch.offering is not None else default
        waiting = stopped.get(machine)
        if waiting:
            starts.append(_start(waiting.pop(0), launch, machine))
        else:
            kept.append(launch)
    if kept and any(stopped.values()):
        kept, split = _split_onto_smaller(ctx, kept, stopped)
        starts += split
    return kept, starts


def _start(instance: Instance, launch: Launch, machine: str) -> Start:
    """A start of ``instance`` for ``launch``'s tasks; the launch is its cold cover."""
    # Not where the start was refused: that zone has no such machine now.
    elsewhere = tuple(
        o
        for o in launch.offerings
        if not (instance.zone and o.zone == instance.zone and o.instance_type == machine)
    )
    reason = f"{launch.reason}: started, not launched"
    # A pool of one zone has nowhere else: its cold cover asks there again.
    cold = replace(launch, offerings=elsewhere or launch.offerings)
    return Start(instance.id, reason, cold, offering_of(instance))


def _split_onto_smaller(
    ctx: Context, launches: list[Launch], stopped: dict[str, list[Instance]]
) -> tuple[list[Launch], list[Start]]:
    """A launch whose tasks each fit a stopped machine of a smaller type, and all of them
    together some of those, at no more than the launch's price: those machines started
    instead (eight 1-GPU tasks on eight stopped 1-GPU machines rather than a new 8-GPU
    one). No task is split across machines, so each runs as it would have."""
    sizes = {task.task: task.slots for task in (ctx.snapshot.pending if ctx.snapshot else ())}
    kept: list[Launch] = []
    starts: list[Start] = []
    for launch in launches:
        offering = launch.offering
        tasks = sorted((sizes.get(t, 0) for t in launch.tasks), reverse=True)
        if offering is None or not tasks or not tasks[0]:
            kept.append(launch)
            continue
        smaller = sorted(
            (i for group in stopped.values() for i in group if ctx.slots(i, None) < offering.slots),
            key=lambda i: (ctx.slots(i, None), ctx.price(i), i.id),
        )
        chosen = _hold(ctx, tasks, smaller)
        if chosen is None or sum(ctx.price(i) for i in chosen) > offering.price:
            kept.append(launch)
            continue
        for instance in chosen:
            stopped[instance.instance_type].remove(instance)
            starts.append(_start(instance, launch, instance.instance_type))
    return kept, starts


def _hold(ctx: Context, tasks: list[int], machines: list[Instance]) -> list[Instance] | None:
    """Machines of ``machines`` (smallest first) that hold ``tasks`` (largest first),
    each task on one machine, best fit; None when they cannot."""
    free: list[tuple[Instance, int]] = []
    for slots in tasks:
        fits = [(room, n) for n, (_, room) in enumerate(free) if room >= slots]
        if fits:
            _, n = min(fits)
            free[n] = (free[n][0], free[n][1] - slots)
            continue
        used = {instance.id for instance, _ in free}
        fresh = next(
            (i for i in machines if i.id not in used and ctx.slots(i, None) >= slots), None
        )
        if fresh is None:
            return None
        free.append((fresh, ctx.slots(fresh, None) - slots))
    return [instance for instance, _ in free]
