"""The one contract every cloud adapter implements, for one pool.

Assumptions, as the adapters meet them:
- The cloud is eventually consistent: ``launch`` waits (bounded) until what it started
  shows in ``observe``, so the next reconcile of the pool cannot miss it and launch again.
  Where the wait gives up, a warm function's ``observe`` still counts what it launched
  until the cloud shows it (EC2: ``WarmState.in_flight``).
- Launches are idempotent by a token derived from the plan's ``launch_key``: replaying a
  snapshot never starts a second set of instances.
- Launch failures the cloud reports (capacity, quota, bad parameters) come back as data
  in ``LaunchResult``; errors worth retrying (throttling, network) are raised.
- "Not found" on terminate, stop or cancel counts as done.
- A start the cloud refuses comes back as data in ``StartResult``: the pass then launches
  the start's cold cover instead.
- Only instances and requests carrying the pool's managed tag or label pair are ever
  observed or touched.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from dynagent.core.fleet import Fleet
from dynagent.core.offerings import Offering
from dynagent.core.plan import Adoption, Cancellation, MarkWrite, Plan, Start, Stop, Termination


class LaunchErrorKind(enum.Enum):
    """What a cloud's refusal of a launch comes to, whatever its words: each adapter
    classifies its own cloud's codes, and the core, the re-pack and the metrics read the
    kind, never the message. The values are the ``LaunchErrors`` metric's codes."""

    # No capacity for the offering now (a stockout): another offering may have some.
    CAPACITY = "capacity"
    # An account or project limit: vCPUs, GPUs, spot instances.
    QUOTA = "quota"
    # The API's rate limit.
    THROTTLED = "throttling"
    # Anything else: bad parameters, permissions, configuration.
    OTHER = "other"


class LaunchNotVisible(RuntimeError):
    """What a launch started did not show in the cloud's listing in time: retrying the
    pass is safe, as the launch's token or names make a repeat start nothing new."""


@dataclass(frozen=True)
class LaunchResult:
    """What a launch started: instance ids, or request ids for spot requests."""

    started: tuple[str, ...] = ()
    # The cloud's own words when it refused, e.g. "InsufficientInstanceCapacity: ...".
    error: str | None = None
    # What the refusal comes to, as the adapter classified it (None: no error).
    error_kind: LaunchErrorKind | None = None
    # True when the launch token had been used already: an earlier run launched these.
    replayed: bool = False
    # Keys of offerings the cloud refused for capacity in this launch (``Offering.key``).
    unavailable: tuple[str, ...] = ()
    # Each started id with the offering it was started on, for launches that went
    # through ``launch_with_fallback``: the same pass counts them when it re-packs.
    placements: tuple[tuple[str, Offering], ...] = ()


@dataclass(frozen=True)
class StartResult:
    """What starting stopped machines did."""

    started: tuple[str, ...] = ()
    # The starts the cloud refused: (instance id, the cloud's words, what they come to).
    refused: tuple[tuple[str, str, LaunchErrorKind], ...] = ()


class Provider(Protocol):
    """Observe and change one pool's fleet in one cloud."""

    def observe(self) -> Fleet:
        """Every managed instance and spot request of the pool, all pages."""
        ...

    def launch(self, plan: Plan) -> LaunchResult:
        """Start one instance per launch of the plan, in one call, then wait until they
        are visible. The plan's ``launch_key`` makes the call idempotent."""
        ...

    def terminate(self, terminations: tuple[Termination, ...]) -> None: ...

    def stop(self, stops: tuple[Stop, ...]) -> None:
        """Stop machines for the warm pool; their disks and tags or labels stay."""
        ...

    def start(self, starts: tuple[Start, ...]) -> StartResult:
        """Start stopped machines, each on its own, so one refused leaves the others."""
        ...

    def cancel(self, cancellations: tuple[Cancellation, ...]) -> None: ...

    def adopt(self, adoptions: tuple[Adoption, ...]) -> None:
        """Put the managed tags on instances that managed spot requests launched."""
        ...

    def write_marks(self, marks: tuple[MarkWrite, ...]) -> None:
        """Record marks on instances: one cloud call per write."""
        ...
