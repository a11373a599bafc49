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

from dynagent.core.fleet import Fleet, Instance, InstanceState, Mark, Reservation, ReservationKind
from dynagent.core.offerings import Offering, Purchase
from dynagent.core.plan import Adoption, Cancellation, MarkWrite, Plan, Start, Stop, Termination
from dynagent.run.fallback import Attempt, CapacityMemory, launch_with_fallback
from dynagent.run.provider import LaunchErrorKind, LaunchResult, StartResult
from dynagent.simulate.boot import BootSampler
from dynagent.simulate.capacity import Outage, covered
from dynagent.simulate.clock import Events, Kind, at, seconds_at
from dynagent.simulate.reservations import SimReservation

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
    boot_parts: str = ""
    # The pool's config it was launched under: 0, then 1 after an upgrade (``upgrade``).
    generation: int = 0
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
                boot_parts=self.boot_parts,
                reservation=offering.reservation,
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
    # Of ``dollars``: the disks of stopped machines, and the reservations' windows.
    disk_dollars: float = 0.0
    reserved_dollars: float = 0.0

    def add(self, instance: SimInstance, seconds: int, price: float) -> None:
        self.instance_seconds += seconds
        self.slot_seconds += instance.slots * seconds
        self.dollars += price * seconds / HOUR

    def add_billed(self, instance: SimInstance, seconds: int, dollars: float) -> None:
        self.instance_seconds += seconds
        self.slot_seconds += instance.slots * seconds
        self.dollars += dollars

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
        reservations: Sequence[SimReservation] = (),
        on_demand: dict[str, float] | None = None,
        zones: dict[str, str] | None = None,
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
        self._boot_parts = ""
        # Bumped when the pool's config changes mid-run: what launches are of now.
        self.generation = 0
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
        # Reservations (simulate.reservations), by id: the machines in each, what they
        # used of it (place-seconds, of machines gone), and the on-demand prices and
        # zones they are billed and placed at.
        self.reservations = {f"sim-r{n + 1}": r for n, r in enumerate(reservations)}
        # Reservations bill from the run's start (the trace's first second).
        self.started = clock()
        self.in_reservation: dict[str, set[str]] = {r: set() for r in self.reservations}
        self.reserved_used = 0
        self.on_demand = dict(on_demand or {})
        self.zones = dict(zones or {})
        # On-demand machines launched of a type while a place of it was free.
        self.on_demand_beside_free = 0

    # The Provider contract

    def observe(self) -> Fleet:
        if self._instances is None:
            live = (i.view() for i in self.live.values())
            self._instances = (*live, *(i.view() for i in self.stopped.values()))
        unavailable = self.memory.unavailable(at(self.clock()))
        if not self.reservations:
            return Fleet(self._instances, unavailable=unavailable)
        return Fleet(self._instances, unavailable=unavailable, reservations=self._held())

    def _held(self) -> tuple[Reservation, ...]:
        return tuple(
            Reservation(
                id=key,
                kind=ReservationKind.TARGETED,
                instance_type=r.instance_type,
                zone=self.zones.get(r.instance_type, ""),
                place=self.zones.get(r.instance_type, ""),
                total=r.count,
                available=max(0, r.count - len(self.in_reservation[key])),
                starts_at=None if r.start is None else at(r.start),
                ends_at=None if r.end is None else at(r.end),
            )
            for key, r in self.reservations.items()
        )

    def _free_places(self, instance_type: str, now: int) -> int:
        return sum(
            r.count - len(self.in_reservation[key])
            for key, r in self.reservations.items()
            if r.instance_type == instance_type and r.active(now)
        )

    def launch(self, plan: Plan) -> LaunchResult:
        if not plan.launches:
            return LaunchResult()
        if plan.launch_key in self._keys:  # a replay: the token was used, as on EC2
            return LaunchResult(started=self._keys[plan.launch_key], replayed=True)
        self._boot_config, self._boot_parts = plan.boot_config, plan.boot_parts
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
        self._bill_closed(instance, now)
        self.live_slots -= instance.slots
        self._instances = None
        return True

    def _bill_closed(self, instance: SimInstance, now: int) -> None:
        seconds, dollars = self._charge(instance, now)
        self._closed.add_billed(instance, seconds, dollars)
        reservation = instance.offering.reservation
        if reservation:
            self.in_reservation[reservation].discard(instance.id)
            self.reserved_used += self.reservations[reservation].seconds_within(
                instance.launched, now
            )

    def _charge(self, instance: SimInstance, until: int) -> tuple[int, float]:
        """(seconds, dollars) a machine billed from its launch (or start) to ``until``:
        nothing more inside its reservation's window, the on-demand price outside it."""
        seconds = until - instance.launched
        reservation = instance.offering.reservation
        if not reservation:
            return seconds, self._price(instance) * seconds / HOUR
        outside = seconds - self.reservations[reservation].seconds_within(instance.launched, until)
        return seconds, self.on_demand.get(instance.offering.instance_type, 0.0) * outside / HOUR

    def stop(self, stops: tuple[Stop, ...]) -> None:
        """Stopped: it bills its disk from now, and its agent leaves the master."""
        now = self.clock()
        for stop in stops:
            instance = self.live.pop(stop.instance_id, None)
            if instance is None:
                continue
            self._bill_closed(instance, now)
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
            running_after, registered_after = self.boot.draw_start(instance.slots, now)
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

    def old_machines(self) -> int:
        """Live and stopped machines launched under a config before the pool's now."""
        machines = (*self.live.values(), *self.stopped.values())
        return sum(1 for i in machines if i.generation < self.generation)

    def launch_now(self, count: int, offering: Offering | None = None) -> tuple[str, ...]:
        """Launch ``count`` instances now; their boot events go on the run's clock."""
        now = self.clock()
        offering = offering or self.default
        reserved_free = self.reservations and not offering.reservation
        if reserved_free and self._free_places(offering.instance_type, now) > 0:
            self.on_demand_beside_free += count
        by_type = self.launches_by_type
        by_type[offering.instance_type] = by_type.get(offering.instance_type, 0) + count
        started = []
        for _ in range(count):
            self.launches += 1
            running_after, registered_after = self.boot.draw(offering.slots, now)
            instance = SimInstance(
                f"i-{self.launches:08x}",
                offering,
                now,
                now + registered_after,
                boot_config=self._boot_config,
                boot_parts=self._boot_parts,
                generation=self.generation,
            )
            self.live[instance.id] = instance
            self.live_slots += instance.slots
            if offering.reservation:
                self.in_reservation[offering.reservation].add(instance.id)
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
            total.add_billed(instance, *self._charge(instance, until))
        for instance in self.stopped.values():
            assert instance.stopped is not None
            total.add_disk(until - instance.stopped, self.disk_per_hour)
        for r in self.reservations.values():
            dollars = (
                r.count
                * self.on_demand.get(r.instance_type, 0.0)
                * self.reserved_seconds(r, until)
                / HOUR
            )
            total.dollars += dollars
            total.reserved_dollars += dollars
        return total

    def reserved_seconds(self, reservation: SimReservation, until: int) -> int:
        """How long the reservation has been billed by ``until``: from the run's start."""
        return reservation.seconds_within(self.started, until)

    def reserved_place_seconds(self, until: int) -> tuple[int, int]:
        """(place-seconds the reservations held, place-seconds machines used) to ``until``."""
        held = sum(r.count * self.reserved_seconds(r, until) for r in self.reservations.values())
        used = self.reserved_used + sum(
            self.reservations[i.offering.reservation].seconds_within(i.launched, until)
            for i in self.live.values()
            if i.offering.reservation
        )
        return held, used

    def _call(self, offering: Offering, count: int) -> Attempt:
        now = self.clock()
        if offering.reservation:
            reservation = self.reservations.get(offering.reservation)
            free = 0
            if reservation is not None and reservation.active(now):
                free = reservation.count - len(self.in_reservation[offering.reservation])
            started = self.launch_now(min(count, free), offering) if free > 0 else ()
            if len(started) < count:
                self.refusals += 1
            return Attempt(started=started, out_of_capacity=len(started) < count)
        if covered(self.outages, offering, now):
            self.refusals += 1
            return Attempt(out_of_capacity=True)
        return Attempt(started=self.launch_now(count, offering))

    def _price(self, instance: SimInstance) -> float:
        return instance.offering.price if self.price is None else self.price
