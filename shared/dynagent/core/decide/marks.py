"""What the snapshot taught about each instance, written back as tags or labels
(registered, idle since, disconnected since), and the idle marks renewed on agents that
pending tasks count on.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from dynagent.core.decide.context import Context
from dynagent.core.fleet import Instance, Mark
from dynagent.core.plan import (
    MarkWrite,
)
from dynagent.core.snapshot import Agent


def still_wanted(
    ctx: Context, counted_on: set[str]
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


def stop_marks(ctx: Context) -> tuple[MarkWrite, ...]:
    """A machine stopped for the warm pool: when, for its period; and its agent's marks
    cleared, so that once started it counts as launched and not registered yet."""
    kept = {i for i in ctx.kept_preempted if i not in ctx.terminations}
    if not ctx.stops and not kept:
        return ()
    ids = tuple(sorted(ctx.stops | kept))
    reason = "stopped for the warm pool"
    cleared = (Mark.REGISTERED, Mark.IDLE_SINCE, Mark.DISCONNECTED_SINCE)
    return (
        MarkWrite(Mark.STOPPED_AT, ctx.now, ids, reason),
        *(MarkWrite(mark, None, ids, reason) for mark in cleared),
    )


def mark_writes(
    ctx: Context, changes: list[tuple[str, list[tuple[Mark, datetime | None, str]]]]
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


def mark_changes(
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
