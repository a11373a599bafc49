"""Instances that go whatever the demand: stopped ones, those never registered within
max_agent_starting_period, and agents missing past max_disconnected_period. An
interrupted one goes on its own: it is neither capacity nor reaped.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from dynagent.core.decide.context import Context, Survey
from dynagent.core.durations import format_duration
from dynagent.core.fleet import Instance, Mark
from dynagent.core.plan import (
    Interruption,
)

# EC2 reclaims a spot machine two minutes after its interruption warning. One still
# running well past that was not reclaimed after all: it counts as the pool's again
# (its replacement is reaped by the usual rules if nothing needs it).
INTERRUPTION_GRACE = timedelta(minutes=10)


def remove_stopped(ctx: Context, instance: Instance) -> None:
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


def going_away(ctx: Context, instance: Instance, survey: Survey) -> bool:
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


def review_absent(ctx: Context, instance: Instance) -> None:
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
    since = disconnection_start(ctx, instance)
    limit = provider.max_disconnected_period
    if since is not None and ctx.now - since >= limit:
        ctx.terminate(
            instance.id,
            f"registered agent missing from snapshots for {format_duration(ctx.now - since)} "
            f"(max_disconnected_period {format_duration(limit)})",
            "disconnected",
        )


def disconnection_start(ctx: Context, instance: Instance) -> datetime | None:
    if instance.disconnected_since is not None:
        return instance.disconnected_since
    return ctx.seen_at if ctx.snapshot else None
