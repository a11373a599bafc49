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
from dynagent.core.durations import format_duration
from dynagent.core.fleet import Instance, InstanceState
from dynagent.core.offerings import offering_of
from dynagent.core.plan import Launch, Start


def busy_types(ctx: Context) -> Counter[str]:
    """Busy agents by machine type: the shapes the pool's work uses now."""
    return Counter(
        instance.instance_type
        for instance, agent in zip(ctx.fleet.instances, ctx.connected, strict=True)
        if agent is not None and agent.used_slots > 0
    )


def keep_warm(ctx: Context, stopped: Iterable[Instance]) -> None:
    """Of the pool's stopped machines, terminate those the warm pool may not keep:
    preempted or interrupted by the cloud, of another boot config (``boot.drift``) or a
    type no longer offered, stopped past ``max_stopped_period``, and beyond
    ``max_stopped``. The others stay; the STOPPED ones may be started."""
    warm = ctx.provider.warm_pool
    now_config = ctx.boot_config
    candidates = []
    for instance in stopped:
        if instance.preempted or instance.interrupted_at is not None:
            remove_stopped(ctx, instance)
            continue
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
        if ctx.now - since >= warm.max_stopped_period:
            ctx.terminate(
                instance.id,
                f"stopped for {format_duration(ctx.now - since)} "
                f"(warm_pool.max_stopped_period {format_duration(warm.max_stopped_period)})",
                "stopped",
            )
            continue
        candidates.append(instance)
    usage = busy_types(ctx) if len(candidates) > warm.max_stopped else Counter[str]()
    candidates.sort(key=lambda i: (-usage[i.instance_type], -_stopped_since(i), i.id))
    for instance in candidates[warm.max_stopped :]:
        ctx.terminate(instance.id, f"beyond warm_pool.max_stopped ({warm.max_stopped})", "stopped")
    kept = candidates[: warm.max_stopped]
    ctx.kept_stopped = len(kept)
    ctx.startable = [i for i in kept if i.state is InstanceState.STOPPED]


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
    room: the shapes the pool's work uses most first, then the costliest."""
    warm = ctx.provider.warm_pool
    room = warm.max_stopped - ctx.kept_stopped
    if room <= 0 or not reaped:
        return
    by_id = ctx.by_id
    stoppable = [by_id[i] for i in reaped if can_stop(ctx, by_id[i])]
    usage = busy_types(ctx) if len(stoppable) > room else Counter[str]()
    stoppable.sort(key=lambda i: (-usage[i.instance_type], -ctx.price(i), i.id))
    for instance in stoppable[:room]:
        ctx.stop(instance.id)


def start_instead(ctx: Context, launches: list[Launch]) -> tuple[list[Launch], list[Start]]:
    """A stopped machine started in place of each launch of its type, while there are
    some: the packing chose that machine for the tasks, so a start costs what the launch
    would and counts the same against the caps, and the tasks wait a start, not a boot.
    The launch is the start's cold cover, if the cloud refuses the start; a machine whose
    offering the cloud refused lately is not started."""
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
        if not waiting:
            kept.append(launch)
            continue
        instance = waiting.pop(0)
        # Not where the start was refused: that zone has no such machine now.
        elsewhere = tuple(
            o
            for o in launch.offerings
            if not (instance.zone and o.zone == instance.zone and o.instance_type == machine)
        )
        reason = f"{launch.reason}: started, not launched"
        # A pool of one zone has nowhere else: its cold cover asks there again.
        cold = replace(launch, offerings=elsewhere or launch.offerings)
        starts.append(Start(instance.id, reason, cold, offering_of(instance)))
    return kept, starts
