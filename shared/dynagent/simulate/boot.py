"""How long a launched instance takes to become useful: running, then its agent registered.

The default follows the issue's model of a GPU instance: the cloud shows it running
after 60 s, and its agent has pulled its image and registered with the master after
180 s. With ``jitter``, each launch draws its times uniformly within plus or minus
``jitter`` seconds, from a generator seeded with ``seed``, so a run repeats exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class BootModel:
    running_after: int = 60
    registered_after: int = 180
    jitter: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.running_after, self.registered_after, self.jitter) < 0:
            raise ValueError("boot times and jitter must not be negative")

    def sampler(self) -> BootSampler:
        return BootSampler(self)


class BootSampler:
    """Draws the boot times of one run's launches, in launch order."""

    def __init__(self, model: BootModel) -> None:
        self.model = model
        self._random = random.Random(model.seed)

    def draw(self) -> tuple[int, int]:
        """Seconds after launch until (running, agent registered); registered >= running."""
        running = self._jittered(self.model.running_after)
        registered = self._jittered(self.model.registered_after)
        return running, max(running, registered)

    def _jittered(self, seconds: int) -> int:
        jitter = self.model.jitter
        if not jitter:
            return seconds
        return max(0, seconds + self._random.randint(-jitter, jitter))
