"""The bridge's passes: read the master whole, drain, publish what changed.

A pass that cannot read the master completely publishes nothing: the functions then
act on the last snapshot they had, and on ``max_disconnected_period`` for agents that
stay missing. An outage is logged once, with its end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from dynagent.core.admission import pools_from_master_config, pools_from_resource_pools
from dynagent.core.config import Config
from dynagent.core.durations import format_duration
from dynagent.core.plan import DrainNotice
from dynagent.core.snapshot import Snapshot

from .admission_check import admission_findings
from .arrivals import ArrivalLog
from .client import MasterClient, MasterRefused, MasterUnavailable
from .drain import Drainer
from .idle import IdleClock
from .reading import PoolReading, read_pools

# A snapshot at least this often, changed or not: the functions' heartbeat.
HEARTBEAT = timedelta(seconds=30)
INTERVAL_SECONDS = 5.0
MAX_BACKOFF_SECONDS = 60.0


class Sink(Protocol):
    def publish(self, snapshot: Snapshot) -> object: ...


class BridgeRefused(Exception):
    """A configuration the bridge must not run with: a pool the master provisions itself,
    or one it admits no work for."""


@dataclass
class _Published:
    at: datetime
    content: tuple[object, ...]


@dataclass
class Bridge:
    config: Config
    master: MasterClient
    sink: Sink
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    sleep: Callable[[float], object] = time.sleep
    logger: Any = field(default_factory=lambda: logging.getLogger("dynagent.bridge"))
    # By pool: each pool's drain memory (when its agents went idle, which it drained).
    drainers: dict[str, Drainer] = field(default_factory=dict)
    last: dict[str, _Published] = field(default_factory=dict)
    seq: int = 0
    outage_since: datetime | None = None
    # Why the last pass could not read the master (None: it could).
    outage_error: str | None = None
    missing_logged: set[str] = field(default_factory=set)
    # By pool without drain_idle_agents: when a published snapshot first showed each
    # agent idle, so the snapshot that lets the functions reap it goes out on time.
    idle_clocks: dict[str, IdleClock] = field(default_factory=dict)
    # The master host's addresses by master_url alias (host_addresses), for every snapshot.
    master_addresses: dict[str, str] | None = None
    # The pool file's name, for the fixes the admission check names.
    config_file: str = "POOLS.yaml"
    # The master's launch_error, once its config was read (None: not readable).
    launch_error: bool | None = None
    master_config_read: bool = False
    admission_warned: set[str] = field(default_factory=set)
    # Where the functions' drain notices come from (bridge.drain_notices), if anywhere;
    # what they said, by pool and agent: the latest notice of each.
    drain_notices: Any = None
    handbacks: dict[str, dict[str, DrainNotice]] = field(default_factory=dict)
    # By pool with warm_headroom_slots auto: the tasks that came lately (bridge.arrivals).
    arrival_logs: dict[str, ArrivalLog] = field(default_factory=dict)

    def run_once(self) -> list[Snapshot]:
        """One pass; the snapshots it published (none when the master was not read)."""
        now = self.clock()
        try:
            readings = self._read()
        except MasterUnavailable as error:
            self.outage_error = str(error)
            if self.outage_since is None:
                self.outage_since = now
                self.logger.warning(
                    f"master {self.master.url} unavailable ({error}): publishing nothing "
                    "until it answers",
                    extra={"error": str(error)},
                )
            return []
        self.outage_error = None
        if self.outage_since is not None:
            self.logger.warning(
                "master answering again",
                extra={"outage": format_duration(now - self.outage_since)},
            )
            self.outage_since = None
        self._read_drain_notices()
        published = []
        for name, pool in self.config.pools.items():
            reading = readings.get(name)
            if reading is None:
                if name not in self.missing_logged:
                    self.missing_logged.add(name)
                    self.logger.warning(f"pool {name!r} is not in the master's resource pools")
                continue
            reading = self._drain(pool.name, reading, now)
            snapshot = self._snapshot(reading, now)
            if snapshot is not None:
                self.sink.publish(snapshot)
                published.append(snapshot)
        return published

    def run_forever(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        failures = 0
        while not should_stop():
            self.run_once()
            failures = failures + 1 if self.outage_since is not None else 0
            # Back off while the master is down: 5 s, 10 s, ... at most a minute.
            delay = min(INTERVAL_SECONDS * (2 ** max(0, failures - 1)), MAX_BACKOFF_SECONDS)
            self.sleep(delay)

    def _read(self) -> dict[str, PoolReading]:
        pools = self.master.resource_pools()
        managed = set(self.config.pools)
        agents = self.master.agents()
        allocations = self.master.allocations()
        listed = {str(pool.get("name")) for pool in pools}
        jobs = {name: self.master.job_queue(name) for name in sorted(managed & listed)}
        self._check_admission(pools)
        return read_pools(agents, pools, allocations, jobs)

    def _check_admission(self, pools: list[dict[str, Any]]) -> None:
        """Refuse to run, or warn once, where the master would refuse work dynagent scales
        for or provisions a pool itself. At the first read the master's own config says
        (where this user may read it); later, the resource pools it lists."""
        view = pools_from_resource_pools(pools)
        if not self.master_config_read:
            master_config = self.master.master_config()
            self.master_config_read = True
            if master_config is None:
                self.logger.info(
                    "the master's config is for admins only: checking the pools it lists, "
                    "assuming launch_error is true (Determined's default)"
                )
            else:
                self.launch_error = master_config.get("launch_error", True) is not False
                view = pools_from_master_config(master_config)
        findings = admission_findings(self.config, view, self.launch_error, self.config_file)
        refusals = [finding.message for finding in findings if finding.refuse]
        if refusals:
            raise BridgeRefused("\n".join(refusals))
        for finding in findings:
            if finding.message not in self.admission_warned:
                self.admission_warned.add(finding.message)
                self.logger.warning(finding.message, extra={"pool": finding.pool})

    def _read_drain_notices(self) -> None:
        if self.drain_notices is None:
            return
        try:
            received = self.drain_notices.receive()
        except Exception as error:  # the next pass reads them again: they are re-sent
            self.logger.warning(f"could not read drain notices: {error}")
            return
        for pool, notice in received:
            if pool in self.config.pools:
                self.handbacks.setdefault(pool, {})[notice.agent_id] = notice

    def _hand_back(
        self, pool_name: str, drainer: Drainer, reading: PoolReading, now: datetime
    ) -> PoolReading:
        """Agents the functions gave notice of (their machine is taken back soon, or must
        be replaced): drained for good once the notice's time has come, so the master
        places no new work on them."""
        notices = self.handbacks.get(pool_name)
        if not notices:
            return reading
        present = {agent.id: agent for agent in reading.agents}
        for agent_id in [a for a, n in notices.items() if a not in present and n.at <= now]:
            del notices[agent_id]
        for agent_id, notice in sorted(notices.items()):
            agent = present.get(agent_id)
            if agent is None or notice.at > now or agent_id in drainer.held:
                continue
            if agent.enabled:
                try:
                    self.master.disable(agent_id)
                except (MasterRefused, MasterUnavailable) as error:
                    self.logger.warning(
                        f"could not drain agent {agent_id}: {error}", extra={"pool": pool_name}
                    )
                    continue
                reading = reading.with_state(agent_id, enabled=False, draining=True)
            drainer.hold(agent_id)
            self.logger.info(
                f"drained agent {agent_id} for good: {notice.reason}",
                extra={"pool": pool_name},
            )
        return reading

    def _drain(self, pool_name: str, reading: PoolReading, now: datetime) -> PoolReading:
        pool = self.config.pool(pool_name)
        drainer = self.drainers.setdefault(pool_name, Drainer())
        reading = self._hand_back(pool_name, drainer, reading, now)
        for action in drainer.actions(pool, reading, now):
            # A drained agent is never terminated until retired (drain.py), so one that
            # pending tasks want is enabled at once: no function can be acting on it.
            try:
                if action.enable:
                    self.master.enable(action.agent_id)
                else:
                    self.master.disable(action.agent_id)
            except (MasterRefused, MasterUnavailable) as error:
                # A reconnecting agent refuses (HTTP 500); the next pass tries again.
                self.logger.warning(
                    f"could not {'enable' if action.enable else 'drain'} agent "
                    f"{action.agent_id}: {error}",
                    extra={"pool": pool_name},
                )
                continue
            self.logger.info(
                f"{'enabled' if action.enable else 'drained'} agent {action.agent_id}: "
                f"{action.reason}",
                extra={"pool": pool_name},
            )
            drainer.done(action)
            reading = reading.with_state(
                action.agent_id, enabled=action.enable, draining=not action.enable
            )
        if pool.provider.drain_idle_agents:
            before = set(drainer.retired)
            drainer.retire(reading, now)
            for agent_id in sorted(drainer.retired - before):
                self.logger.info(
                    f"retired agent {agent_id}: drained and idle, no task wants it; the "
                    "functions may terminate it",
                    extra={"pool": pool_name},
                )
        return reading

    def _idle_period_ended(self, pool_name: str, since: datetime, now: datetime) -> bool:
        """Whether an agent's max_idle_agent_period ran out after ``since``, up to ``now``.
        Never in a pool with drain_idle_agents: there the functions terminate only
        drained agents, and a drain is a change, published."""
        idle = self.idle_clocks.get(pool_name)
        if idle is None:
            return False
        end = idle.next_end(self.config.pool(pool_name).provider.max_idle_agent_period, since)
        return end is not None and end < now

    def _snapshot(self, reading: PoolReading, now: datetime) -> Snapshot | None:
        """The pool's snapshot if it changed, an agent's idle period ran out or the
        heartbeat is due, else None."""
        drainer = self.drainers.setdefault(reading.name, Drainer())
        provider = self.config.pool(reading.name).provider
        log = (
            self.arrival_logs.setdefault(reading.name, ArrivalLog())
            if provider.headroom_auto
            else None
        )
        if log is not None:
            log.read(reading.tasks, now)
        agents = tuple(
            a.as_agent(
                draining=drainer.reported_draining(a),
                enabled=drainer.reported_enabled(a),
                retired=drainer.reported_retired(a),
            )
            for a in reading.agents
        )
        content = (reading.pending, agents, reading.fitting_policy)
        last = self.last.get(reading.name)
        if (
            last is not None
            and last.content == content
            and now - last.at < HEARTBEAT
            and not self._idle_period_ended(reading.name, last.at, now)
        ):
            return None
        # Strictly increasing across restarts too: milliseconds of the clock, or one more.
        self.seq = max(self.seq + 1, int(now.timestamp() * 1000))
        self.last[reading.name] = _Published(now, content)
        # Recorded before the publish: a publish that fails may still have been sent.
        if not self.config.pool(reading.name).provider.drain_idle_agents:
            self.idle_clocks.setdefault(reading.name, IdleClock()).published(agents, now)
        drains = self.config.pool(reading.name).provider.drain_idle_agents
        return Snapshot(
            pool=reading.name,
            seq=self.seq,
            time=now,
            pending=reading.pending,
            agents=agents,
            master_addresses=self.master_addresses,
            fitting_policy=reading.fitting_policy,
            # This bridge reports retirements: the functions need no lease on a drain.
            retires=True if drains else None,
            arrivals=None if log is None else log.arrivals(now),
        )
