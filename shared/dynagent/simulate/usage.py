"""Where the billed slot-seconds went: tasks, free slots beside them, idle agents, boots.

The gap between a fleet's bill and the physical limit has three causes an admin can
act on differently: slots left free on agents that run something (fragmentation:
smaller instances or packing help), agents with nothing to run (the idle period
helps), and instances still booting (faster images help). The run's state is constant
between the seconds it visits, so each span is added once, with the state it had.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Usage:
    """Slot-seconds billed, split by what the slots were doing."""

    busy: int = 0  # running a task
    free: int = 0  # free, on an agent that runs something
    idle: int = 0  # on an agent that runs nothing
    booting: int = 0  # on an instance whose agent has not registered
    _since: int | None = None
    _state: tuple[int, int, int, int] = (0, 0, 0, 0)

    def observe(self, now: int, fleet: int, busy: int, connected: int, idle: int) -> None:
        """The state from ``now`` on, in slots: billed, busy, on connected agents, on idle
        agents."""
        self.close(now)
        self._state = (busy, connected - idle - busy, idle, fleet - connected)

    def close(self, now: int) -> None:
        """Add the span since the last observation, up to ``now``."""
        if self._since is not None and now > self._since:
            span = now - self._since
            busy, free, idle, booting = self._state
            self.busy += busy * span
            self.free += free * span
            self.idle += idle * span
            self.booting += booting * span
        self._since = now

    @property
    def total(self) -> int:
        return self.busy + self.free + self.idle + self.booting
