"""A simulated cloud: the ``Provider`` contract in memory, for one pool, billed per second.

``dynagent.reconcile.reconcile`` drives it exactly as it drives EC2: it observes the
fleet, launches a plan's instances (idempotently, by the plan's launch key), terminates,
and writes marks on the instances, where later passes read them back, as tags are on
EC2. Launched instances show running and register their agent after the boot model's
times; those arrive as events on the run's clock. An instance bills from its launch to
its termination, per second.

The simulated pool has no spot requests: a spot pool is simulated as instances at the
price given, so ``cancel`` and ``adopt`` have nothing to act on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from dynagent.fleet import Fleet, Instance, InstanceState, Mark
from dynagent.plan import Adoption, Cancellation, MarkWrite, Plan, Termination
from dynagent.provider import LaunchResult
from dynagent.simulate.boot import BootSampler
from dynagent.simulate.clock import Events, Kind, at


@dataclass
class SimInstance:
    """One launched instance, as the simulated cloud keeps it."""

    id: str
    launched: int
    registers_at: int
    running: bool = False
    terminated: int | None = None
    # The marks reconciles wrote on it, as a tag holds them: a time, to the second.
    marks: dict[Mark, datetime] = field(default_factory=dict)
    # What ``observe`` shows of it, rebuilt only after it changed.
    _view: Instance | None = None

    def view(self) -> Instance:
        if self._view is None:
            state = InstanceState.RUNNING if self.running else InstanceState.STARTING
            self._view = Instance(self.id, state, at(self.launched), self.marks)
        return self._view

    def changed(self) -> None:
        self._view = None


class SimCloud:
    """One pool's instances in a simulated cloud, on the run's clock."""

    def __init__(self, boot: BootSampler, events: Events, clock: Callable[[], int]) -> None:
        self.boot = boot
        self.events = events
        self.clock = clock
        self.live: dict[str, SimInstance] = {}
        self.launches = 0
        self.terminations = 0
        self._closed_seconds = 0  # billed by instances already terminated
        self._keys: dict[str, tuple[str, ...]] = {}
        self._gone: list[str] = []
        self._fleet: Fleet | None = None

    # The Provider contract

    def observe(self) -> Fleet:
        if self._fleet is None:
            self._fleet = Fleet(instances=tuple(i.view() for i in self.live.values()))
        return self._fleet

    def launch(self, plan: Plan) -> LaunchResult:
        if not plan.launches:
            return LaunchResult()
        if plan.launch_key in self._keys:  # a replay: the token was used, as on EC2
            return LaunchResult(started=self._keys[plan.launch_key], replayed=True)
        started = self.start(len(plan.launches))
        self._keys[plan.launch_key] = started
        return LaunchResult(started=started)

    def terminate(self, terminations: tuple[Termination, ...]) -> None:
        now = self.clock()
        for termination in terminations:
            instance = self.live.pop(termination.instance_id, None)
            if instance is None:
                continue  # not found counts as done
            instance.terminated = now
            self._closed_seconds += now - instance.launched
            self.terminations += 1
            self._gone.append(instance.id)
            self._fleet = None

    def cancel(self, cancellations: tuple[Cancellation, ...]) -> None:
        """No spot requests in the simulated cloud: nothing to cancel."""

    def adopt(self, adoptions: tuple[Adoption, ...]) -> None:
        """No spot requests in the simulated cloud: nothing to adopt."""

    def write_marks(self, marks: tuple[MarkWrite, ...]) -> None:
        for write in marks:
            for instance_id in write.instance_ids:
                instance = self.live.get(instance_id)
                if instance is None:
                    continue
                # A new dict, so a Fleet observed before keeps what it saw.
                updated = dict(instance.marks)
                if write.value is None:
                    updated.pop(write.mark, None)
                else:
                    updated[write.mark] = write.value
                instance.marks = updated
                instance.changed()
                self._fleet = None

    # What the run and the baseline need besides

    def start(self, count: int) -> tuple[str, ...]:
        """Launch ``count`` instances now; their boot events go on the run's clock."""
        now = self.clock()
        started = []
        for _ in range(count):
            self.launches += 1
            running_after, registered_after = self.boot.draw()
            instance = SimInstance(f"i-{self.launches:08x}", now, now + registered_after)
            self.live[instance.id] = instance
            self.events.schedule(now + running_after, Kind.INSTANCE_RUNNING, instance.id)
            self.events.schedule(instance.registers_at, Kind.AGENT_REGISTERED, instance.id)
            started.append(instance.id)
        self._fleet = None
        return tuple(started)

    def show_running(self, instance_id: str) -> None:
        instance = self.live.get(instance_id)
        if instance is not None:
            instance.running = True
            instance.changed()
            self._fleet = None

    def take_terminated(self) -> list[str]:
        """Instances terminated since the last call: their agents are gone from the master."""
        gone, self._gone = self._gone, []
        return gone

    def instances(self) -> Iterator[SimInstance]:
        return iter(self.live.values())

    def billed_seconds(self, until: int) -> int:
        """Instance-seconds billed up to ``until``, counting live instances up to then."""
        return self._closed_seconds + sum(until - i.launched for i in self.live.values())
