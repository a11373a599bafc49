"""Reservations in the simulated cloud: capacity bought ahead, billed whether used or not.

``--reservation p4d.24xlarge=10`` reserves 10 machines of the type for the whole trace;
``p4d.24xlarge=10@2d-5d`` from 2 to 5 days after the trace's first job. Each is billed for
its whole window at the type's on-demand price, used or not, and the machines running in
it add nothing to the bill while it lasts. dynagent's policy sees it as a targeted
reservation (``core.fleet.Reservation``) and launches into it first; Determined's
provisioner knows nothing of reservations and buys on-demand beside it.

A reservation over the whole trace is billed from the trace's start to its end, for
every policy alike. Simpler than the clouds: a reservation is in the pool's first zone
of its type, has no start-up or payment states, and its machines keep running past its
end at the on-demand price (as an ODCR's do; a Capacity Block's would be taken back).
"""

from __future__ import annotations

from dataclasses import dataclass

from dynagent.simulate.capacity import parse_window


@dataclass(frozen=True)
class SimReservation:
    """``count`` machines of ``instance_type`` reserved over [start, end) seconds, counted
    from the trace's start (None: from before it, or until after it)."""

    instance_type: str
    count: int
    start: int | None = None
    end: int | None = None

    def within(self, start: int, end: int) -> SimReservation:
        """The window on the run's clock, for a trace from second ``start`` to ``end``: a
        reservation over the whole trace is billed from its start to its end, the same
        for every policy, however long each takes to settle after it."""
        begins = start if self.start is None else self.start + start
        ends = end if self.end is None else self.end + start
        return SimReservation(self.instance_type, self.count, begins, ends)

    def active(self, second: int) -> bool:
        return (self.start is None or self.start <= second) and (
            self.end is None or second < self.end
        )

    def seconds_within(self, begin: int, end: int) -> int:
        """How much of [begin, end) the reservation covers."""
        low = begin if self.start is None else max(begin, self.start)
        high = end if self.end is None else min(end, self.end)
        return max(0, high - low)


def parse_reservation(text: str) -> SimReservation:
    """``TYPE=COUNT`` or ``TYPE=COUNT@START-END``, START and END durations like ``2d``."""
    hint = (
        f"--reservation {text!r}: write it like p4d.24xlarge=10 (the whole trace) or "
        "p4d.24xlarge=10@2d-5d"
    )
    what, sep, rest = text.partition("=")
    count_text, at, window = rest.partition("@")
    if not sep or not what.strip():
        raise ValueError(hint)
    try:
        count = int(count_text)
    except ValueError:
        raise ValueError(f"{hint}: {count_text!r} is not a number of machines") from None
    if count < 1:
        raise ValueError(f"{hint}: it must reserve at least one machine")
    if not at:
        return SimReservation(what.strip(), count)
    start, end = parse_window(window, hint, f"--reservation {text!r}")
    return SimReservation(what.strip(), count, start, end)
