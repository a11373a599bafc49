"""How long a launched instance takes to become useful: running, then its agent registered.

The default is a realistic GPU instance: the cloud shows it running after 60 s, and its
agent has pulled its images and registered with the master after 360 s (a cold boot
with a 10 to 20 GB image). Two things make boots differ, as they do in a real pool:

- The machine type: each GPU beyond the first adds ``per_gpu`` seconds (3 s by
  default) to the registration, since the host brings up every GPU (driver, device
  checks) before the agent starts and lists them. The number is an assumption, not a
  measurement; what it keeps is the order (larger machines register later), so the
  machines of one pass no longer register in the same second.
- Chance: each launch draws its times uniformly within plus or minus ``jitter``
  seconds (20 s by default; EC2's own launch times vary by tens of seconds from one
  launch to the next), from ``seed``, so a run repeats exactly.

The draws are common to the runs compared (``BootSampler``): a launch's times depend on
the seed, the second of the launch and its place among that second's launches, not on
how many launches the run made before it.

``UNIFORM`` is the first model, every machine at exactly 60 s and 180 s: for arithmetic
worked by hand (``--registered-after 180s --boot-jitter 0s --boot-per-gpu 0s``).

A cold boot is launch, running, the agent's and the task's images pulled, registered:
``registered_after`` is all of it. A warm start, of a machine the warm pool stopped,
skips the image pull: its agent registers ``started_after`` seconds after the start (90
s by default: the OS, the driver bringing up the GPUs, Docker starting the agent's
container again), with the same per-GPU time and jitter.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class BootModel:
    running_after: int = 60
    registered_after: int = 360
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


UNIFORM = BootModel(registered_after=180, jitter=0, per_gpu=0)


class BootSampler:
    """Draws the boot times of one run's launches and warm starts.

    Common random numbers: the times of the n-th launch (or start) made at second t come
    from (seed, t, n), not from one sequence the run draws in turn. Two policies replayed
    with one seed then boot alike the machines they launch alike, and their runs differ
    only where their decisions do. With one sequence, a single launch one policy made and
    the other did not dealt every later boot of the run anew: on cluster08 the p95 wait
    of two runs that decide alike but for a few launches differed by a second either way
    from seed to seed.
    """

    def __init__(self, model: BootModel) -> None:
        self.model = model
        # Per kind of draw: the second of the last one and how many were made in it.
        self._last: dict[str, tuple[int, int]] = {}

    def draw(self, slots: int, at: int) -> tuple[int, int]:
        """Seconds after launch until (running, agent registered) for a machine of
        ``slots`` GPUs launched at second ``at`` of the run; registered >= running."""
        model = self.model
        jitter = self._jitter("launch", at)
        running = jitter(model.running_after)
        registered = jitter(model.registered_after_for(slots))
        return running, max(running, registered)

    def draw_start(self, slots: int, at: int) -> tuple[int, int]:
        """As ``draw``, for a warm start of a stopped machine: no image to pull."""
        model = self.model
        jitter = self._jitter("start", at)
        running = jitter(min(model.running_after, model.started_after))
        registered = jitter(model.started_after + model.per_gpu * max(0, slots - 1))
        return running, max(running, registered)

    def _jitter(self, kind: str, at: int) -> Callable[[int], int]:
        """Adds this draw's jitter to a time: from (seed, kind, second, place in it)."""
        spread = self.model.jitter
        if not spread:
            return _unchanged
        second, made = self._last.get(kind, (at, 0))
        made = made + 1 if second == at else 1
        self._last[kind] = (at, made)
        offset = random.Random(f"{self.model.seed}:{kind}:{at}:{made}").randint

        def jittered(seconds: int) -> int:
            return max(0, seconds + offset(-spread, spread))

        return jittered


def _unchanged(seconds: int) -> int:
    return seconds
