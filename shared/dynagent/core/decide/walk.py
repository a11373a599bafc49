"""The walk over the fleet: every instance reviewed once (``removals``), and what the later
rules need of those kept noted in a ``Survey``. It is the hot loop of a pass over tens of
thousands of instances, so it stays one function with the names it asks held locally.
"""

from __future__ import annotations

from dynagent.core.decide.context import Context, Survey, idle_start, takes_tasks
from dynagent.core.decide.marks import mark_changes
from dynagent.core.decide.removals import going_away, remove_stopped, review_absent
from dynagent.core.decide.warm_pool import keep_warm
from dynagent.core.fleet import Instance, InstanceState, Mark
from dynagent.core.packing import Existing
from dynagent.core.snapshot import DRAINING_REPORT_LEASE


def walk_fleet(ctx: Context) -> Survey:
    """Review each instance (stopped, never registered, disconnected too long: terminate,
    unless the warm pool keeps a stopped one) and note what the later rules need of those
    it keeps."""
    survey = Survey()
    warm = ctx.provider.warm_pool.enabled
    stopped: list[Instance] = []
    # Idle longer than the period, as Determined's provisioner terminates (scale_decider.go
    # CalculateInstanceStates: now.After(idleSince + maxIdlePeriod)): since < now - period
    # is now - since > period, with one subtraction per pass.
    cutoff = ctx.now - ctx.provider.max_idle_agent_period
    half = ctx.now - ctx.provider.max_idle_agent_period / 2
    terminations, with_snapshot = ctx.terminations, ctx.snapshot is not None
    # A draining report is a lease for the terminate: past it, the publisher may have
    # enabled the agent again and the master placed work there (DRAINING_REPORT_LEASE).
    drain = ctx.provider.drain_idle_agents
    drain_lease = ctx.snapshot is not None and ctx.now - ctx.snapshot.time <= DRAINING_REPORT_LEASE
    # A publisher that reports retirements: only a retired agent goes, whenever the
    # report is read (it is never taken back), and a draining one may come back.
    retires = ctx.snapshot is not None and ctx.snapshot.retires is True
    # This loop runs once per instance of fleets of tens of thousands: the names it asks
    # of each are local, and Instance.live is inlined.
    running, starting = InstanceState.RUNNING, InstanceState.STARTING
    registered, idle, interrupted = Mark.REGISTERED, Mark.IDLE_SINCE, Mark.INTERRUPTED_AT
    disconnected = Mark.DISCONNECTED_SINCE
    ending = ctx.ending
    for instance, agent in zip(ctx.fleet.instances, ctx.connected, strict=True):
        state, marks = instance.state, instance.marks
        if state is not running and state is not starting:
            if warm:
                stopped.append(instance)
            else:
                remove_stopped(ctx, instance)
            continue
        if interrupted in marks and going_away(ctx, instance, survey):
            continue
        if ending and instance.reservation in ending:
            # The cloud takes it back at the reservation's end: like an interrupted
            # machine, neither room for pending work nor counted toward the caps.
            ctx.going.add(instance.id)
            ctx.kept_count -= 1
            continue
        if agent is None:
            review_absent(ctx, instance)
        if instance.id in terminations:
            continue
        marked = False
        if agent is not None:
            # Whether its marks already say what the snapshot does (agent.idle inlined).
            used = agent.used_slots
            marked = (
                registered in marks
                and disconnected not in marks
                and (idle in marks) == (used == 0 and agent.tasks == 0)
            )
            if marked and used:
                # Busy, and its marks say so: the common case; only spare slots to note.
                if used < agent.slots and takes_tasks(agent, drain):
                    spare = Existing(agent.slots, agent.slots - used, arriving=False)
                    survey.room.append((instance.id, spare))
                continue
        since = idle_start(ctx, instance, agent)
        if drain:
            # The master drained it (the bridge waited out the idle period first) and
            # nothing runs on it: nothing new can land there before the terminate.
            if (
                agent is not None
                and agent.idle
                and (agent.retired if retires else drain_lease and agent.draining)
            ):
                survey.idle.append((since or ctx.seen_at, instance.id))
        elif since is not None and since < cutoff:
            survey.idle.append((since, instance.id))
        if agent is None and instance.registered_at is None:
            slots = ctx.slots(instance, None)
            survey.room.append((instance.id, Existing(slots, slots)))
        elif agent is None and not with_snapshot and since is not None:
            # The sweep knows an agent's free slots only from its idle mark: all of them.
            # The warm headroom guard counts them, so the sweep keeps what it needs.
            slots = ctx.slots(instance, None)
            survey.room.append((instance.id, Existing(slots, slots, arriving=False)))
        elif agent is not None and agent.used_slots < agent.slots and takes_tasks(agent, drain):
            free = agent.slots - agent.used_slots
            survey.room.append((instance.id, Existing(agent.slots, free, arriving=False)))
            if agent.idle and (
                agent.draining if drain else (mark := marks.get(idle)) is not None and mark <= half
            ):
                survey.waning.append(instance.id)
        if with_snapshot and not marked:
            changes = mark_changes(instance, agent, ctx.seen_at)
            if changes:
                survey.marks.append((instance.id, changes))
    if warm:
        keep_warm(ctx, stopped)
    return survey
