"""One policy's run over a trace: the master, the cloud and the policy on one virtual clock.

At each second where something happens, in this order: the cloud's boot events (an
instance shows running, an agent registers), task ends, arrivals; then the master
places what fits; then the policy acts, and agents of instances it terminated leave
the master (which may make it act again in the same second). The run jumps from one
such second to the next: there is nothing to compute in between.

The run ends once every task that can run here has run and the fleet has settled
(nothing booting, at most ``min_instances`` left), or, failing that, a drain period
after the last task ended (a policy may keep churning over a task it can never place).
A run whose tasks never finish (agents that never register in time, say) gives up
once even running every task one after the other would have been done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dynagent.core.config import Pool, Settings
from dynagent.core.fitting import DEFAULT_FITTING_POLICY, FittingPolicy
from dynagent.simulate.boot import BootModel
from dynagent.simulate.capacity import Outage
from dynagent.simulate.clock import Events, Kind
from dynagent.simulate.cloud import Interruptions, SimCloud
from dynagent.simulate.determined import DeterminedPolicy, baseline_offering, baseline_pool
from dynagent.simulate.fitting import pool_sizes
from dynagent.simulate.master import SimMaster
from dynagent.simulate.ours import HEARTBEAT, DynagentPolicy
from dynagent.simulate.policy import Policy
from dynagent.simulate.reservations import SimReservation
from dynagent.simulate.series import Series
from dynagent.simulate.trace import Trace
from dynagent.simulate.usage import Usage

POLICIES = ("dynagent", "determined")
# How long after the last task the fleet may take to settle before the run stops anyway.
DRAIN = 6 * 3600
# Rounds of (policy acts, terminated agents leave) within one second, at most.
_MAX_ROUNDS = 4

Progress = Callable[[float], None]


@dataclass(frozen=True)
class RunOptions:
    boot: BootModel = field(default_factory=BootModel)
    # Seconds between the master's snapshots when nothing changes.
    heartbeat: int = HEARTBEAT
    # Deliver every heartbeat, sweep and tick instead of only those a timer makes count.
    exhaustive: bool = False
    # Windows in which the cloud has no capacity for an offering (from the trace's start).
    outages: tuple[Outage, ...] = ()
    # Dollars per instance-hour for every instance, over the catalog's (a one-type pool).
    price: float | None = None
    # Spot instances reclaimed per machine-hour (exponential lifetimes, from the boot
    # seed); their tasks resume with the time they had left.
    interruption_rate: float = 0.0
    # How the master fits a task on its agents (its scheduler's fitting_policy).
    fitting_policy: FittingPolicy = DEFAULT_FITTING_POLICY
    # Capacity reserved ahead (from the trace's start), billed whether used or not.
    reservations: tuple[SimReservation, ...] = ()
    # Seconds from the trace's start at which the pool moves to a new agent image (an
    # upgrade of Determined): how long until no machine of the old one is left.
    upgrade_at: int | None = None


@dataclass
class PolicyRun:
    """What one policy did over the trace: the raw facts the report is made of."""

    policy: str
    billed_instance_seconds: int
    billed_slot_seconds: int
    billed_dollars: float
    waits: list[int]
    never_scheduled: int
    larger_than_pool: int
    launches: int
    # Launched instances whose agent never ran a task (never registered, or reaped idle).
    unused_launches: int
    # Launches by machine type, and launch calls the cloud refused for want of capacity.
    launches_by_type: dict[str, int]
    refusals: int
    terminations: int
    requeued: int
    decisions: int
    # Spot instances the cloud reclaimed, and how long the tasks requeued from them (and
    # any other lost agent) waited to start again, sorted.
    interruptions: int
    restart_waits: list[int]
    # Seconds the policy's plans had demand waiting at max_instances (None: it makes
    # no such plans).
    pending_at_max_seconds: int | None
    start: int
    end: int
    series: Series = field(repr=False)
    usage: Usage = field(repr=False)
    # The warm pool: machines stopped, started, starts refused for capacity, the most
    # stopped at once, and what their disks billed (part of ``billed_dollars``); None
    # for a policy or pool without one.
    stops: int | None = None
    starts: int | None = None
    start_refusals: int | None = None
    most_stopped: int | None = None
    disk_dollars: float | None = None
    # The reservations (None: none): place-hours held and used, what their windows
    # billed (part of ``billed_dollars``), and on-demand machines launched of a type
    # while a place of it was free.
    reserved_hours: float | None = None
    reserved_used_hours: float | None = None
    reserved_dollars: float | None = None
    on_demand_beside_free: int | None = None
    # An upgrade (``RunOptions.upgrade_at``; None: none): seconds from it until no
    # machine of the old config was left (None: some still were at the end), and tasks
    # requeued after it (an agent lost while they ran).
    upgraded_after: int | None = None
    requeued_since_upgrade: int | None = None


def upgraded(pool: Pool) -> Pool:
    """The pool after an upgrade: the same, with the next agent image."""
    provider = pool.provider
    image = f"{provider.agent_docker_image}-upgraded"
    return pool.model_copy(
        update={"provider": provider.model_copy(update={"agent_docker_image": image})}
    )


def make_policy(
    name: str,
    pool: Pool,
    settings: Settings,
    cloud: SimCloud,
    master: SimMaster,
    options: RunOptions,
) -> Policy:
    if name == "dynagent":
        return DynagentPolicy(pool, settings, cloud, master, options.exhaustive, options.heartbeat)
    if name == "determined":
        return DeterminedPolicy(pool, cloud, master, options.exhaustive)
    raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")


class Simulation:
    def __init__(
        self,
        trace: Trace,
        pool: Pool,
        settings: Settings,
        policy: str,
        options: RunOptions,
        progress: Progress | None = None,
    ) -> None:
        self.trace = trace
        # Determined's provisioner knows one instance type: the pool's instance_type.
        baseline = policy == "determined"
        default = baseline_offering(pool) if baseline else pool.provider.catalog().offerings[0]
        # Reservations are billed at, and placed in, what the admin's pool buys.
        catalog = pool.provider.catalog()
        on_demand = {
            o.instance_type: catalog.price_of(o.instance_type, False) for o in catalog.offerings
        }
        zones: dict[str, str] = {}
        for offering in catalog.offerings:
            zones.setdefault(offering.instance_type, offering.zone)
        self.pool = pool = baseline_pool(pool) if baseline else pool
        self.now = trace.start
        self.events = Events()
        provider = pool.provider
        self.cloud = SimCloud(
            options.boot.sampler(),
            self.events,
            lambda: self.now,
            default=default,
            outages=tuple(outage.shifted(trace.start) for outage in options.outages),
            price=options.price,
            interruptions=Interruptions(options.interruption_rate, options.boot.seed),
            disk_per_hour=provider.stopped_disk_per_hour,
            reservations=tuple(r.within(trace.start, trace.end) for r in options.reservations),
            on_demand=on_demand,
            zones=zones,
        )
        self.master = SimMaster(
            pool.name,
            pool_sizes(pool),
            provider.max_instances,
            self.events,
            free_slots_matter=policy == "dynagent"
            and (provider.headroom_slots > 0 or provider.headroom_auto),
            reports_arrivals=policy == "dynagent" and provider.headroom_auto,
            fitting_policy=options.fitting_policy,
            max_aux=pool.max_aux_containers_per_agent,
        )
        self.policy = make_policy(policy, pool, settings, self.cloud, self.master, options)
        self.series = Series()
        self.usage = Usage()
        self.progress = progress
        self._next_job = 0
        self._upgrade_at = None if options.upgrade_at is None else trace.start + options.upgrade_at
        # When the upgrade came, what the master had requeued by then, and when the last
        # machine of the old config went.
        self._upgraded: tuple[int, int] | None = None
        self._old_gone_at: int | None = None
        self._drain_until: int | None = None
        self._give_up_at = trace.end + sum(job.duration for job in trace.jobs) + DRAIN

    def run(self) -> PolicyRun:
        while True:
            now, stop = self._next_instant(), self._stop_at()
            if now is None or now > stop:
                # Nothing happens before the run stops: the fleet bills on until then.
                self.now = stop
                break
            self.now = now
            self._advance(now)
            self._act(now)
            self._record(now)
            if self._settled(now):
                break
        if self.progress is not None:
            self.progress(1.0)
        return self._result()

    def _next_instant(self) -> int | None:
        jobs = self.trace.jobs
        times = [self.events.next_time(), self.policy.wake_at()]
        if self._upgraded is None:
            times.append(self._upgrade_at)
        if self._next_job < len(jobs):
            times.append(jobs[self._next_job].arrival)
        return min((t for t in times if t is not None), default=None)

    def _advance(self, now: int) -> None:
        for kind, subject in self.events.pop_due(now):
            if kind is Kind.INSTANCE_RUNNING:
                self.cloud.show_running(subject)
            elif kind is Kind.AGENT_REGISTERED:
                instance = self.cloud.live.get(subject)
                if instance is not None:
                    self.master.connect(subject, instance.slots)
            elif kind is Kind.SPOT_WARNING:
                if subject in self.cloud.live:
                    self.policy.interruption_warning(now, subject)
            elif kind is Kind.SPOT_RECLAIMED:
                if self.cloud.reclaim(subject):
                    self.master.disconnect(subject, now, resume=True)
                    self.policy.fleet_changed(now)
            else:
                self.master.finish(*subject)
        jobs = self.trace.jobs
        while self._next_job < len(jobs) and jobs[self._next_job].arrival <= now:
            self.master.submit(jobs[self._next_job])
            self._next_job += 1
        if self._upgrade_at is not None and self._upgraded is None and now >= self._upgrade_at:
            self._upgraded = (now, self.master.requeued)
            self.cloud.generation += 1
            self.policy.upgrade(now, upgraded(self.pool))
        self.master.schedule(now)

    def _act(self, now: int) -> None:
        for _ in range(_MAX_ROUNDS):
            self.policy.act(now, self.master.take_change())
            gone = self.cloud.take_terminated()
            if not gone:
                return
            for agent_id in gone:
                self.master.disconnect(agent_id, now)
            self.master.schedule(now)

    def _record(self, now: int) -> None:
        master = self.master
        fleet = self.cloud.live_slots
        self.series.record(now, master.busy_slots + master.queued_slots, fleet, master.busy_slots)
        self.usage.observe(now, fleet, master.busy_slots, master.connected_slots, master.idle_slots)
        upgraded = self._upgraded is not None and self._old_gone_at is None
        if upgraded and not self.cloud.old_machines():
            self._old_gone_at = now
        if self.progress is not None:
            span = max(1, self.trace.end - self.trace.start)
            self.progress(min(1.0, (now - self.trace.start) / span))

    def _stop_at(self) -> int:
        return self._give_up_at if self._drain_until is None else self._drain_until

    def _settled(self, now: int) -> bool:
        """Every task that can run here has run, and nothing is left to reap."""
        if self._next_job < len(self.trace.jobs) or self.master.running:
            return False
        if any(task.schedulable for task in self.master.queue):
            return False
        if self._drain_until is None:
            self._drain_until = now + DRAIN
        live = self.cloud.live
        return len(live) <= self.pool.provider.min_instances and all(
            instance_id in self.master.agents for instance_id in live
        )

    def _result(self) -> PolicyRun:
        master = self.master
        self.usage.close(self.now)
        never = [task for task in master.queue if task.start is None]
        bill = self.cloud.bill(self.now)
        return PolicyRun(
            policy=self.policy.name,
            billed_instance_seconds=bill.instance_seconds,
            billed_slot_seconds=bill.slot_seconds,
            billed_dollars=bill.dollars,
            waits=sorted(master.waits),
            never_scheduled=len(never),
            larger_than_pool=sum(1 for task in never if not task.schedulable),
            launches=self.cloud.launches,
            unused_launches=self._unused_launches(),
            launches_by_type=dict(self.cloud.launches_by_type),
            refusals=self.cloud.refusals,
            terminations=self.cloud.terminations,
            requeued=master.requeued,
            decisions=self.policy.decisions,
            interruptions=self.cloud.interruptions,
            restart_waits=sorted(master.restart_waits),
            pending_at_max_seconds=self.policy.pending_at_max_seconds(self.now),
            start=self.trace.start,
            end=self.now,
            series=self.series,
            usage=self.usage,
            **self._warm_pool(bill.disk_dollars),
            **self._reserved(bill.reserved_dollars),
            **self._upgrade(),
        )

    def _upgrade(self) -> dict[str, Any]:
        if self._upgraded is None:
            return {}
        at, requeued = self._upgraded
        gone = None if self._old_gone_at is None else self._old_gone_at - at
        return {
            "upgraded_after": gone,
            "requeued_since_upgrade": self.master.requeued - requeued,
        }

    def _reserved(self, dollars: float) -> dict[str, Any]:
        cloud = self.cloud
        if not cloud.reservations:
            return {}
        held, used = cloud.reserved_place_seconds(self.now)
        return {
            "reserved_hours": held / 3600,
            "reserved_used_hours": used / 3600,
            "reserved_dollars": dollars,
            "on_demand_beside_free": cloud.on_demand_beside_free,
        }

    def _warm_pool(self, disk_dollars: float) -> dict[str, Any]:
        """The warm pool's figures, for the policy that keeps one (Determined has none)."""
        if not isinstance(self.policy, DynagentPolicy) or not self.pool.provider.warm_pool.enabled:
            return {}
        cloud = self.cloud
        return {
            "stops": cloud.stops,
            "starts": cloud.starts,
            "start_refusals": cloud.start_refusals,
            "most_stopped": cloud.most_stopped,
            "disk_dollars": disk_dollars,
        }

    def _unused_launches(self) -> int:
        master = self.master
        # A started machine's agent registers again: a connection, not a launch.
        never_registered = self.cloud.launches + self.cloud.starts - master.connections
        unused_now = sum(1 for agent in master.agents.values() if not agent.ever_used)
        return never_registered + master.never_used + unused_now


def simulate(
    trace: Trace,
    pool: Pool,
    settings: Settings,
    policy: str,
    options: RunOptions | None = None,
    progress: Progress | None = None,
) -> PolicyRun:
    """Replay ``trace`` on ``pool`` under one policy."""
    return Simulation(trace, pool, settings, policy, options or RunOptions(), progress).run()
