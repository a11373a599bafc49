"""A Plan: what one reconcile or sweep will do to a pool, each action with its reason."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from dynagent.core.boot.drift import boot_tag
from dynagent.core.fleet import Mark
from dynagent.core.offerings import Offering

# Low-cardinality names for why a plan launches or terminates: metric dimensions.
LAUNCH_CAUSES = (
    "demand", "gang_spare", "cap_fill", "zero_slot", "min_instances", "headroom",
    "interrupted", "replacement",
)  # fmt: skip
TERMINATION_CAUSES = (
    "idle", "never_registered", "disconnected", "stopped", "spot_cancelled", "over_max",
    "interrupted", "drifted", "broken", "other",
)  # fmt: skip
# What the cloud said of a spot machine: a reclaim warning (EC2), a rebalance
# recommendation (EC2), a preemption already done (GCP). metrics.INTERRUPTION_KINDS.
INTERRUPTION_KINDS = ("interruption", "rebalance", "preempted")


# Slotted: a pass over a large pool plans thousands of launches.
@dataclass(frozen=True, slots=True)
class Launch:
    """One new instance, and where it may be bought.

    ``offerings`` lists where, best first: the chosen offering, then the fallbacks the
    adapter tries in the same pass when the cloud has no capacity for it (other zones
    and purchase options of the type, then larger types). Empty in plans built without a
    catalog: the pool's one type.
    """

    reason: str
    tasks: tuple[str, ...] = ()
    offerings: tuple[Offering, ...] = ()
    # What kind of need, for metrics: one of LAUNCH_CAUSES.
    cause: str = "demand"

    @property
    def offering(self) -> Offering | None:
        return self.offerings[0] if self.offerings else None

    @property
    def reserved(self) -> bool:
        """Into a reservation the pool names: its first offering is a place there."""
        return bool(self.offerings and self.offerings[0].reservation)

    def describe(self) -> str:
        what = f"1 {self.offering.describe()}" if self.offering else "1 instance"
        return f"launch {what}: {self.reason}"


@dataclass(frozen=True)
class Termination:
    instance_id: str
    reason: str
    # Which rule, for metrics: one of TERMINATION_CAUSES.
    cause: str = "other"


@dataclass(frozen=True)
class Stop:
    """Stop an idle agent's machine for the warm pool, instead of terminating it."""

    instance_id: str
    reason: str


@dataclass(frozen=True)
class Start:
    """Start a stopped machine of the warm pool for pending tasks. ``cold`` is the launch
    that covers the same tasks if the cloud refuses the start for capacity: carried out
    in the same pass, on the machine's type elsewhere and larger ones."""

    instance_id: str
    reason: str
    cold: Launch
    # The key of the offering the machine is of: refused for capacity, it is left out of
    # the next decisions for a while, as a refused launch's offering is.
    offering: str = ""


@dataclass(frozen=True)
class Cancellation:
    """Cancel a spot request that has not produced a useful instance."""

    request_id: str
    reason: str


@dataclass(frozen=True)
class Adoption:
    """Tag the instance a managed spot request launched, so it is managed too.

    EC2 does not copy a spot request's tags to its instance.
    """

    request_id: str
    instance_id: str


@dataclass(frozen=True)
class MarkWrite:
    """Set (or, with value None, remove) one mark on instances: one cloud call each."""

    mark: Mark
    value: datetime | None
    instance_ids: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Interruption:
    """A spot machine the cloud is taking back, or took back: one per notice seen."""

    instance_id: str
    # One of INTERRUPTION_KINDS.
    kind: str


@dataclass(frozen=True)
class DrainNotice:
    """An agent the master should place no more work on from ``at``: its machine is in a
    reservation the cloud takes back at its end (a Capacity Block). The functions tell
    the bridge (``core.notices``), which disables it with drain then."""

    agent_id: str
    at: datetime
    reason: str


@dataclass(frozen=True)
class Unschedulable:
    """A pending task no fleet of this pool could ever run."""

    task: str
    slots: int
    reason: str


@dataclass(frozen=True)
class Plan:
    pool: str
    # Launch tokens derive from this and the launch index, so a replay launches nothing new.
    launch_key: str
    # When the launch was decided, as retries of it will see it too (the snapshot's
    # time): what time-bound launch parameters derive from, so a retry matches.
    launch_at: datetime
    launches: tuple[Launch, ...] = ()
    terminations: tuple[Termination, ...] = ()
    stops: tuple[Stop, ...] = ()
    starts: tuple[Start, ...] = ()
    cancellations: tuple[Cancellation, ...] = ()
    adoptions: tuple[Adoption, ...] = ()
    marks: tuple[MarkWrite, ...] = ()
    unschedulable: tuple[Unschedulable, ...] = ()
    # Demand left unmet for now (the pool is at max_instances), said for the log.
    waiting: tuple[str, ...] = ()
    # Some of that demand waits only because the pool is at max_instances (for metrics).
    pending_at_max: bool = False
    # Agents of the snapshot that match no managed instance by id or hostname: static
    # agents, or dynamic ones whose DET_AGENT_ID is not their instance's id.
    unmatched_agents: tuple[str, ...] = ()
    # Spot interruptions this pass saw (for metrics): notices, and preempted machines.
    interruptions: tuple[Interruption, ...] = ()
    # The master host's addresses by master_url alias, from the snapshot: the launches'
    # boot scripts resolve an alias in master_url with them.
    master_addresses: tuple[tuple[str, str], ...] = ()
    # The hash of the boot config launches carry (``boot.drift``), "" when unknown: a
    # stopped machine whose own differs is deleted, never started.
    boot_config: str = ""
    # Its parts' short hashes (``boot.drift.boot_parts``), for saying what drifted.
    boot_parts: str = ""
    # Agents the bridge should drain: ahead of their reservation's end, or to be
    # replaced (drifted or broken) once their tasks end.
    drain_notices: tuple[DrainNotice, ...] = ()
    # Agents kept for now that must go (drifted or broken): (instance id, why and what
    # happens to them now), for ``plan`` and ``status``.
    retiring: tuple[tuple[str, str], ...] = ()
    # Every agent this pass found drifted or broken, kept or terminated: (instance id,
    # cause), for ``status``.
    replacing: tuple[tuple[str, str], ...] = ()

    @property
    def replacing_counts(self) -> tuple[int, int]:
        """(drifted, broken) agents this pass found, kept or terminated."""
        causes = [cause for _, cause in self.replacing]
        return causes.count("drifted"), causes.count("broken")

    @property
    def boot_tag(self) -> str:
        """What a launch's boot config tag or label holds (``boot.drift.boot_tag``)."""
        return boot_tag(self.boot_config, self.boot_parts)

    def only_launching(self, launch_key: str, launches: tuple[Launch, ...]) -> Plan:
        """This plan's launches alone (or ``launches``), under ``launch_key``: what a
        pass carries out after the rest of the plan is done."""
        return replace(
            self,
            launch_key=launch_key,
            launches=launches,
            terminations=(),
            stops=(),
            starts=(),
            cancellations=(),
            adoptions=(),
            marks=(),
            interruptions=(),
            drain_notices=(),
        )

    @property
    def changes_nothing(self) -> bool:
        return not (
            self.launches
            or self.terminations
            or self.stops
            or self.starts
            or self.cancellations
            or self.adoptions
            or self.marks
        )

    def describe(self) -> list[str]:
        """One line per action, for logs and ``dynagent plan``."""
        lines = [f"start {s.instance_id}: {s.reason}" for s in self.starts]
        lines += [launch.describe() for launch in self.launches]
        lines += [f"stop {s.instance_id}: {s.reason}" for s in self.stops]
        lines += [f"terminate {t.instance_id}: {t.reason}" for t in self.terminations]
        lines += [f"cancel spot request {c.request_id}: {c.reason}" for c in self.cancellations]
        lines += [
            f"tag {a.instance_id} as managed: launched by spot request {a.request_id}"
            for a in self.adoptions
        ]
        lines += [
            f"tell the bridge to drain {n.agent_id} from {n.at:%Y-%m-%d %H:%M:%S}Z: {n.reason}"
            for n in self.drain_notices
        ]
        lines += [f"replacing {instance_id}: {why}" for instance_id, why in self.retiring]
        for write in self.marks:
            verb = f"set {write.mark.value}" if write.value else f"clear {write.mark.value}"
            lines.append(f"{verb} on {', '.join(write.instance_ids)}: {write.reason}")
        # A million pending tasks alike make one line, not a million.
        alike: dict[tuple[int, str], list[str]] = {}
        for u in self.unschedulable:
            alike.setdefault((u.slots, u.reason), []).append(u.task)
        lines += [
            f"unschedulable {_tasks(names, slots)}: {reason}"
            for (slots, reason), names in alike.items()
        ]
        lines += [f"waiting: {note}" for note in _counted(self.waiting)]
        lines += [f"{i.kind} of {i.instance_id} seen" for i in self.interruptions]
        if self.unmatched_agents:
            lines.append(
                f"{len(self.unmatched_agents)} agents matching no managed instance "
                f"(left alone): {_some(self.unmatched_agents)}"
            )
        return lines


# A pool of thousands of static agents would make one log line of their ids.
_LISTED = 20


# A waiting note of one task, as decide writes it: "NAME (SLOTS slots): WHY".
_TASK_NOTE = re.compile(r"(?P<name>.*?) \((?P<slots>\d+) slots\): (?P<why>.*)", re.DOTALL)


def _counted(notes: Iterable[str]) -> list[str]:
    """The waiting notes, one per reason and size: tasks alike are counted."""
    alike: dict[tuple[int, str], list[str]] = {}
    others: list[str] = []
    for note in notes:
        found = _TASK_NOTE.fullmatch(note)
        if found is None:
            others.append(note)
        else:
            key = (int(found["slots"]), found["why"])
            alike.setdefault(key, []).append(found["name"])
    counted = [f"{_tasks(names, slots)}: {why}" for (slots, why), names in alike.items()]
    return counted + others


def _tasks(names: list[str], slots: int) -> str:
    if len(names) == 1:
        return f"{names[0]} ({slots} slots)"
    return f"{len(names):,} tasks of {slots} slots ({_some(tuple(names))})"


def _some(names: tuple[str, ...]) -> str:
    more = len(names) - _LISTED
    return ", ".join(names[:_LISTED]) + (f" and {more} more" if more > 0 else "")
