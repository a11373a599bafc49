"""The tasks that came to each pool lately: what a snapshot's ``arrivals`` report.

A task arrives when a read of the master first shows its allocation, pending or placed
already (one placed between two reads still shows, running). The first read after the
bridge starts takes the tasks there at the time the master registered them (the
allocation's ``registeredTime``), so a restart is not taken for a burst; those that
ended within the hour before it are not seen, so until the window fills again the pool
keeps less free room, never more. Only the bridge's memory holds this.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from datetime import datetime

from dynagent.core.snapshot import ARRIVALS_WINDOW_SECONDS, Arrival

from .reading import TaskReading


class ArrivalLog:
    """One pool's arrivals over the last ``ARRIVALS_WINDOW_SECONDS``."""

    def __init__(self) -> None:
        self._seen: set[str] | None = None  # None: no read yet
        self._recent: deque[tuple[datetime, int]] = deque()

    def read(self, tasks: Iterable[TaskReading], now: datetime) -> None:
        """A read of the master: its tasks in the pool."""
        current = {task.id: task for task in tasks}
        if self._seen is None:
            known = sorted(
                (min(task.registered, now), task.slots)
                for task in current.values()
                if task.registered is not None
            )
            self._recent.extend(known)
        else:
            for task_id, task in current.items():
                if task_id not in self._seen:
                    self._recent.append((now, task.slots))
        # Ended tasks are forgotten: an allocation id is never used again.
        self._seen = set(current)
        while self._recent and _age(self._recent[0][0], now) > ARRIVALS_WINDOW_SECONDS:
            self._recent.popleft()

    def arrivals(self, now: datetime) -> tuple[Arrival, ...]:
        """The arrivals within the window, newest first, those of one read together."""
        return grouped((_age(moment, now), slots) for moment, slots in reversed(self._recent))


def grouped(arrived: Iterable[tuple[int, int]]) -> tuple[Arrival, ...]:
    """(age, slots) of each task, newest first, as the snapshot's ``arrivals``: one entry
    per age and size, those beyond the window (or from the future) left out."""
    counts: Counter[tuple[int, int]] = Counter(
        (age, slots) for age, slots in arrived if 0 <= age <= ARRIVALS_WINDOW_SECONDS
    )
    return tuple(Arrival(age, slots, count) for (age, slots), count in counts.items())


def _age(moment: datetime, now: datetime) -> int:
    return int((now - moment).total_seconds())
