"""How many stopped machines the warm pool keeps with ``max_stopped: auto``: as many as
would bring the pool back to the most agents it had at once over the last
``max_stopped_period`` (the snapshot's ``peak_agents``, from ``dynagent bridge``), less
the machines it runs now.

A machine is stopped when its agent idles out, and started when work comes back; a
return beyond the pool's recent peak is not what the history of its reaps and starts
foretells, so the disks of machines beyond it would bill for starts nobody makes. Where
the peak is unknown (the sweep, or a publisher that does not say) no stopped machine is
deleted for the count; ``max_stopped_period`` and the boot config still apply.
"""

from __future__ import annotations

from dynagent.core.decide.context import Context

# The places of a warm pool whose size nothing bounds this pass.
UNBOUNDED = 1 << 30


def stopped_places(ctx: Context, coming: int = 0) -> int:
    """How many stopped machines the pool may keep after this plan, with ``coming``
    machines it starts or launches besides those running."""
    warm = ctx.provider.warm_pool
    if not warm.auto:
        return warm.stopped_limit
    peak = ctx.snapshot.peak_agents if ctx.snapshot is not None else None
    if peak is None:
        return UNBOUNDED
    removed, going = ctx.terminations, ctx.going
    live = sum(
        1 for i in ctx.fleet.instances if i.live and i.id not in removed and i.id not in going
    )
    return max(0, peak - live - coming)


def describe_places(ctx: Context, places: int) -> str:
    """``max_stopped`` as this pass bounds it, for a reason."""
    warm = ctx.provider.warm_pool
    if not warm.auto:
        return f"warm_pool.max_stopped ({warm.max_stopped})"
    peak = ctx.snapshot.peak_agents if ctx.snapshot is not None else None
    return (
        f"warm_pool.max_stopped (auto: {places}, what brings the pool back to its peak of "
        f"{peak} agents)"
    )
