"""What a run looked like over time: demand, fleet and busy slots, as step functions."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Series:
    """Samples ``(second, demand, fleet, busy)`` in slots, one per change.

    ``demand`` is the slots tasks ask for (running or waiting), ``fleet`` the slots of
    every billed instance (booting ones included), ``busy`` the slots tasks use.
    """

    samples: list[tuple[int, int, int, int]] = field(default_factory=list)

    def record(self, time: int, demand: int, fleet: int, busy: int) -> None:
        sample = (time, demand, fleet, busy)
        if self.samples:
            last = self.samples[-1]
            if last[1:] == sample[1:]:
                return
            if last[0] == time:  # a later change in the same second replaces it
                self.samples[-1] = sample
                return
        self.samples.append(sample)

    def averaged(self, start: int, end: int, buckets: int) -> list[tuple[int, float, float, float]]:
        """Time-weighted means over ``buckets`` equal spans of [start, end): what a plot
        of a month can show, without losing the area under the curves."""
        if end <= start or buckets <= 0:
            return []
        width = (end - start) / buckets
        sums = [[0.0, 0.0, 0.0] for _ in range(buckets)]
        for index, (time, *values) in enumerate(self.samples):
            until = self.samples[index + 1][0] if index + 1 < len(self.samples) else end
            _spread(sums, start, width, max(time, start), min(until, end), values)
        return [
            (round(start + (i + 1) * width), s[0] / width, s[1] / width, s[2] / width)
            for i, s in enumerate(sums)
        ]


def _spread(
    sums: list[list[float]], start: int, width: float, begin: int, end: int, values: list[int]
) -> None:
    """Add ``values`` held over [begin, end) to the buckets that span overlaps."""
    if end <= begin:
        return
    first = int((begin - start) // width)
    last = min(int((end - start) // width), len(sums) - 1)
    for bucket in range(first, last + 1):
        low = max(begin, start + bucket * width)
        high = min(end, start + (bucket + 1) * width)
        if high > low:
            for k, value in enumerate(values):
                sums[bucket][k] += value * (high - low)
