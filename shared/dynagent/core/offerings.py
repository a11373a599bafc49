"""What a pool may buy: machine shapes, the zones and purchase options to buy them in, prices.

Cloud-neutral, so the decision, ``dynagent plan`` and the simulator read the same thing.
An ``Offering`` is one way to get one machine: a type, in a zone (a subnet on EC2),
bought on-demand or as spot, at a price per hour. A ``Shape`` is a machine type as
packing sees it: its slots and the price of its best offering. The ``Catalog`` is a
pool's offerings in preference order, less those the cloud recently had no capacity for.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from dynagent.core.fleet import Instance


class Purchase(enum.Enum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    # Into a reservation the pool names (``core.reservations``): paid for already.
    RESERVED = "reserved"


@dataclass(frozen=True)
class Offering:
    """One way to buy one machine of the pool."""

    instance_type: str
    slots: int
    # Dollars per hour: the on-demand list price, or the spot price when known (else the
    # on-demand price, the most a spot machine can cost).
    price: float
    # The subnet id on EC2, the zone on Compute Engine; "" for the provider's default.
    zone: str = ""
    purchase: Purchase = Purchase.ON_DEMAND
    # The GPUs a machine type does not name, for people: Compute Engine attaches them
    # to the machine ("4 x nvidia-tesla-t4"). Not part of what the offering is.
    gpus: str = field(default="", compare=False)
    # RESERVED: the reservation's id, and whether it is an EC2 Capacity Block (launched
    # in its own market).
    reservation: str = ""
    capacity_block: bool = False

    @property
    def key(self) -> str:
        """Names the offering in logs, caches and tags: ``TYPE@ZONE/PURCHASE``, and for a
        reservation ``TYPE@ZONE/reserved:ID`` (one offering per reservation)."""
        key = offering_key(self.instance_type, self.zone, self.purchase)
        return f"{key}:{self.reservation}" if self.reservation else key

    def describe(self) -> str:
        where = f" in {self.zone}" if self.zone else ""
        machine = f"{self.instance_type} + {self.gpus}" if self.gpus else self.instance_type
        if self.reservation:
            return f"{machine} in reservation {self.reservation}{where}"
        return f"{machine} {self.purchase.value}{where} (${self.price:.2f}/h)"


def offering_key(instance_type: str, zone: str, purchase: Purchase) -> str:
    return f"{instance_type}@{zone}/{purchase.value}"


def offering_of(instance: Instance) -> str:
    """The key of the offering an instance is of, from what the cloud reports of it."""
    purchase = Purchase.SPOT if instance.spot else Purchase.ON_DEMAND
    return offering_key(instance.instance_type, instance.zone, purchase)


@dataclass(frozen=True)
class Shape:
    """A machine type as packing sees it: slots, and the price of its preferred offering."""

    instance_type: str
    slots: int
    price: float

    @property
    def price_per_slot(self) -> float:
        return self.price / self.slots if self.slots else float("inf")


@dataclass(frozen=True)
class Catalog:
    """A pool's offerings, in the order the pool prefers them, and what they cost.

    ``offerings`` holds every offering the pool may buy: types in the order configured,
    and for each type its purchase options (in preference order) times its zones.
    ``unavailable`` holds the keys of offerings the cloud recently refused for want of
    capacity; they are left out of every choice until the cloud forgets them.
    """

    offerings: tuple[Offering, ...]
    unavailable: frozenset[str] = frozenset()
    # Slots of each type, for instances whose type is known but not offered any more.
    _slots: dict[str, int] = field(init=False, repr=False, compare=False)
    _available: tuple[Offering, ...] = field(init=False, repr=False, compare=False)
    # Fallbacks by shape: a pass asks once per machine it launches.
    _fallbacks: dict[Shape, tuple[Offering, ...]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "_slots", {o.instance_type: o.slots for o in self.offerings})
        available = tuple(o for o in self.offerings if o.key not in self.unavailable)
        object.__setattr__(self, "_available", available)

    def available(self) -> tuple[Offering, ...]:
        return self._available

    def shapes(self) -> tuple[Shape, ...]:
        """Each type with an available offering, priced by its first one, fewest slots first."""
        first: dict[str, Offering] = {}
        for offering in self.available():
            first.setdefault(offering.instance_type, offering)
        shapes = (Shape(o.instance_type, o.slots, o.price) for o in first.values())
        return tuple(sorted(shapes, key=lambda s: (s.slots, s.price)))

    def offers(self, instance_type: str) -> bool:
        """The pool buys this type (whether or not the cloud has capacity for it now)."""
        return instance_type in self._slots

    def slots_of(self, instance_type: str, default: int) -> int:
        return self._slots.get(instance_type, default)

    def price_of(self, instance_type: str, spot: bool) -> float:
        """What a running machine of this type costs per hour (0 when not offered)."""
        purchase = Purchase.SPOT if spot else Purchase.ON_DEMAND
        prices = [o.price for o in self.offerings if o.instance_type == instance_type]
        exact = [
            o.price
            for o in self.offerings
            if o.instance_type == instance_type and o.purchase is purchase
        ]
        return min(exact or prices or [0.0])

    def hourly_price(self, instance: Instance) -> float:
        """What a managed instance costs per hour, by its type and purchase; an instance
        of unknown type is of the pool's first (its one type without offerings)."""
        instance_type = instance.instance_type or self.offerings[0].instance_type
        return self.price_of(instance_type, instance.spot)

    def fallbacks(self, shape: Shape) -> tuple[Offering, ...]:
        """Where a machine of ``shape`` may be bought, best first: its own type's available
        offerings in preference order, then those of larger types, cheapest first (a larger
        machine holds the same tasks)."""
        found = self._fallbacks.get(shape)
        if found is None:
            own = [o for o in self._available if o.instance_type == shape.instance_type]
            larger = sorted(
                (o for o in self._available if o.slots > shape.slots),
                key=lambda o: (o.price, o.slots),
            )
            found = self._fallbacks[shape] = (*own, *larger)
        return found
