"""The most agents a pool had connected at once over a window: what a snapshot's
``peak_agents`` reports, for ``warm_pool.max_stopped: auto``.

Counts are recorded as the publisher reads them; the peak is the largest recorded
within the window, and the count now. Only the publisher's memory holds it: after a
restart the peak is the count since then, so the pool keeps fewer stopped machines
until the window has passed, never more.
"""

from __future__ import annotations

from collections import deque


class PeakLog:
    """The largest of the counts recorded over the last ``window`` seconds."""

    def __init__(self, window: float) -> None:
        self.window = window
        # (second, count), the counts falling: a count is forgotten once a larger one
        # comes after it, as it can never be the peak again.
        self._falling: deque[tuple[float, int]] = deque()

    def record(self, second: float, count: int) -> None:
        falling = self._falling
        while falling and falling[-1][1] <= count:
            falling.pop()
        falling.append((second, count))

    def peak(self, second: float) -> int:
        """The peak over the window up to ``second`` (0: nothing recorded)."""
        falling = self._falling
        while len(falling) > 1 and falling[0][0] < second - self.window:
            falling.popleft()
        return falling[0][1] if falling else 0

    def next_change(self) -> float | None:
        """When the peak may next fall: as its record leaves the window."""
        falling = self._falling
        return falling[0][0] + self.window if len(falling) > 1 else None
