"""The virtual clock: whole seconds since the trace's start, and the events due on it.

Simulated time is an ``int`` of seconds; the decision core takes aware datetimes, so
``at`` turns one into the other at that boundary only. The trace's second 0 is the ITP
traces' first day of collection, so the marks read as dates of that time.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

EPOCH = datetime(2021, 3, 4, tzinfo=UTC)


def at(seconds: int) -> datetime:
    """The datetime of a simulated second."""
    return EPOCH + timedelta(seconds=seconds)


def seconds_at(moment: datetime) -> int:
    """The simulated second of a datetime (whole seconds: marks are written at seconds)."""
    return int((moment - EPOCH).total_seconds())


def next_on_grid(time: int, period: int) -> int:
    """The first multiple of ``period`` at or after ``time``: when a periodic timer fires."""
    return -(-time // period) * period


class Kind(enum.IntEnum):
    """What an event is; at one instant they happen in this order."""

    INSTANCE_RUNNING = 0  # the cloud shows the instance running
    AGENT_REGISTERED = 1  # its agent connects to the master
    JOB_END = 2  # a task finishes and frees its slots
    SPOT_WARNING = 3  # the cloud warns it will reclaim a spot instance (NOTICE s ahead)
    SPOT_RECLAIMED = 4  # the cloud takes it back: its agent is gone, its tasks requeued


class Events:
    """Events due at future seconds, popped in (time, kind, order of scheduling) order."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, Any]] = []
        self._order = itertools.count()

    def schedule(self, time: int, kind: Kind, subject: Any) -> None:
        heapq.heappush(self._heap, (time, kind, next(self._order), subject))

    def next_time(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: int) -> list[tuple[Kind, Any]]:
        """Every event due at or before ``now``, in order."""
        due = []
        while self._heap and self._heap[0][0] <= now:
            _, kind, _, subject = heapq.heappop(self._heap)
            due.append((Kind(kind), subject))
        return due
