"""When the simulated cloud has no capacity: windows in which an offering cannot launch.

``--unavailable p3.2xlarge=2h-5h`` (or ``TYPE@ZONE=START-END``) says that from 2 h to
5 h after the trace's first job, launching a p3.2xlarge (in any zone, or in that zone)
reports no capacity, as EC2's ``InsufficientInstanceCapacity`` does. The launch then
falls back to the next offering, and the capacity memory keeps the refused offering
out of decisions for a few minutes, exactly as in the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dynagent.core.durations import parse_duration
from dynagent.core.offerings import Offering


@dataclass(frozen=True)
class Outage:
    """No capacity for a machine type (in one zone, or all) over [start, end) seconds,
    counted from the trace's start."""

    instance_type: str
    start: int
    end: int
    zone: str | None = None

    def covers(self, offering: Offering, second: int) -> bool:
        return (
            self.start <= second < self.end
            and offering.instance_type == self.instance_type
            and (self.zone is None or self.zone == offering.zone)
        )

    def shifted(self, by: int) -> Outage:
        """The same window on the run's clock, for a trace starting at second ``by``."""
        return Outage(self.instance_type, self.start + by, self.end + by, self.zone)


def parse_outage(text: str) -> Outage:
    """``TYPE[@ZONE]=START-END``, START and END durations like ``2h`` or ``90m``."""
    what, sep, when = text.partition("=")
    instance_type, _, zone = what.strip().partition("@")
    hint = f"--unavailable {text!r}: write it like p3.2xlarge=2h-5h or p3.2xlarge@subnet-1=0s-1h"
    if not sep or not instance_type:
        raise ValueError(hint)
    start, end = parse_window(when, hint, f"--unavailable {text!r}")
    return Outage(instance_type, start, end, zone.strip() or None)


def parse_window(text: str, hint: str, option: str) -> tuple[int, int]:
    """``START-END`` in seconds from the trace's start, START and END durations like
    ``2h``; ValueError with ``hint`` (how to write it) or naming ``option``."""
    start_text, dash, end_text = text.partition("-")
    if not dash:
        raise ValueError(hint)
    try:
        start = round(parse_duration(start_text.strip()).total_seconds())
        end = round(parse_duration(end_text.strip()).total_seconds())
    except ValueError as error:
        raise ValueError(f"{hint} ({error})") from None
    if end <= start:
        raise ValueError(f"{option}: the window ends before it starts")
    return start, end


def covered(outages: Sequence[Outage], offering: Offering, second: int) -> bool:
    return any(outage.covers(offering, second) for outage in outages)
