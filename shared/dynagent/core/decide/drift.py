"""Agents of an old boot config: launched with an image, agent, master address or startup
script other than the pool's now (``boot.drift``). They are replaced (``replace``): idle
ones at once, busy ones drained first. A machine launched before dynagent recorded the
parts of its config is left alone: what its hash was made of may differ from today's
reading of the same config (an image family, now resolved to its image), and a pool
must not be replaced whole for an upgrade of dynagent.

``drift: false`` turns the rule off; the agents then stay until they idle out.
"""

from __future__ import annotations

from dynagent.core.boot.drift import drift_of
from dynagent.core.decide.context import Context
from dynagent.core.decide.replace import Retiring


def drifted(ctx: Context, already: set[str]) -> list[Retiring]:
    """The connected agents whose machine's boot config is not the pool's now, each with
    what changed; none of ``already``."""
    if not ctx.provider.drift or ctx.snapshot is None:
        return []
    now = ctx.boot_config
    if not now:
        return []  # the master's address is unknown: nothing can be compared
    found = []
    for instance, agent in zip(ctx.fleet.instances, ctx.connected, strict=True):
        # The common case first: a pass reads every instance of large fleets.
        if instance.boot_config == now or agent is None or instance.id in already:
            continue
        what = drift_of(instance.boot_config, instance.boot_parts, now, ctx.boot_parts)
        if what is None or not instance.live:
            continue
        found.append(Retiring(instance, agent, f"drifted: {what} changed", "drifted"))
    return found
