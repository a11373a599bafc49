"""Re-packing in the same pass: tasks whose machines had no capacity anywhere go onto the
next-cheapest cover at once, instead of waiting a pass for the capacity memory. The
reconcile pass re-packs its snapshot's tasks (``decide``), the spot notice function its
replacement for the reclaimed machine (``plan_interruption``): each passes its decision.

``launch_with_fallback`` moves a machine only to offerings that hold the same tasks (its
type in other zones and purchase options, then larger types). When every one of those
refuses, a cover of smaller machines may still have capacity: two 4-GPU machines for the
two 4-slot tasks the decision had put on one 8-GPU machine. So the decision is taken
again with what the pass has learnt: the offerings refused are unavailable, and the
machines it started are in the fleet, starting (built from the fleet observed before, so
no second observe, which an eventually consistent cloud might answer without them).

Only the new plan's launches are carried out: the rest of it is the first plan's, done
already. They go under a launch key of their own, derived from the plan's and the round,
so a replay of the snapshot launches nothing twice; or under the new plan's own key when
it names another (an interruption's cover: a warm function's replay chooses the cover
in its first pass, and must send the same requests). Each round leaves out at least one
more offering, so the rounds end; ``MAX_ROUNDS`` bounds them anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from dynagent.core.fleet import Fleet, Instance, InstanceState
from dynagent.core.offerings import Purchase
from dynagent.core.plan import Plan
from dynagent.run.provider import LaunchErrorKind, LaunchResult, Provider

# The pass's decision, taken again on a fleet: what it started is there, and what had no
# capacity is unavailable.
Decision = Callable[[Fleet], Plan]

# Rounds after the first launch. One covers the common case (the cheapest shape out
# everywhere); more cover a second shape out too, each at one call per offering.
MAX_ROUNDS = 3


@dataclass(frozen=True)
class Repack:
    """One more round of a pass: the decision again, without what had no capacity."""

    # Keys of the offerings the round before refused: why this round was needed.
    refused: tuple[str, ...]
    # The new decision, under this round's launch key, with its launches as its only
    # actions.
    plan: Plan
    launch: LaunchResult

    def report(self) -> dict[str, Any]:
        return {
            "refused": list(self.refused),
            "actions": [launch.describe() for launch in self.plan.launches],
            "launched": list(self.launch.started),
        }


def found_no_capacity(result: LaunchResult) -> bool:
    """Some launches ran out of offerings, every one refused for capacity."""
    return bool(result.unavailable) and result.error_kind is LaunchErrorKind.CAPACITY


def repack_key(launch_key: str, round_: int) -> str:
    """The launch key of a re-pack round: distinct from every plan's, and the same on a
    replay of the snapshot, so the cloud's idempotency holds."""
    return f"{launch_key}:repack{round_}"


def repack(
    provider: Provider,
    fleet: Fleet,
    now: datetime,
    decision: Decision,
    plan: Plan,
    launch: LaunchResult,
) -> tuple[LaunchResult, tuple[Repack, ...]]:
    """Launch again, for as long as launches found no capacity anywhere and ``decision``
    finds other machines to try; what all rounds did, and each re-pack."""
    rounds: list[Repack] = []
    total, last = launch, launch
    while found_no_capacity(last) and len(rounds) < MAX_ROUNDS:
        refused = last.unavailable
        fleet = launched_into(fleet, last, now)
        again = decision(fleet)
        if not again.launches:
            break  # nothing else to try: the tasks wait, and the first error stands
        # The other actions are the first plan's, carried out already.
        key = again.launch_key
        if key == plan.launch_key:
            key = repack_key(plan.launch_key, len(rounds) + 1)
        only_launches = again.only_launching(key, again.launches)
        last = provider.launch(only_launches)
        rounds.append(Repack(refused, only_launches, last))
        total = combined(total, last)
    return total, tuple(rounds)


def launched_into(fleet: Fleet, launch: LaunchResult, now: datetime) -> Fleet:
    """The fleet after a launch: what it started is there, starting, and what it had no
    capacity for is unavailable."""
    known = {instance.id for instance in fleet.instances}
    started = tuple(
        Instance(
            id=instance_id,
            state=InstanceState.STARTING,
            launched_at=now,
            instance_type=offering.instance_type,
            zone=offering.zone,
            spot=offering.purchase is Purchase.SPOT,
        )
        for instance_id, offering in launch.placements
        if instance_id not in known
    )
    return replace(
        fleet,
        instances=fleet.instances + started,
        unavailable=fleet.unavailable | frozenset(launch.unavailable),
    )


def combined(first: LaunchResult, then: LaunchResult) -> LaunchResult:
    """What two rounds launched together; the later round's error is the pass's."""
    return LaunchResult(
        started=first.started + then.started,
        error=then.error,
        error_kind=then.error_kind,
        replayed=first.replayed or then.replayed,
        unavailable=first.unavailable + then.unavailable,
        placements=first.placements + then.placements,
    )
