"""Replacing agents that must go though the master may still use them: those of an old
boot config (``drift``) and broken ones (``repair``).

The master's work is never killed for it. An agent goes at once only when nothing can
land on it before the terminate: idle, and retired or drained by the bridge (it never
enables such an agent again, ``bridge.drain``), or, in a pool that does not drain idle
agents, idle with no task waiting (what idle reaping risks there too). Any other is
drained: the functions send a drain notice (``core.drain_notices``), the bridge
disables it with drain, its tasks end, and once idle it goes, long before its idle
period. Its free slots are no room for pending work meanwhile, so that work gets a
machine of the pool's config now.

At most ``drift_budget`` agents drain for this at once: those draining already first,
then the emptiest (they end soonest). ``min_instances`` holds as for idle reaping; the
agents it keeps are replaced one by one, each new machine launched and registered
before the old one goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from dynagent.core.decide.context import Context, Survey
from dynagent.core.fitting import agents_for_zero_slot
from dynagent.core.fleet import Instance
from dynagent.core.plan import DrainNotice, Launch
from dynagent.core.snapshot import DRAINING_REPORT_LEASE, Agent


@dataclass(frozen=True)
class Retiring:
    """An agent to replace, why (for people) and the cause (a termination cause)."""

    instance: Instance
    agent: Agent
    why: str
    cause: str


def replace_agents(ctx: Context, survey: Survey, retiring: list[Retiring]) -> None:
    """Terminate the ``retiring`` agents that may go now, drain the others within the
    budget, and keep what min_instances needs until its replacement registered."""
    if not retiring:
        return
    ctx.replacing += [(r.instance.id, r.cause) for r in retiring]
    snapshot = ctx.snapshot
    assert snapshot is not None
    provider = ctx.provider
    floor = max(
        provider.min_instances,
        agents_for_zero_slot(len(ctx.zero_slot), ctx.pool.max_aux_containers_per_agent),
    )
    registered = sum(
        1
        for instance, agent in zip(ctx.fleet.instances, ctx.connected, strict=True)
        if agent is not None and ctx.kept(instance)
    )
    lease = ctx.now - snapshot.time <= DRAINING_REPORT_LEASE
    # Idle with no task waiting: in a pool that does not drain idle agents first, one
    # the master may place nothing on before the terminate lands (Determined's own
    # provisioner terminates idle agents so).
    at_once = not provider.drain_idle_agents and not snapshot.pending
    budget = provider.drift_budget_of(len(snapshot.agents))
    ranked = sorted(
        retiring,
        key=lambda r: (not _drained(r.agent, lease), r.agent.used_slots, r.instance.id),
    )
    draining = 0
    for item in ranked:
        agent, instance_id = item.agent, item.instance.id
        if agent.idle and registered - 1 < floor:
            ctx.retiring[instance_id] = f"{item.why}: kept for min_instances until replaced"
            continue
        if agent.idle and (_drained(agent, lease) or at_once):
            ctx.terminate(instance_id, f"{item.why} (idle: replaced now)", item.cause)
            registered -= 1
            continue
        if _drained(agent, lease) or draining < budget:
            draining += 1
            ctx.retiring[instance_id] = f"{item.why}: draining"
            ctx.drains.append(
                DrainNotice(agent.id, ctx.seen_at, f"{item.why}: replaced once its tasks end")
            )
        else:
            ctx.retiring[instance_id] = f"{item.why}: waits for drift_budget ({budget} draining)"
    # min_instances counts the agents of the config now: a new machine for each short.
    ctx.floor_short = max(0, min(floor - (registered - len(ctx.retiring)), len(ctx.retiring)))
    # Their free slots are no room: pending work goes to machines of the config now.
    survey.room[:] = [(i, m) for i, m in survey.room if i not in ctx.retiring]
    survey.idle[:] = [(s, i) for s, i in survey.idle if i not in ctx.terminations]
    survey.waning[:] = [i for i in survey.waning if i not in ctx.retiring]


def replacement_launches(ctx: Context, live: int) -> list[Launch]:
    """New machines for what min_instances keeps of the agents that must go, within the
    drift budget, less the machines booting already: each old one goes once its
    replacement registered. ``live`` counts the machines this plan keeps and launches."""
    smallest = ctx.smallest
    if not ctx.floor_short or smallest is None:
        return []
    booting = sum(
        1
        for instance, agent in zip(ctx.fleet.instances, ctx.connected, strict=True)
        if agent is None and instance.registered_at is None and ctx.kept(instance)
    )
    provider = ctx.provider
    budget = provider.drift_budget_of(len(ctx.snapshot.agents) if ctx.snapshot else 0)
    wanted = min(ctx.floor_short, budget) - booting
    cap = provider.machine_cap
    if cap is not None:
        wanted = min(wanted, cap - live)
    reason = (
        f"a machine of the config now for min_instances ({provider.min_instances}): "
        "the agent it replaces goes once it registers"
    )
    return [
        Launch(reason=reason, offerings=ctx.catalog.fallbacks(smallest), cause="replacement")
    ] * max(0, wanted)


def _drained(agent: Agent, lease: bool) -> bool:
    """The bridge drained it: retired (for good), or reported draining within the lease."""
    return agent.retired or (agent.draining and lease)
