"""A simulated cloud: the ``Provider`` contract in memory, for one pool, billed per second.

``dynagent.run.reconcile.reconcile`` drives it exactly as it drives EC2: it observes the
fleet, launches a plan's instances (idempotently, by the plan's launch key), terminates,
and writes marks on the instances, where later passes read them back, as tags are on
EC2. Launched instances show running and register their agent after the boot model's
times; those arrive as events on the run's clock.

A plan's launches go through ``launch_with_fallback``, as in every cloud adapter: an
offering an outage window covers reports no capacity, the machines move on to their
next offering in the same pass, and the cloud's ``CapacityMemory`` keeps the refused
offering out of the next decisions (``Fleet.unavailable``) for a few minutes.

Each instance is of one offering (a type, its slots, its price, a zone, a purchase) and
bills from its launch to its termination, per second, at that offering's price. The
simulated pool has no spot requests: a spot offering is an instance at its price, so
``cancel`` and ``adopt`` have nothing to act on.

A warm pool's stopped machines leave the master and bill only their disks
(``disk_per_hour``) until started again, when their agent registers after the boot
model's warm start; a start the outage windows cover is refused for capacity, and the
reconcile launches its cold cover instead, as on a cloud.

Spot interruptions: with an ``interruptions`` model, each spot instance gets a lifetime
drawn at launch (exponential: a constant rate per machine-hour, from a seeded generator,
so a run repeats), a warning ``NOTICE`` seconds before it ends (EC2's two minutes), and
is then reclaimed: it stops billing and its agent leaves the master.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from dynagent.core.fleet import Fleet, Instance, InstanceState, Mark
from dynagent.core.offerings import Offering, Purchase
from dynagent.core.plan import Adoption, Cancellation, MarkWrite, Plan, Start, Stop, Termination
from dynagent.run.fallback import Attempt, CapacityMemory, launch_with_fallback
from dynagent.run.provider import LaunchErrorKind, LaunchResult, StartResult
from dynagent.simulate.boot import BootSampler
from dynagent.simulate.capacity import Outage, covered
from dynagent.simulate.clock import Events, Kind, at, seconds_at

HOUR = 3600
# Seconds between a spot interruption warning and the reclaim, as on EC2.
NOTICE = 120


@dataclass(frozen=True)
class Interruptions:
    """Spot machines reclaimed at ``rate`` per machine-hour, drawn from ``seed``."""

    rate: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rate < 0:
            raise ValueError("the interruption rate must not be negative")

    def lifetimes(self) -> Callable[[], int] | None:
        """Draws each spot instance's life in seconds, in launch order; None at rate 0."""
        if not self.rate:
            return None
        draw = random.Random(f"interruptions:{self.seed}").expovariate
        per_second = self.rate / HOUR
        return lambda: max(1, round(draw(per_second)))


@dataclass
class SimInstance:
    """One launched instance, as the simulated cloud keeps it."""

    id: str
    offering: Offering
    launched: int
    registers_at: int
    running: bool = False
    terminated: int | None = None
    # When the warm pool stopped it (None: not stopped), and the boot config it carries.
    stopped: int | None = None
    boot_config: str = ""
    # The marks reconciles wrote on it, as a tag holds them: a time, to the second.
    marks: dict[Mark, datetime] = field(default_factory=dict)
    # What ``observe`` shows of it, rebuilt only after it changed.
    _view: Instance | None = None

    @property
    def slots(self) -> int:
        return self.offering.slots

    def view(self) -> Instance:
        if self._view is None:
            state = InstanceState.RUNNING if self.running else InstanceState.STARTING
            if self.stopped is not None:
                state = InstanceState.STOPPED
            offering = self.offering
            self._view = Instance(
                self.id,
                state,
                at(self.launched),
                self.marks,
                instance_type=offering.instance_type,
                zone=offering.zone,
                spot=offering.purchase is Purchase.SPOT,
                boot_config=self.boot_config,
            )
        return self._view

    def changed(self) -> None:
        self._view = None


@dataclass
class Bill:
    """What instances billed: instance-seconds, slot-seconds and dollars."""

    instance_seconds: int = 0
    slot_seconds: int = 0
    dollars: float = 0.0
    # Of ``dollars``: the disks of stopped machines.
    disk_dollars: float = 0.0

    def add(self, instance: SimInstance, seconds: int, price: float) -> None:
        self.instance_seconds += seconds
        self.slot_seconds += instance.slots * seconds
        self.dollars += price * seconds / HOUR

    def add_disk(self, seconds: int, price: float) -> None:
        dollars = price * seconds / HOUR
        self.dollars += dollars
        self.disk_dollars += dollars


class SimCloud:
    """One pool's instances in a simulated cloud, on the run's clock.

    ``default`` is what ``start`` launches when no offering is named (the baseline's one
    type); ``price`` overrides every offering's price (``--price``, for a pool of one
    type); ``outages`` are the windows with no capacity.
    """

    def __init__(
        self,
        boot: BootSampler,
        events: Events,
        clock: Callable[[], int],
        default: Offering,
        outages: Sequence[Outage] = (),
        price: float | None = None,
        interruptions: Interruptions | None = None,
        disk_per_hour: float = 0.0,
    ) -> None:
        self.boot = boot
        self.events = events
        self.clock = clock
        self.default = default
        self.outages = tuple(outages)
        self.price = price
        self.disk_per_hour = disk_per_hour
        self.memory = CapacityMemory()
        self.live: dict[str, SimInstance] = {}
        # The warm pool's stopped machines, and what stopping and starting did.
        self.stopped: dict[str, SimInstance] = {}
        self.stops = 0
        self.starts = 0
        self.start_refusals = 0
        self.most_stopped = 0
        self._boot_config = ""
        self.live_slots = 0
        self.launches = 0
        self.launches_by_type: dict[str, int] = {}
        self.terminations = 0
        # Spot instances the cloud reclaimed.
        self.interruptions = 0
        self._lifetime = (interruptions or Interruptions()).lifetimes()
        # Launch calls the cloud refused for capacity (one per offering and pass).
        self.refusals = 0
        self._closed = Bill()  # billed by instances already terminated
        self._keys: dict[str, tuple[str, ...]] = {}
        self._gone: list[str] = []
        self._instances: tuple[Instance, ...] | None = None

    # The Provider contract

    def observe(self) -> Fleet:
        if self._instances is None:
            live = (i.view() for i in self.live.values())
            self._instances = (*live, *(i.view() for i in self.stopped.values()))
        return Fleet(self._instances, unavailable=self.memory.unavailable(at(self.clock())))

    def launch(self, plan: Plan) -> LaunchResult:
        if not plan.launches:
            return LaunchResult()
        if plan.launch_key in self._keys:  # a replay: the token was used, as on EC2
            return LaunchResult(started=self._keys[plan.launch_key], replayed=True)
        self._boot_config = plan.boot_config
        result = launch_with_fallback(plan.launches, self._call, self.memory, at(self.clock()))
        self._keys[plan.launch_key] = result.started
        return result

    def terminate(self, terminations: tuple[Termination, ...]) -> None:
        for termination in terminations:
            if self._delete_stopped(termination.instance_id):
                self.terminations += 1  # its agent left the master when it stopped
            elif self._end(termination.instance_id):
                self.terminations += 1
                self._gone.append(termination.instance_id)

    def _delete_stopped(self, instance_id: str) -> bool:
        instance = self.stopped.pop(instance_id, None)
        if instance is None:
            return False
        assert instance.stopped is not None
        now = self.clock()
        self._closed.add_disk(now - instance.stopped, self.disk_per_hour)
        instance.terminated = now
        self._instances = None
        return True

    def reclaim(self, instance_id: str) -> bool:
        """The cloud takes a spot instance back; False if it was terminated already."""
        if not self._end(instance_id):
            return False
        self.interruptions += 1
        return True

    def _end(self, instance_id: str) -> bool:
        now = self.clock()
        instance = self.live.pop(instance_id, None)
        if instance is None:
            return False  # not found counts as done
        instance.terminated = now
        self._closed.add(instance, now - instance.launched, self._price(instance))
        self.live_slots -= instance.slots
        self._instances = None
        return True

    def stop(self, stops: tuple[Stop, ...]) -> None:
        """Stopped: it bills its disk from now, and its agent leaves the master."""
        now = self.clock()
        for stop in stops:
            instance = self.live.pop(stop.instance_id, None)
            if instance is None:
                continue
            self._closed.add(instance, now - instance.launched, self._price(instance))
            self.live_slots -= instance.slots
            instance.stopped, instance.running = now, False
            instance.changed()
            self.stopped[instance.id] = instance
            self._gone.append(instance.id)
            self.stops += 1
        self.most_stopped = max(self.most_stopped, len(self.stopped))
        self._instances = None

    def start(self, starts: tuple[Start, ...]) -> StartResult:
        """Started, billed at its price again, its agent back after a warm start; refused
        for capacity where an outage covers its offering."""
        now = self.clock()
        started: list[str] = []
        refused: list[tuple[str, str, LaunchErrorKind]] = []
        for start in starts:
            instance = self.stopped.get(start.instance_id)
            if instance is None:
                continue
            if covered(self.outages, instance.offering, now):
                self.memory.refused(instance.offering, at(now))
                self.start_refusals += 1
                refused.append((instance.id, "no capacity", LaunchErrorKind.CAPACITY))
                continue
            del self.stopped[instance.id]
            assert instance.stopped is not None
            self._closed.add_disk(now - instance.stopped, self.disk_per_hour)
            running_after, registered_after = self.boot.draw_start(instance.slots)
            instance.stopped, instance.launched = None, now
            instance.registers_at = now + registered_after
            instance.changed()
            self.live[instance.id] = instance
            self.live_slots += instance.slots
            self.events.schedule(now + running_after, Kind.INSTANCE_RUNNING, instance.id)
            self.events.schedule(instance.registers_at, Kind.AGENT_REGISTERED, instance.id)
            self.starts += 1
            started.append(instance.id)
        self._instances = None
        return StartResult(tuple(started), tuple(refused))

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
                self._instances = None

    # What the run and the baseline need besides

    def launch_now(self, count: int, offering: Offering | None = None) -> tuple[str, ...]:
        """Launch ``count`` instances now; their boot events go on the run's clock."""
        now = self.clock()
        offering = offering or self.default
        by_type = self.launches_by_type
        by_type[offering.instance_type] = by_type.get(offering.instance_type, 0) + count
        started = []
        for _ in range(count):
            self.launches += 1
            running_after, registered_after = self.boot.draw(offering.slots)
            instance = SimInstance(
                f"i-{self.launches:08x}",
                offering,
                now,
                now + registered_after,
                boot_config=self._boot_config,
            )
            self.live[instance.id] = instance
            self.live_slots += instance.slots
            self.events.schedule(now + running_after, Kind.INSTANCE_RUNNING, instance.id)
            self.events.schedule(instance.registers_at, Kind.AGENT_REGISTERED, instance.id)
            if self._lifetime is not None and offering.purchase is Purchase.SPOT:
                reclaimed = now + self._lifetime()
                warned = max(now, reclaimed - NOTICE)
                self.events.schedule(warned, Kind.SPOT_WARNING, instance.id)
                self.events.schedule(reclaimed, Kind.SPOT_RECLAIMED, instance.id)
            started.append(instance.id)
        self._instances = None
        return tuple(started)

    def show_running(self, instance_id: str) -> None:
        instance = self.live.get(instance_id)
        if instance is not None:
            instance.running = True
            instance.changed()
            self._instances = None

    def take_terminated(self) -> list[str]:
        """Instances terminated since the last call: their agents are gone from the master."""
        gone, self._gone = self._gone, []
        return gone

    def instances(self) -> Iterator[SimInstance]:
        return iter(self.live.values())

    def stopped_instances(self) -> Iterator[SimInstance]:
        return iter(self.stopped.values())

    def remembered_until(self) -> list[int]:
        """When each offering the cloud refused comes back into decisions."""
        return [seconds_at(until) for until in self.memory.until.values()]

    def bill(self, until: int) -> Bill:
        """What was billed up to ``until``, counting live instances up to then."""
        closed = self._closed
        total = Bill(
            closed.instance_seconds, closed.slot_seconds, closed.dollars, closed.disk_dollars
        )
        for instance in self.live.values():
            total.add(instance, until - instance.launched, self._price(instance))
        for instance in self.stopped.values():
            assert instance.stopped is not None
            total.add_disk(until - instance.stopped, self.disk_per_hour)
        return total

    def _call(self, offering: Offering, count: int) -> Attempt:
        if covered(self.outages, offering, self.clock()):
            self.refusals += 1
            return Attempt(out_of_capacity=True)
        return Attempt(started=self.launch_now(count, offering))

    def _price(self, instance: SimInstance) -> float:
        return instance.offering.price if self.price is None else self.price
