"""A whole cluster on one virtual clock: the local Determined master, ``dynagent bridge``,
a real queue, the real reconcile and sweep functions, and a local cloud.

The agents in the master are the instances the functions launch: each step, every
managed instance the cloud shows alive for ``boot`` registers as an agent whose id is
the instance id (the name on GCP), as the boot script's ``DET_AGENT_ID`` makes it, in
its pool with the pool's slots; an agent whose instance is gone is removed from the
master, which kills whatever ran on it. A killed task is a failure of the test that
sees it.

The config's first pool is the one under test: ``born``, ``agents``, ``submit`` and
``terminations`` are about it. Other pools (neighbours) run beside it on the same
bridge, queue and functions; ``all_agents`` and ``neighbour_agents`` show theirs.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from dynagent.bridge.client import Credentials, MasterClient
from dynagent.bridge.loop import Bridge
from dynagent.core.config import Config, Pool
from dynagent.core.snapshot import Snapshot
from dynagent.testing.determined.master import DEFAULT_PASSWORD, LocalDetermined
from dynagent.testing.determined.scaled_pools import add_scaled_pools

STEP = timedelta(seconds=15)
SWEEP_EVERY = timedelta(minutes=1)
BOOT = timedelta(minutes=1)


def admin_disable(master: LocalDetermined, agent_id: str, *, drain: bool) -> None:
    """What ``det agent disable [--drain]`` does: the API call, as an admin."""
    request = urllib.request.Request(
        f"{master.url}/api/v1/agents/{agent_id}/disable",
        data=json.dumps({"drain": drain}).encode(),
        headers={
            "Authorization": f"Bearer {master.login('admin')}",
            "Content-Type": "application/json",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


class VirtualClock:
    """Starts at the real now (the local clouds stamp real launch times) and moves only
    when told to."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now


class Recorder:
    """A logger that keeps every line, with its ``extra``, for the test to read."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def _log(self, level: str, message: str, *args: Any, extra: Any = None, **_: Any) -> None:
        self.lines.append((level, str(message), dict(extra or {})))

    def debug(self, message: str, *args: Any, **kw: Any) -> None:
        self._log("debug", message, *args, **kw)

    def info(self, message: str, *args: Any, **kw: Any) -> None:
        self._log("info", message, *args, **kw)

    def warning(self, message: str, *args: Any, **kw: Any) -> None:
        self._log("warning", message, *args, **kw)

    def error(self, message: str, *args: Any, **kw: Any) -> None:
        self._log("error", message, *args, **kw)

    def exception(self, message: str, *args: Any, **kw: Any) -> None:
        self._log("error", message, *args, **kw)


class Cloud(Protocol):
    """One cloud's side of the cluster: its queue, its functions, its fleet."""

    def publish(self, snapshot: Snapshot) -> object: ...

    def deliver(self) -> None:
        """Hand everything queued to the reconcile function."""

    def sweep(self) -> None: ...

    def alive(self) -> dict[str, str]:
        """The managed instances that are pending or running, with their pool."""

    def set_launch_time(self, instance_id: str, when: datetime) -> None: ...

    def dead_letters(self) -> int: ...


@dataclass
class Sink:
    """The bridge's sink: the cloud's real publisher, and a record of what it sent."""

    cloud: Cloud
    sent: list[Snapshot] = field(default_factory=list)

    def publish(self, snapshot: Snapshot) -> object:
        result = self.cloud.publish(snapshot)
        self.sent.append(snapshot)
        return result


@dataclass
class Cluster:
    master: LocalDetermined
    cloud: Cloud
    config: Config
    clock: VirtualClock
    functions_log: Recorder
    bridge_log: Recorder = field(default_factory=Recorder)
    boot: timedelta = BOOT
    # The file the config was read from, for the master's pools (master-config's input).
    document: dict[str, Any] | None = None
    # Every pool's instances: when each was launched, and its pool.
    launched: dict[str, datetime] = field(default_factory=dict)
    pool_of: dict[str, str] = field(default_factory=dict)
    all_agents: set[str] = field(default_factory=set)
    tasks: list[str] = field(default_factory=list)  # the pool under test's
    neighbour_tasks: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # instances whose agent was removed
    last_sweep: datetime | None = None
    bridge: Bridge = field(init=False)
    sink: Sink = field(init=False)

    def __post_init__(self) -> None:
        self.sink = Sink(self.cloud)
        client = MasterClient(self.master.url, Credentials("admin", DEFAULT_PASSWORD), timeout=5)
        self.bridge = Bridge(
            self.config, client, self.sink, clock=self.clock, logger=self.bridge_log
        )
        add_scaled_pools(self.master, self.config, self.document)

    @property
    def pool(self) -> Pool:
        """The pool under test: the config's first."""
        return next(iter(self.config.pools.values()))

    @property
    def born(self) -> dict[str, datetime]:
        """The pool under test's instances, with when each was launched."""
        return {i: t for i, t in self.launched.items() if self.pool_of[i] == self.pool.name}

    @property
    def agents(self) -> set[str]:
        """The pool under test's registered agents."""
        return {a for a in self.all_agents if self.pool_of[a] == self.pool.name}

    def neighbour_agents(self, pool: str) -> set[str]:
        return {a for a in self.all_agents if self.pool_of[a] == pool}

    # -- the phases of a step, in order -------------------------------------------

    def sync_agents(self) -> None:
        """Register booted instances as agents; remove agents whose instance is gone."""
        alive = self.cloud.alive()
        self._stamp(alive)
        for instance_id in sorted(self.all_agents - set(alive)):
            self.master.remove_agent(instance_id)  # kills what ran there
            self.all_agents.discard(instance_id)
            self.gone.append(instance_id)
        for instance_id in sorted(set(alive) - self.all_agents):
            if self.clock.now - self.launched[instance_id] >= self.boot:
                pool = self.config.pool(alive[instance_id])
                self.master.add_agent(instance_id, pool.name, self.agent_slots(instance_id, pool))
                self.all_agents.add(instance_id)

    def agent_slots(self, instance_id: str, pool: Pool) -> int:
        """The slots the agent on ``instance_id`` registers with: those of its pool's one
        machine shape (a pool with offerings reads its machine's GPUs instead)."""
        return pool.provider.slots_per_instance

    def _stamp(self, alive: dict[str, str]) -> None:
        """A new instance was launched now, on the virtual clock."""
        for instance_id in sorted(set(alive) - set(self.launched)):
            self.launched[instance_id] = self.clock.now
            self.pool_of[instance_id] = alive[instance_id]
            self.cloud.set_launch_time(instance_id, self.clock.now)

    def bridge_pass(self) -> list[Snapshot]:
        return self.bridge.run_once()

    def deliver(self) -> None:
        self.cloud.deliver()
        self._stamp(self.cloud.alive())

    def sweep(self) -> None:
        self.cloud.sweep()
        self.last_sweep = self.clock.now

    def step(self, by: timedelta = STEP) -> None:
        """One tick: agents come and go, the master schedules, the bridge passes, the
        function takes the queue, and the sweep runs once a minute."""
        self.clock.now += by
        self.sync_agents()
        self.master.schedule()
        self.bridge_pass()
        self.deliver()
        if self.last_sweep is None or self.clock.now - self.last_sweep >= SWEEP_EVERY:
            self.sweep()

    def run(self, duration: timedelta) -> None:
        end = self.clock.now + duration
        while self.clock.now < end:
            self.step()

    def run_until(
        self, done: Callable[[], bool], what: str, limit: timedelta = timedelta(minutes=30)
    ) -> None:
        end = self.clock.now + limit
        while not done():
            if self.clock.now >= end:
                raise AssertionError(f"not within {limit} of virtual time: {what}")
            self.step()

    # -- the master's side -------------------------------------------------------

    def submit(self, name: str, slots: int, type: str = "TRIAL", pool: str | None = None) -> str:
        pool = pool or self.pool.name
        task_id = self.master.submit(name, slots, pool, type).task_id  # type: ignore[arg-type]
        (self.tasks if pool == self.pool.name else self.neighbour_tasks).append(task_id)
        return task_id

    def state(self, task_id: str) -> str:
        return self.master.task_state(task_id)

    def killed(self) -> list[str]:
        """Every pool's tasks that were killed."""
        tasks = self.tasks + self.neighbour_tasks
        return [t for t in tasks if self.master.task_state(t) == "KILLED"]

    def running(self) -> list[str]:
        return [t for t in self.tasks if self.master.task_state(t) == "RUNNING"]

    def busy_agents(self) -> set[str]:
        return {a for t in self.running() for a in self.master.placement(t)}

    # -- what the function did ------------------------------------------------------

    def outcomes(self) -> list[tuple[str, str, dict[str, Any]]]:
        """The reconcile and sweep passes the functions logged, with their reports."""
        return [line for line in self.functions_log.lines if "pool" in line[2]]

    def applied_seqs(self) -> set[int]:
        return {
            int(extra["seq"])
            for _, message, extra in self.outcomes()
            if extra.get("seq") is not None and message != "skipped"
        }

    def superseded_seqs(self) -> set[int]:
        return {
            int(extra["seq"])
            for _, message, extra in self.outcomes()
            if extra.get("seq") is not None
            and "a newer snapshot is in the batch" in str(extra.get("skipped"))
        }

    def errors(self) -> list[tuple[str, str, dict[str, Any]]]:
        return [line for line in self.functions_log.lines if line[0] == "error"]

    def terminations(self, pool: str | None = None) -> list[tuple[str, str]]:
        """(instance id, reason) of every termination the functions decided in the pool
        (by default the pool under test)."""
        found = []
        for _, _, extra in self.outcomes():
            if extra.get("pool") != (pool or self.pool.name):
                continue
            for action in extra.get("actions", []):
                text = str(action)
                if text.startswith("terminate "):
                    instance_id, _, reason = text.removeprefix("terminate ").partition(": ")
                    found.append((instance_id, reason))
        return found

    def check_no_snapshot_lost(self) -> None:
        """Every snapshot the bridge sent reached the function and was applied or
        superseded by a newer one in its batch; none was set aside or failed."""
        sent = {s.seq for s in self.sink.sent}
        handled = self.applied_seqs() | self.superseded_seqs()
        assert sent <= handled, f"not applied: {sorted(sent - handled)}"
        assert self.errors() == []
        assert self.cloud.dead_letters() == 0
