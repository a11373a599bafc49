"""How long a launched instance takes to become useful: running, then its agent registered.

The default follows the issue's model of a GPU instance: the cloud shows it running
after 60 s, and its agent has pulled its image and registered with the master after
180 s. Two things make boots differ, as they do in a real pool:

- The machine type: each GPU beyond the first adds ``per_gpu`` seconds (3 s by
  default) to the registration, since the host brings up every GPU (driver, device
  checks) before the agent starts and lists them. The number is an assumption, not a
  measurement; what it keeps is the order (larger machines register later), so the
  machines of one pass no longer register in the same second.
- Chance: each launch draws its times uniformly within plus or minus ``jitter``
  seconds (20 s by default; EC2's own launch times vary by tens of seconds from one
  launch to the next), from a generator seeded with ``seed``, so a run repeats exactly.

``UNIFORM`` is the old model, every machine at exactly 60 s and 180 s: for arithmetic
worked by hand (``--boot-jitter 0s --boot-per-gpu 0s``).

A cold boot is launch, running, the agent's and the task's images pulled, registered:
``registered_after`` is all of it (6 minutes is a realistic GPU boot with a 10 to 20 GB
image: ``--registered-after 360s``). A warm start, of a machine the warm pool stopped,
skips the image pull: its agent registers ``started_after`` seconds after the start (90
s by default: the OS, the driver bringing up the GPUs, Docker starting the agent's
container again), with the same per-GPU time and jitter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class BootModel:
    running_after: int = 60
    registered_after: int = 180
    jitter: int = 20
    seed: int = 0
    # Seconds each GPU beyond the first adds to the agent's registration.
    per_gpu: int = 3
    # Seconds from a stopped machine's start to its agent registered (no image pull).
    started_after: int = 90

    def __post_init__(self) -> None:
        times = (self.running_after, self.registered_after, self.jitter, self.per_gpu)
        if min(*times, self.started_after) < 0:
            raise ValueError("boot times, jitter and per-GPU time must not be negative")

    def registered_after_for(self, slots: int) -> int:
        """Seconds to a registered agent, before jitter, for a machine of ``slots`` GPUs."""
        return self.registered_after + self.per_gpu * max(0, slots - 1)

    def sampler(self) -> BootSampler:
        return BootSampler(self)


UNIFORM = BootModel(jitter=0, per_gpu=0)


class BootSampler:
    """Draws the boot times of one run's launches, in launch order."""

    def __init__(self, model: BootModel) -> None:
        self.model = model
        self._random = random.Random(model.seed)

    def draw(self, slots: int) -> tuple[int, int]:
        """Seconds after launch until (running, agent registered) for a machine of
        ``slots`` GPUs; registered >= running."""
        running = self._jittered(self.model.running_after)
        registered = self._jittered(self.model.registered_after_for(slots))
        return running, max(running, registered)

    def draw_start(self, slots: int) -> tuple[int, int]:
        """As ``draw``, for a warm start of a stopped machine: no image to pull."""
        model = self.model
        running = self._jittered(min(model.running_after, model.started_after))
        registered = self._jittered(model.started_after + model.per_gpu * max(0, slots - 1))
        return running, max(running, registered)

    def _jittered(self, seconds: int) -> int:
        jitter = self.model.jitter
        if not jitter:
            return seconds
        return max(0, seconds + self._random.randint(-jitter, jitter))
