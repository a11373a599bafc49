"""One pass over a pool: observe, decide, act. The same for every cloud and entry point.

Handlers parse their event and call ``apply_snapshot`` or ``sweep``; the cloud comes in
as a ``Provider`` and the time as ``now``, so tests and the demo run this very code.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from dynagent.core.config import Config, Pool, Settings
from dynagent.core.decide import decide
from dynagent.core.durations import format_duration
from dynagent.core.fleet import Fleet
from dynagent.core.plan import Launch, Plan
from dynagent.core.snapshot import InvalidSnapshot, Snapshot
from dynagent.run.launch_errors import LaunchErrorMemory
from dynagent.run.provider import LaunchResult, Provider, StartResult
from dynagent.run.repack import Decision, Repack, combined, found_no_capacity, repack

ProviderFactory = Callable[[Pool], Provider]
# Seconds from an arbitrary start, for a pass's duration: time.monotonic, or a test's.
Timer = Callable[[], float]
# How far ahead of the function's clock a snapshot's time may be: clocks drift a little.
# A snapshot from further ahead comes from a master whose clock is wrong; it would stay
# "fresh" for as long and date its spot requests' expiry past what EC2 accepts.
MAX_CLOCK_SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class Outcome:
    """What a pass did to one pool, for the log, the caller's report and the metrics.

    ``fleet``, ``snapshot`` and ``duration`` are for metrics only: ``report()`` leaves
    them out, so the log line stays small for a pool of thousands of instances.
    """

    pool: str
    plan: Plan | None = None
    # What the pass's launches did, re-packs included.
    launch: LaunchResult | None = None
    seq: int | None = None
    # Set when the pass did nothing on purpose (a stale or superseded snapshot).
    skipped: str | None = None
    # Set when the pass failed; the sweep goes on with the other pools.
    error: str | None = None
    # What the pass observed, and the snapshot it applied, or skipped as too old.
    fleet: Fleet | None = field(default=None, repr=False)
    snapshot: Snapshot | None = field(default=None, repr=False)
    # Seconds the pass took: observe, decide and act.
    duration: float | None = None
    # Until when launches are paused (launch_error_timeout/retries), when they were.
    launches_paused_until: datetime | None = None
    # The rounds that re-packed tasks no offering had capacity for (``dynagent.run.repack``).
    repacks: tuple[Repack, ...] = ()
    # What starting the warm pool's stopped machines did (their cold launches are in
    # ``launch``).
    start: StartResult | None = None

    @property
    def launches(self) -> tuple[Launch, ...]:
        """Every launch the pass tried, in order: the plan's, the cold launches of the
        starts the cloud refused, then each re-pack's."""
        plan, start = self.plan, self.start
        if plan is None:
            return ()
        refused = {instance_id for instance_id, _, _ in start.refused} if start else set()
        cold = tuple(s.cold for s in plan.starts if s.instance_id in refused)
        repacked = tuple(launch for r in self.repacks for launch in r.plan.launches)
        return plan.launches + cold + repacked

    def report(self) -> dict[str, Any]:
        """A JSON-ready summary: every action with its reason."""
        summary: dict[str, Any] = {"pool": self.pool, "seq": self.seq}
        if self.skipped:
            summary["skipped"] = self.skipped
        if self.launches_paused_until is not None:
            summary["launches_paused_until"] = self.launches_paused_until.isoformat()
        if self.error:
            summary["error"] = self.error
        if self.plan is not None:
            summary["actions"] = self.plan.describe()
            summary["unschedulable"] = [
                {"task": u.task, "slots": u.slots, "reason": u.reason}
                for u in self.plan.unschedulable
            ]
            if self.plan.unmatched_agents:
                # A count and a few ids: thousands of static agents would fill the line.
                summary["unmatched_agents"] = len(self.plan.unmatched_agents)
        if self.launch is not None:
            summary["launched"] = list(self.launch.started)
            if self.launch.error:
                summary["launch_error"] = self.launch.error
            if self.launch.replayed:
                summary["launch_replayed"] = True
        if self.repacks:
            summary["repacked"] = [r.report() for r in self.repacks]
        if self.start is not None:
            summary["started"] = list(self.start.started)
            if self.start.refused:
                summary["start_refused"] = [
                    {"instance": i, "error": error} for i, error, _ in self.start.refused
                ]
        return summary


def reconcile(
    pool: Pool,
    provider: Provider,
    snapshot: Snapshot | None,
    now: datetime,
    settings: Settings | None = None,
    timer: Timer = time.monotonic,
    launch_errors: LaunchErrorMemory | None = None,
) -> Outcome:
    """Observe the pool's fleet, decide, and carry the plan out (``act``)."""
    started = timer()
    fleet = provider.observe()

    def decision(seen: Fleet) -> Plan:
        return decide(pool, seen, snapshot, now, settings)

    outcome = act(pool, provider, fleet, decision, now, launch_errors)
    return replace(
        outcome,
        seq=snapshot.seq if snapshot else None,
        snapshot=snapshot,
        duration=timer() - started,
    )


def act(
    pool: Pool,
    provider: Provider,
    fleet: Fleet,
    decision: Decision,
    now: datetime,
    launch_errors: LaunchErrorMemory | None = None,
) -> Outcome:
    """Decide on the observed ``fleet`` and carry the plan out: with ``launch_errors``,
    launches pause as ``launch_error_timeout``/``launch_error_retries`` say, and the
    launches' result is recorded there. Machines that found no capacity anywhere are
    re-packed in the same pass (``repack``), by the same decision."""
    plan = decision(fleet)
    paused_until = None
    if launch_errors is not None:
        plan, paused_until = launch_errors.hold(pool, plan, now)
    launch, start = apply(plan, provider)
    repacks: tuple[Repack, ...] = ()
    if launch is not None and found_no_capacity(launch):
        launch, repacks = repack(provider, fleet, now, decision, plan, launch)
    if launch_errors is not None and launch is not None:
        launch_errors.record(pool, launch.error, now)
    return Outcome(
        pool.name,
        plan,
        launch,
        fleet=fleet,
        launches_paused_until=paused_until,
        repacks=repacks,
        start=start,
    )


def apply(plan: Plan, provider: Provider) -> tuple[LaunchResult | None, StartResult | None]:
    """Carry a plan out, in the order that keeps each step allowed and safe: what the
    launches and the starts did."""
    # Cancel first, so a request does not turn into an instance we then must reap.
    if plan.cancellations:
        provider.cancel(plan.cancellations)
    # Adopt before anything else touches those instances: their tags are the permission.
    if plan.adoptions:
        provider.adopt(plan.adoptions)
    if plan.marks:
        provider.write_marks(plan.marks)
    if plan.terminations:
        provider.terminate(plan.terminations)
    # Marks first: a stopped machine's agent marks are cleared and its stop recorded.
    if plan.stops:
        provider.stop(plan.stops)
    start = provider.start(plan.starts) if plan.starts else None
    launch = provider.launch(plan) if plan.launches else None
    if start is not None and start.refused:
        launch = _launch_cold(plan, provider, start, launch)
    return launch, start


def _launch_cold(
    plan: Plan, provider: Provider, start: StartResult, launch: LaunchResult | None
) -> LaunchResult:
    """New machines for the tasks of the starts the cloud refused, in the same pass: each
    its start's cold launch, on its type elsewhere and larger types (the refused
    machine's own offering left out), under a launch key of its own so a replay that
    meets the same refusal launches nothing twice."""
    by_id = {s.instance_id: s for s in plan.starts}
    for instance_id, _, _ in start.refused:
        key = f"{plan.launch_key}:cold:{instance_id}"
        cover = plan.only_launching(key, (by_id[instance_id].cold,))
        result = provider.launch(cover)
        launch = result if launch is None else combined(launch, result)
    assert launch is not None
    return launch


def apply_snapshot(
    config: Config,
    snapshot: Snapshot,
    providers: ProviderFactory,
    now: datetime,
    timer: Timer = time.monotonic,
    launch_errors: LaunchErrorMemory | None = None,
) -> Outcome:
    """Reconcile the snapshot's pool, unless the snapshot is too old to trust.

    Raises InvalidSnapshot as ``check_snapshot`` does.
    """
    pool, skipped = check_snapshot(config, snapshot, now)
    if skipped is not None:
        # Its age is worth a metric: the queue is behind.
        return Outcome(pool.name, seq=snapshot.seq, snapshot=snapshot, skipped=skipped)
    return reconcile(pool, providers(pool), snapshot, now, config.settings, timer, launch_errors)


def check_snapshot(config: Config, snapshot: Snapshot, now: datetime) -> tuple[Pool, str | None]:
    """The snapshot's pool, and why a pass would skip the snapshot (None: it applies).

    Raises InvalidSnapshot for a pool the config does not manage, or a snapshot dated
    ahead of ``now`` by more than MAX_CLOCK_SKEW: no retry can make either applicable.
    """
    try:
        pool = config.pool(snapshot.pool)
    except KeyError as error:
        raise InvalidSnapshot(str(error.args[0])) from None
    age = now - snapshot.time
    if -age > MAX_CLOCK_SKEW:
        raise InvalidSnapshot(
            f"time: {snapshot.time.isoformat()} is {format_duration(-age)} ahead of this "
            f"function's clock (at most {format_duration(MAX_CLOCK_SKEW)} allowed): "
            "check the publisher's clock"
        )
    limit = config.settings.max_snapshot_age
    if age > limit:
        return pool, (
            f"snapshot is {format_duration(age)} old "
            f"(max_snapshot_age {format_duration(limit)}); a newer one supersedes it"
        )
    return pool, None


def sweep(
    config: Config,
    providers: ProviderFactory,
    now: datetime,
    timer: Timer = time.monotonic,
    launch_errors: LaunchErrorMemory | None = None,
) -> list[Outcome]:
    """Reconcile every pool with no snapshot: reap by what the cloud shows alone.

    One pool's failure does not stop the others; it is in its Outcome's ``error``.
    """
    outcomes = []
    for pool in config.pools.values():
        try:
            outcome = reconcile(
                pool, providers(pool), None, now, config.settings, timer, launch_errors
            )
            outcomes.append(outcome)
        except Exception as error:
            outcomes.append(Outcome(pool.name, error=f"{type(error).__name__}: {error}"))
    return outcomes


def newest_per_pool(snapshots: Iterable[Snapshot]) -> dict[str, int]:
    """The highest seq of each pool among a batch: older ones are superseded by it."""
    newest: dict[str, int] = {}
    for snapshot in snapshots:
        newest[snapshot.pool] = max(snapshot.seq, newest.get(snapshot.pool, snapshot.seq))
    return newest


def log_outcome(logger: Any, outcome: Outcome) -> None:
    """One structured line per pass, at a level that says whether anyone should look."""
    report = outcome.report()
    if outcome.error:
        logger.error("pool pass failed", extra=report)
    elif outcome.launch is not None and outcome.launch.error:
        logger.error("launch refused by the cloud", extra=report)
    elif outcome.plan is not None and outcome.plan.unschedulable:
        logger.warning("pool has unschedulable tasks", extra=report)
    else:
        logger.info("skipped" if outcome.skipped else "pool reconciled", extra=report)
