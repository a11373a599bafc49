"""What the run asks of an autoscaling policy: act at an instant, and say when to wake."""

from __future__ import annotations

import enum
from typing import Protocol

from dynagent.core.config import Pool


class Change(enum.IntEnum):
    """How the master changed since a policy last acted."""

    NONE = 0
    # A change the master publishes a snapshot for, in nothing a decision reads (a busy
    # agent got busier): the snapshot can only matter if a timer ran out meanwhile.
    OTHER = 1
    # The pending tasks, the connected agents or which of them are idle changed.
    DECISION = 2


class Policy(Protocol):
    """An autoscaler under simulation, acting on the simulated master and cloud."""

    # Its name in reports: "dynagent" or "determined".
    name: str
    # How many times it decided (a reconcile, a sweep, a provisioner tick).
    decisions: int

    def act(self, now: int, change: Change) -> None:
        """Run whatever is due at ``now``, given how the master changed since last time."""
        ...

    def wake_at(self) -> int | None:
        """The next second it must act even if nothing changes (a timer), or None."""
        ...

    def interruption_warning(self, now: int, instance_id: str) -> None:
        """The cloud warned it will reclaim this spot instance in two minutes."""
        ...

    def pending_at_max_seconds(self, until: int) -> int | None:
        """Seconds up to ``until`` its plans had demand waiting at max_instances, or None
        if it makes no such plans."""
        ...

    def upgrade(self, now: int, pool: Pool) -> None:
        """The pool's config changed (an upgrade): what it launches from now on."""
        ...

    def fleet_changed(self, now: int) -> None:
        """The cloud changed the fleet on its own (a spot reclaim): the next regular pass
        (heartbeat, sweep, tick) must run, as it would in an exhaustive run."""
        ...
