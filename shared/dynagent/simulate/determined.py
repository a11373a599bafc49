"""The baseline: Determined's own provisioner, replayed on the same master and cloud.

Every 5 s (its ``actionCooldown``) it lists the pool's instances and decides as
Determined's ``ScaleDecider`` does:

- An instance whose agent is connected and runs nothing (zero-slot tasks count, as in
  ``agent_state.go`` ``idle``) is idle since the first tick that saw
  it so; idle longer than ``max_idle_agent_period`` it is terminated, not below
  ``min_instances``.
- An instance with no agent, launched less than ``max_agent_starting_period`` ago, is
  recently launched; one older is disconnected since the tick that first saw it so,
  and terminated after ``max_disconnected_period``.
- Demand is ``ceil(sum of the pending tasks' slots / slots per instance)``, counting
  only tasks that fit one instance or are a multiple of it (the others are ignored),
  or ``ceil(zero-slot tasks / max_aux_containers_per_agent)`` if that is more
  (``scaling.go`` ``calculateDesiredNewAgentNum``); it launches
  ``clamp(min - n, demand - recently launched, max - n)`` instances, where ``n``
  counts the instances listed at the start of the tick, as Determined does.

Determined's provisioner launches one instance type, so with a pool that lists
``offerings`` the baseline runs on the pool without them: its ``instance_type``, at the
price the offerings give that type, else the built-in list price (``baseline_pool``).

Only what a tick can see changes its outcome, so, unless ``exhaustive`` is set, ticks
run only at the first tick after the master's view changed, after a timer ran out, or
after a tick that launched or terminated (the next one lists the changed fleet).
"""

from __future__ import annotations

import dataclasses

from pydantic import ValidationError

from dynagent.core.config import ConfigError, Pool
from dynagent.core.offerings import Offering, Purchase
from dynagent.core.plan import Termination
from dynagent.simulate.clock import next_on_grid
from dynagent.simulate.cloud import SimCloud, SimInstance
from dynagent.simulate.master import SimMaster
from dynagent.simulate.policy import Change

TICK = 5  # seconds: Determined's provisioner acts this often


def baseline_pool(pool: Pool) -> Pool:
    """The pool as Determined's provisioner runs it: without ``offerings``."""
    if pool.provider.offerings is None:
        return pool
    fields = pool.provider.model_dump()
    fields["offerings"] = None
    try:
        return Pool.model_validate(
            {
                "name": pool.name,
                "provider": fields,
                "max_aux_containers_per_agent": pool.max_aux_containers_per_agent,
            }
        )
    except ValidationError as error:
        problems = "; ".join(item["msg"].removeprefix("Value error, ") for item in error.errors())
        raise ConfigError(
            f"pool {pool.name!r}: the determined baseline runs on its instance_type alone, "
            f"which does not load: {problems}"
        ) from None


def baseline_offering(pool: Pool) -> Offering:
    """What the baseline launches: the pool's instance_type, priced by the pool's
    offerings where they list it (their ``prices``), else by the built-in table."""
    only = baseline_pool(pool).provider.catalog().offerings[0]
    if pool.provider.offerings is None:
        return only
    spot = only.purchase is Purchase.SPOT
    price = pool.provider.catalog().price_of(only.instance_type, spot)
    return dataclasses.replace(only, price=price) if price > 0 else only


class DeterminedPolicy:
    name = "determined"

    def __init__(
        self, pool: Pool, cloud: SimCloud, master: SimMaster, exhaustive: bool = False
    ) -> None:
        provider = pool.provider
        self.cloud = cloud
        self.master = master
        self.exhaustive = exhaustive
        self.slots = provider.slots_per_instance
        self.min = provider.min_instances
        self.max = provider.max_instances
        self.max_idle = int(provider.max_idle_agent_period.total_seconds())
        self.max_starting = int(provider.max_agent_starting_period.total_seconds())
        self.max_disconnected = int(provider.max_disconnected_period.total_seconds())
        self.decisions = 0
        # When each instance was first seen idle, or disconnected, by a tick.
        self._idle: dict[str, int] = {}
        self._disconnected: dict[str, int] = {}
        # Set by the first change: the first task's arrival, with no agent to run it.
        self._tick_at: int | None = None
        self._timer_at: int | None = None
        self._last_tick = -TICK

    def upgrade(self, now: int, pool: Pool) -> None:
        """Determined's provisioner launches the new config from now on; the agents it
        runs stay until they idle out, as it has no rule for an old one."""

    def act(self, now: int, change: Change) -> None:
        # A tick reads the pending tasks and the agents: other changes cannot alter it.
        if change is Change.DECISION:
            self.fleet_changed(now)
        due = self.wake_at()
        if due is not None and due <= now:
            acted = self._tick(now)
            self._last_tick = now
            # What it launched or terminated is in the next tick's instance list.
            self._tick_at = now + TICK if acted or self.exhaustive else None
            self._timer_at = self._next_timer(now)

    def wake_at(self) -> int | None:
        times = [t for t in (self._tick_at, self._timer_at) if t is not None]
        return min(times, default=None)

    def interruption_warning(self, now: int, instance_id: str) -> None:
        """Determined's provisioner reads no spot notice: it sees the agent gone."""

    def pending_at_max_seconds(self, until: int) -> None:
        """Determined's provisioner makes no plan that says so."""

    def fleet_changed(self, now: int) -> None:
        # The next tick, never a second one in the same tick.
        tick = max(next_on_grid(now, TICK), self._last_tick + TICK)
        self._tick_at = tick if self._tick_at is None else min(self._tick_at, tick)

    def _tick(self, now: int) -> bool:
        """One provisioner pass; whether it launched or terminated anything."""
        self.decisions += 1
        instances = list(self.cloud.instances())
        recently_launched, long_idle, long_disconnected = self._classify(instances, now)
        terminate = dict.fromkeys(long_disconnected, "disconnected too long")
        for _, instance_id in sorted(long_idle):
            if len(instances) - len(terminate) <= self.min:
                break
            terminate[instance_id] = "idle too long"
        self._trim_to_max(instances, terminate)
        if terminate:
            self.cloud.terminate(tuple(Termination(i, r) for i, r in terminate.items()))
            for instance_id in terminate:
                self._idle.pop(instance_id, None)
                self._disconnected.pop(instance_id, None)
        count = len(instances)
        wanted = self._desired_new_instances() - recently_launched
        launch = max(0, max(self.min - count, min(wanted, self.max - count)))
        if launch:
            self.cloud.launch_now(launch)
        return bool(terminate or launch)

    def _classify(
        self, instances: list[SimInstance], now: int
    ) -> tuple[int, list[tuple[int, str]], list[str]]:
        """Recently launched count, long-idle (since, id) and long-disconnected ids;
        records when each idle or disconnected instance was first seen so."""
        agents = self.master.agents
        idle: dict[str, int] = {}
        disconnected: dict[str, int] = {}
        recently_launched = 0
        long_idle: list[tuple[int, str]] = []
        long_disconnected: list[str] = []
        for instance in instances:
            agent = agents.get(instance.id)
            if agent is not None:
                if agent.idle:
                    since = idle[instance.id] = self._idle.get(instance.id, now)
                    if now > since + self.max_idle:
                        long_idle.append((since, instance.id))
                continue
            if instance.launched + self.max_starting > now:
                recently_launched += 1
                continue
            since = disconnected[instance.id] = self._disconnected.get(instance.id, now)
            if now > since + self.max_disconnected:
                long_disconnected.append(instance.id)
        self._idle, self._disconnected = idle, disconnected
        return recently_launched, long_idle, long_disconnected

    def _trim_to_max(self, instances: list[SimInstance], terminate: dict[str, str]) -> None:
        """Over max_instances: idle, then disconnected, then the newest instances."""
        order = [*self._idle, *self._disconnected]
        order += [i.id for i in sorted(instances, key=lambda i: -i.launched)]
        for instance_id in order:
            if len(instances) - len(terminate) <= self.max:
                return
            terminate.setdefault(instance_id, "over max_instances")

    def _desired_new_instances(self) -> int:
        """``calculateDesiredNewAgentNum``: for the slots the pending tasks ask, and for
        their zero-slot tasks, each agent holding up to ``max_aux`` of them."""
        slots, max_aux = self.slots, self.master.max_aux
        total = zero_slot = 0
        for asks, count in self.master.waiting_by_slots.items():
            if asks == 0:
                zero_slot = count
            elif slots > 0 and (asks <= slots or asks % slots == 0):
                total += asks * count
        by_zero_slot = -(-zero_slot // max_aux) if max_aux > 0 else 0
        by_slots = -(-total // slots) if slots > 0 else 0
        return max(by_zero_slot, by_slots)

    def _next_timer(self, now: int) -> int | None:
        """The first tick after ``now`` at which a period runs out, unless exhaustive."""
        if self.exhaustive:
            return None
        deadlines = [since + self.max_idle + 1 for since in self._idle.values()]
        deadlines += [since + self.max_disconnected + 1 for since in self._disconnected.values()]
        deadlines += [
            i.launched + self.max_starting
            for i in self.cloud.instances()
            if i.id not in self.master.agents
        ]
        future = [d for d in deadlines if d > now]
        return next_on_grid(min(future), TICK) if future else None
