"""When each agent's idle period runs out, by the clock the functions read.

The functions mark an agent idle from the first snapshot that shows it so (its
``time``) and terminate it at the first pass more than ``max_idle_agent_period`` later
(``decide.walk``), as Determined's provisioner does. With snapshots only on changes and
the 30 s heartbeat, that pass came up to 30 s after the period ran out, 15 s on
average. Determined's provisioner checks every 5 s and terminates at the first check
after the period (``provisioner/scaledecider/scale_decider.go``
``CalculateInstanceStates``: ``now.After(t.Add(s.maxIdlePeriod))``):
on cluster05 with one 8-GPU type, dynagent's agents went 7.8 s later per reap, 7
GPU-hours more in all. So a publisher also publishes when an idle period it published
runs out, at its first read after the period: the agent goes within one of its passes
of the period, never before it.

A snapshot that first shows an agent idle is always published (the agent changed), so
the time noted here is the time the functions mark. After a restart the clock starts
over: the first snapshot's time is later than the functions' mark, and that agent is
left to the heartbeat as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dynagent.core.snapshot import Agent


@dataclass
class IdleClock:
    """When a published snapshot first showed each of its agents idle."""

    since: dict[str, datetime] = field(default_factory=dict)

    def published(self, agents: Iterable[Agent], at: datetime) -> None:
        """A snapshot of ``agents`` taken at ``at`` went out."""
        since = self.since
        self.since = {agent.id: since.get(agent.id, at) for agent in agents if agent.idle}

    def next_end(self, period: timedelta, after: datetime) -> datetime | None:
        """The first moment at or after ``after`` at which an idle period runs out (an
        agent goes only once idle longer than that: a snapshot at the very moment does not
        reap it)."""
        return min((s + period for s in self.since.values() if s + period >= after), default=None)
