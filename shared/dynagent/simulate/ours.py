"""dynagent under simulation: the very ``reconcile`` the Lambda runs, on the simulated cloud.

The bridge reads the master every 5 s (``bridge.loop.INTERVAL_SECONDS``) and publishes a
snapshot when what it read changed, and every 30 s (the heartbeat, as the snapshot
contract asks; configurable); each is reconciled at once. So a change is seen at the
bridge's next read, up to 5 s after it: the reads fall on the same 5-s grid as
Determined's provisioner ticks, so both policies look at the master at the same moments
and differ only in what they decide. The sweep reconciles with no snapshot every 60 s.
Simpler than the real path: the queue and the function add no delay of their own.

A snapshot that says nothing new (a heartbeat, a sweep, or a change of the master in
nothing a decision reads, like a busy agent getting busier) can only act when a timer of
the decision has run out since the last pass (an agent idle for
``max_idle_agent_period``, an instance not registered after ``max_agent_starting_period``,
an agent missing for ``max_disconnected_period``, an offering the cloud refused coming
back into the choice when its capacity memory expires) or when the last pass changed
the fleet (a launch can lift ``min_instances`` off an idle agent). A pool keeping warm
headroom counts free slots, so there the master reports any agent's free slots changing
as a change a decision reads. So, unless ``exhaustive``
is set, such snapshots are reconciled only then: the same plans at the same times,
without the hundreds of thousands of passes that change nothing over a month. Tests run
both ways and compare.

The bridge also publishes when an agent's idle period runs out (``bridge.idle``), so the
pass that reaps it comes then, not at the next heartbeat; in a pool with
``drain_idle_agents`` it does not: there its drain is the change that publishes.

With ``drain_idle_agents``, the bridge's drains are part of the policy: its ``Drainer``
reads the master and disables or enables agents before each snapshot, at each read that
saw a change and every heartbeat, and retires a drained agent idle for ``RETIRE_AFTER``,
which the snapshot then reports: only retired agents are terminated. Simpler than the
bridge: a retirement comes at the heartbeat after ``RETIRE_AFTER`` ran out, up to 30 s
later than the bridge's own 5-s reads.

The drain notices a plan carries (an interrupted spot machine, agents of an old config
or broken ones) reach the bridge at once: it disables each agent with drain when the
notice's time comes and reports it retired from then on, as ``bridge.loop`` does.
Simpler than the real path: no queue between them, and the bridge acts on a notice at
its next read.
"""

from __future__ import annotations

import dataclasses

from dynagent.bridge.drain import RETIRE_AFTER, Drainer
from dynagent.bridge.idle import IdleClock
from dynagent.bridge.loop import INTERVAL_SECONDS
from dynagent.core.config import Pool, Settings
from dynagent.core.decide.warm_pool_size import kept_for
from dynagent.core.fleet import Fleet, Mark
from dynagent.core.interruptions import INTERRUPTION, Notice, plan_interruption
from dynagent.core.plan import Plan
from dynagent.core.snapshot import Snapshot
from dynagent.run.reconcile import act, reconcile
from dynagent.simulate.clock import at, next_on_grid, seconds_at
from dynagent.simulate.cloud import SimCloud
from dynagent.simulate.master import SimMaster
from dynagent.simulate.policy import Change

HEARTBEAT = 30  # seconds between a master's snapshots when nothing changes (the contract)
SWEEP_EVERY = 60  # the sweep's schedule
BRIDGE_READS_EVERY = int(INTERVAL_SECONDS)  # seconds between the bridge's reads of the master


class DynagentPolicy:
    name = "dynagent"

    def __init__(
        self,
        pool: Pool,
        settings: Settings,
        cloud: SimCloud,
        master: SimMaster,
        exhaustive: bool = False,
        heartbeat: int = HEARTBEAT,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.cloud = cloud
        self.master = master
        self.exhaustive = exhaustive
        self.heartbeat = heartbeat
        self.decisions = 0
        provider = pool.provider
        self._periods = {
            Mark.IDLE_SINCE: int(provider.max_idle_agent_period.total_seconds()),
            Mark.DISCONNECTED_SINCE: int(provider.max_disconnected_period.total_seconds()),
        }
        self._starting = int(provider.max_agent_starting_period.total_seconds())
        # Set by the first pass: the first task's arrival is a change the master publishes.
        self._heartbeat_at: int | None = None
        self._sweep_at: int | None = None
        self._deadline: int | None = None
        # Since when the latest snapshot's plan has had demand waiting at max_instances
        # (None: it has not), and the seconds of the spells that ended.
        self._at_max_since: int | None = None
        self._at_max_seconds = 0
        self.drainer = Drainer() if provider.drain_idle_agents else None
        # The bridge's idle clock, and the next second at which it publishes for it.
        self.idle_clock = None if provider.drain_idle_agents else IdleClock()
        self._idle_end_at: int | None = None
        # How the master changed since the bridge last read it, and its next read then.
        self._unread = Change.NONE
        self._read_at: int | None = None
        self._swept: int | None = None  # the second of the last sweep
        # Drain notices not yet due (agent id -> from when), and agents drained for good.
        self._notices: dict[str, int] = {}
        self.held: set[str] = set()

    def upgrade(self, now: int, pool: Pool) -> None:
        """The functions are deployed with the pool's new config: the next snapshot's
        pass judges the agents against it."""
        self.pool = pool
        self.fleet_changed(now)

    def act(self, now: int, change: Change) -> None:
        if self._notices:
            self._hand_back(now)
        change = self._read(now, change)
        bridge = self.drainer is not None and (change is not Change.NONE or self._beat(now))
        if bridge and self._bridge_drains(now):
            change = Change.DECISION
        published = self._publishes(now, change)
        sweep = _due(self._sweep_at, now)
        acted = False
        if published:
            acted |= self._reconcile(now, with_snapshot=True)
        # The sweep of this second, if one falls on it, comes after the snapshot's pass
        # and sees the fleet that pass changed.
        sweep |= acted and now % SWEEP_EVERY == 0 and self._swept != now
        if sweep:
            self._swept = now
            acted |= self._reconcile(now, with_snapshot=False)
        if published or sweep:
            # Only after a pass: its plan is what the next deadline is counted from.
            self._plan_wake(now, acted)

    def _read(self, now: int, change: Change) -> Change:
        """What the bridge sees of the master's changes at ``now``: those since its last
        read if it reads now (a heartbeat is a read too), else none yet: it reads on its
        next 5-s tick."""
        if change is not Change.NONE:
            self._unread = max(self._unread, change)
            self._read_by(now)
        reads = _due(self._read_at, now) or _due(self._heartbeat_at, now)
        if not (reads or _due(self._idle_end_at, now)):
            return Change.NONE
        seen, self._unread, self._read_at = self._unread, Change.NONE, None
        return seen

    def _read_by(self, time: int) -> None:
        """The bridge reads the master at its first 5-s tick from ``time`` at the latest."""
        read = next_on_grid(time, BRIDGE_READS_EVERY)
        self._read_at = read if self._read_at is None else min(self._read_at, read)

    def _beat(self, now: int) -> bool:
        return _due(self._heartbeat_at, now) or _due(self._sweep_at, now)

    def _bridge_drains(self, now: int) -> bool:
        """The bridge's pass before its snapshot: drain or enable agents on the master, as
        ``bridge.loop`` does; whether it did anything."""
        assert self.drainer is not None
        actions = self.drainer.actions(self.pool, self.master.reading(), at(now))
        for action in actions:
            if action.enable:
                self.master.enable(action.agent_id)
            else:
                self.master.disable(action.agent_id)
            self.drainer.done(action)
        if any(action.enable for action in actions):
            self.master.schedule(now)  # the master's next tick places tasks there
            self._read_by(now + 1)  # which the bridge's next read sees
        retired = len(self.drainer.retired)
        self.drainer.retire(self.master.reading(), at(now))
        return bool(actions) or len(self.drainer.retired) != retired

    def _publishes(self, now: int, change: Change) -> bool:
        """Whether a snapshot reaches the decision now: on any change of the master, on
        each heartbeat and when an idle period runs out, but, unless exhaustive, only
        when it can matter."""
        due = _due(self._heartbeat_at, now) or _due(self._idle_end_at, now)
        if due or change is Change.DECISION:
            return True
        if change is Change.OTHER:
            return self.exhaustive or _due(self._deadline, now)
        return False

    def wake_at(self) -> int | None:
        times = (self._heartbeat_at, self._sweep_at, self._idle_end_at, self._read_at)
        return min((t for t in times if t is not None), default=None)

    def fleet_changed(self, now: int) -> None:
        """An instance gone without its agent (still booting) changes no snapshot, so
        the next heartbeat and sweep must be delivered: the fleet they see changed."""
        if self.exhaustive:
            return
        self._deadline = now if self._deadline is None else min(self._deadline, now)
        beat, sweep = self._beat_from(now), next_on_grid(now, SWEEP_EVERY)
        self._heartbeat_at = beat if self._heartbeat_at is None else min(self._heartbeat_at, beat)
        self._sweep_at = sweep if self._sweep_at is None else min(self._sweep_at, sweep)

    def interruption_warning(self, now: int, instance_id: str) -> None:
        """What the interruption function does with EC2's warning, at once (a cover of
        smaller machines too, when its type has no capacity: ``reconcile.act``)."""
        moment = at(now)
        notice = Notice(instance_id, INTERRUPTION, moment)

        def decision(fleet: Fleet) -> Plan:
            return plan_interruption(self.pool, fleet, notice, moment)

        outcome = act(self.pool, self.cloud, self.cloud.observe(), decision, moment)
        self.decisions += 1
        if outcome.plan is not None:
            self._take_notices(now, outcome.plan)
        # The mark frees a place under max_instances: the next snapshot may use it, as
        # every heartbeat of an exhaustive run would.
        self._plan_wake(now, acted=True)

    def pending_at_max_seconds(self, until: int) -> int:
        """Seconds up to ``until`` during which the latest plan made from a snapshot had
        ``pending_at_max``: demand waiting only because the pool is at max_instances.
        A sweep's plan has no pending tasks to say it of, so it leaves the spell as is."""
        since = self._at_max_since
        return self._at_max_seconds + (0 if since is None else until - since)

    def _reconcile(self, now: int, with_snapshot: bool) -> bool:
        """One pass; whether it launched or terminated anything."""
        moment = at(now)
        snapshot = self.master.snapshot(moment) if with_snapshot else None
        if snapshot is not None and (self.drainer is not None or self.held):
            drains = self.drainer is not None
            retired = self.held | (self.drainer.retired if self.drainer is not None else set())
            snapshot = _retiring(snapshot, retired, drains)
        if snapshot is not None and self.idle_clock is not None:
            self.idle_clock.published(snapshot.agents, moment)
        plan = reconcile(self.pool, self.cloud, snapshot, moment, self.settings).plan
        self.decisions += 1
        if plan is None:
            return False
        self._take_notices(now, plan)
        if snapshot is not None:
            self._note_at_max(now, plan.pending_at_max)
        return bool(plan.launches or plan.terminations or plan.stops or plan.starts)

    def _take_notices(self, now: int, plan: Plan) -> None:
        """The plan's drain notices, for the bridge: due ones acted on at once."""
        for notice in plan.drain_notices:
            if notice.agent_id not in self.held:
                when = seconds_at(notice.at)
                self._notices[notice.agent_id] = min(when, self._notices.get(notice.agent_id, when))
        if self._notices:
            self._hand_back(now)

    def _hand_back(self, now: int) -> None:
        """Agents whose notice is due: drained for good (``bridge.loop._hand_back``)."""
        self.held &= set(self.master.agents)
        for agent_id, when in list(self._notices.items()):
            if when > now:
                continue
            del self._notices[agent_id]
            if agent_id not in self.master.agents:
                continue
            self.master.disable(agent_id)
            self.held.add(agent_id)
            if self.drainer is not None:
                self.drainer.hold(agent_id)
            self._read_by(now + 1)  # the bridge's next read sees it drained

    def _note_at_max(self, now: int, at_max: bool) -> None:
        if at_max and self._at_max_since is None:
            self._at_max_since = now
        elif not at_max and self._at_max_since is not None:
            self._at_max_seconds += now - self._at_max_since
            self._at_max_since = None

    def _plan_wake(self, now: int, acted: bool) -> None:
        self._idle_end_at = self._next_idle_end(now)
        if self.exhaustive:
            self._heartbeat_at = self._beat_from(now + 1)
            self._sweep_at = next_on_grid(now + 1, SWEEP_EVERY)
            return
        deadline = self._next_deadline(now)
        if acted:
            # A fleet that grew or shrank may free what min_instances held back (an
            # agent idle past its period): the next snapshot may act on it.
            deadline = now + 1 if deadline is None else min(deadline, now + 1)
        self._deadline = deadline
        self._heartbeat_at = None if deadline is None else self._beat_from(deadline)
        self._sweep_at = None if deadline is None else next_on_grid(deadline, SWEEP_EVERY)

    def _beat_from(self, time: int) -> int:
        """The first heartbeat at or after ``time``: published at the bridge's read then."""
        return next_on_grid(next_on_grid(time, self.heartbeat), BRIDGE_READS_EVERY)

    def _next_idle_end(self, now: int) -> int | None:
        """When the bridge next publishes because an agent's idle period ran out: at its
        first read from then."""
        if self.idle_clock is None:
            return None
        period = self.pool.provider.max_idle_agent_period
        end = self.idle_clock.next_end(period, at(now))
        return None if end is None else next_on_grid(seconds_at(end) + 1, BRIDGE_READS_EVERY)

    def _next_deadline(self, now: int) -> int | None:
        """The first second after ``now`` at which a timer of the decision runs out.

        Timers already run out are left out: whatever they allow and was not done yet is
        held back by the state (min_instances), and a change of state is a snapshot.
        """
        deadlines = []
        for instance in self.cloud.instances():
            marks = instance.marks
            if Mark.REGISTERED not in marks:
                deadlines.append(instance.launched + self._starting)
            for mark, period in self._periods.items():
                since = marks.get(mark)
                if since is not None:
                    # An idle agent goes once idle longer than its period (decide.walk).
                    deadlines.append(seconds_at(since) + period + (mark is Mark.IDLE_SINCE))
            idle = marks.get(Mark.IDLE_SINCE)
            if idle is not None:
                # Half the idle period on, the idle mark of an agent pending tasks count
                # on is renewed (decide.marks.still_wanted).
                deadlines.append(seconds_at(idle) + -(-self._periods[Mark.IDLE_SINCE] // 2))
        # A stopped machine of the warm pool past its period (with max_stopped auto, its
        # break-even time) is deleted by the sweep.
        provider = self.pool.provider
        deadlines += [
            i.stopped + int(kept_for(provider, i.offering.price).total_seconds())
            for i in self.cloud.stopped_instances()
            if i.stopped
        ]
        # A refused offering back in the catalog may be the cheaper shape for pending
        # tasks or the smallest one warm headroom is kept on.
        deadlines += self.cloud.remembered_until()
        # Warm headroom sized from arrivals changes as the oldest leaves the window.
        leave = self.master.arrivals_leave_at(now)
        if leave is not None:
            deadlines.append(leave)
        # A reservation starting takes new work; one ending lets its idle agents go
        # (``decide.idle`` keeps them only while it is active).
        for reservation in self.cloud.reservations.values():
            deadlines += [t for t in (reservation.start, reservation.end) if t is not None]
        # A drain notice whose time comes (a reservation's end, announced ahead).
        deadlines += self._notices.values()
        if self.drainer is not None:
            # The bridge drains an agent idle for the period by its own clock, and retires
            # a drained one idle for RETIRE_AFTER.
            period = self._periods[Mark.IDLE_SINCE]
            deadlines += [seconds_at(since) + period for since in self.drainer.idle_since.values()]
            retire = int(RETIRE_AFTER.total_seconds())
            deadlines += [
                seconds_at(since) + retire for since in self.drainer.drained_idle_since.values()
            ]
        return min((d for d in deadlines if d > now), default=None)


def _retiring(snapshot: Snapshot, retired: set[str], drains: bool) -> Snapshot:
    """The snapshot as the bridge publishes it: the agents it retired (its drainer's, and
    those drained on a notice: disabled, so draining) reported so; with its drains, that
    it reports retirements (``retires``)."""
    agents = tuple(
        dataclasses.replace(a, retired=True) if a.id in retired and a.draining else a
        for a in snapshot.agents
    )
    update: dict[str, object] = {"agents": agents}
    if drains:
        update["retires"] = True
    return snapshot.model_copy(update=update)


def _due(time: int | None, now: int) -> bool:
    return time is not None and time <= now
