"""Launching a plan's machines where the cloud has capacity: the next offering on a refusal.

Every cloud does the same thing here, so it is written once: the adapters (and the
simulated cloud) say how to launch ``count`` machines of one offering; this module
groups a plan's launches by offering, tries each group, and on a capacity refusal moves
the machines not started to their next offering, in the same pass. An offering refused
for capacity is remembered as unavailable for a few minutes (``CapacityMemory``), so the
next decisions choose among the others instead of asking again.

A machine falls back only to offerings that hold its tasks: its type elsewhere, then
larger types. When none of those has capacity, ``dynagent.run.repack`` decides again in the
same pass, without them, and may find a cover of smaller machines.

No offering is tried twice in one launch, so a launch makes at most one call per
offering tried, and a pass where everything is out ends after one call per offering
(a re-pack leaves the refused ones out of its decision).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dynagent.core.offerings import Offering
from dynagent.core.plan import Launch
from dynagent.run.provider import LaunchErrorKind, LaunchResult

# How long an offering the cloud had no capacity for is left out of decisions. Karpenter
# keeps its unavailable-offerings cache 3 minutes; GPU stockouts tend to last longer.
UNAVAILABLE_FOR = timedelta(minutes=5)


@dataclass(frozen=True)
class Attempt:
    """What one launch call for one offering did."""

    started: tuple[str, ...] = ()
    # The cloud said it has no capacity (or quota) for this offering: try the next one.
    out_of_capacity: bool = False
    # The cloud refused for another reason (bad parameters, permissions): stop here.
    error: str | None = None
    # What that refusal comes to, as the adapter classified it.
    error_kind: LaunchErrorKind = LaunchErrorKind.OTHER
    # The call's token was used already: an earlier try of this plan launched these.
    replayed: bool = False


# Launch ``count`` machines of an offering; ``tasks`` are what they are for (for tags/logs).
LaunchCall = Callable[[Offering, int], Attempt]


@dataclass
class CapacityMemory:
    """Offerings recently refused for capacity, until when; a warm function keeps one."""

    remember_for: timedelta = UNAVAILABLE_FOR
    until: dict[str, datetime] = field(default_factory=dict)

    def refused(self, offering: Offering, now: datetime) -> None:
        self.refused_key(offering.key, now)

    def refused_key(self, key: str, now: datetime) -> None:
        """An offering by its key: a stopped machine's (type, zone, purchase), whose
        start the cloud refused for capacity."""
        self.until[key] = now + self.remember_for

    def unavailable(self, now: datetime) -> frozenset[str]:
        """Keys of offerings still out; forgets those whose time ran out."""
        for key in [k for k, until in self.until.items() if until <= now]:
            del self.until[key]
        return frozenset(self.until)


# How the error of a launch that ran out of offerings starts: it sums up ``unavailable``.
NO_CAPACITY = "no capacity for"


def launch_with_fallback(
    launches: tuple[Launch, ...],
    call: LaunchCall,
    memory: CapacityMemory,
    now: datetime,
) -> LaunchResult:
    """Start every launch on its first offering with capacity; see the module docstring."""
    # Each launch not started yet, with the index of the offering it will try next.
    # Entries are (position in ``launches``, offering index): equal launches stay distinct.
    waiting = [(position, 0) for position, launch in enumerate(launches) if launch.offerings]
    tried: set[str] = set()
    placed: list[tuple[str, Offering]] = []
    refused: list[str] = []
    replayed = False
    while waiting := _untried(launches, waiting, tried):
        offering = launches[waiting[0][0]].offerings[waiting[0][1]]
        group = [(p, i) for p, i in waiting if launches[p].offerings[i].key == offering.key]
        tried.add(offering.key)
        attempt = call(offering, len(group))
        placed += [(instance_id, offering) for instance_id in attempt.started]
        replayed |= attempt.replayed
        if attempt.error is not None:
            return _result(placed, refused, replayed, attempt.error, attempt.error_kind)
        done = len(group) if attempt.replayed else len(attempt.started)
        if done < len(group) and not attempt.out_of_capacity:
            break  # fewer than asked and no reason given: the next pass asks again
        if done < len(group):
            memory.refused(offering, now)
            refused.append(offering.key)
        # The group's first ``done`` are started; the rest move on to their next offering.
        done_positions = {p for p, _ in group[:done]}
        waiting = [(p, i) for p, i in waiting if p not in done_positions]
    unmet = 0 if replayed else len(launches) - len(placed)
    if refused and unmet > 0:
        error = f"{NO_CAPACITY} {unmet} machine(s): tried {', '.join(refused)}"
        return _result(placed, refused, replayed, error, LaunchErrorKind.CAPACITY)
    return _result(placed, refused, replayed, None, None)


def _result(
    placed: list[tuple[str, Offering]],
    refused: list[str],
    replayed: bool,
    error: str | None,
    kind: LaunchErrorKind | None,
) -> LaunchResult:
    return LaunchResult(
        tuple(instance_id for instance_id, _ in placed),
        error=error,
        error_kind=kind,
        replayed=replayed,
        unavailable=tuple(refused),
        placements=tuple(placed),
    )


def _untried(
    launches: tuple[Launch, ...], waiting: list[tuple[int, int]], tried: set[str]
) -> list[tuple[int, int]]:
    """Each launch at its first offering not tried in this pass; those with none are dropped."""
    moved = []
    for position, index in waiting:
        offerings = launches[position].offerings
        while index < len(offerings) and offerings[index].key in tried:
            index += 1
        if index < len(offerings):
            moved.append((position, index))
    return moved
