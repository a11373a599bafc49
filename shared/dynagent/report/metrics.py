"""What the functions measure, cloud-neutral: each metric's name, unit and dimensions.

The AWS functions write them as CloudWatch embedded metric format (Powertools Metrics);
the GCP functions as structured log entries that log-based metrics read. The dashboard
and alarms in template.yaml, and those infra/gcp/deploy.sh creates, name only these.
Dimensions stay low-cardinality: a pool, a reason, a code, a state; never an instance.
A machine type is one too, bounded by the pool's config: the emitter names each type
the pool offers, and ``other`` for one it does not (``OTHER_TYPE``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from dynagent.core.plan import LAUNCH_CAUSES, TERMINATION_CAUSES

NAMESPACE: Final = "dynagent"

AGENT_STATES: Final = ("idle", "busy", "draining")
INSTANCE_STATES: Final = ("starting", "running", "stopping", "stopped")
LAUNCH_ERROR_CODES: Final = ("capacity", "quota", "throttling", "other")
INTERRUPTION_KINDS: Final = ("interruption", "rebalance", "preempted")
# A machine type the pool does not offer (any more), as ``instance_type``'s value.
OTHER_TYPE: Final = "other"
# What an ``instance_type`` value may look like: EC2's p3.8xlarge, Compute Engine's
# n1-standard-32, or OTHER_TYPE. Which of them a pass names, its pool's config bounds.
_MACHINE_TYPE = re.compile(r"[a-z0-9][a-z0-9.\-]{0,62}")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    unit: str  # CloudWatch's unit names
    dimensions: tuple[str, ...]
    description: str
    # The values a dimension other than ``pool`` takes.
    values: tuple[str, ...] = ()
    # The dimension other than ``pool`` is ``instance_type``: its values are the pool's
    # machine types and OTHER_TYPE, which the emitter bounds by the pool's config.
    machine_types: bool = False


CATALOG: Final = (
    MetricSpec("PendingSlots", "Count", ("pool",), "slots the pending tasks ask for"),
    MetricSpec("Agents", "Count", ("pool", "state"), "connected agents", AGENT_STATES),
    MetricSpec(
        "Instances", "Count", ("pool", "state"), "managed instances by state", INSTANCE_STATES
    ),
    MetricSpec("Launches", "Count", ("pool", "reason"), "instances launched", LAUNCH_CAUSES),
    MetricSpec(
        "Terminations", "Count", ("pool", "reason"), "instances terminated", TERMINATION_CAUSES
    ),
    MetricSpec("LaunchErrors", "Count", ("pool", "code"), "launches refused", LAUNCH_ERROR_CODES),
    MetricSpec("SpotRequestsCancelled", "Count", ("pool",), "stale spot requests cancelled"),
    MetricSpec("SnapshotAge", "Seconds", ("pool",), "age of the snapshot a reconcile applied"),
    MetricSpec("SnapshotsApplied", "Count", ("pool",), "snapshots reconciled"),
    MetricSpec("DeadLetters", "Count", ("pool",), "records set aside (pool 'unknown' if none)"),
    MetricSpec("ReconcileDuration", "Milliseconds", ("pool",), "one pass over a pool"),
    MetricSpec("CostPerHour", "None", ("pool",), "dollars per hour of the live instances"),
    MetricSpec("PendingAtMax", "Count", ("pool",), "1 when demand waits at max_instances"),
    MetricSpec("LaunchesPaused", "Count", ("pool",), "1 while launch_error_retries pause launches"),
    MetricSpec(
        "Interruptions", "Count", ("pool", "kind"), "spot reclaims seen", INTERRUPTION_KINDS
    ),
    # The warm pool (docs/warm-pools.md).
    MetricSpec(
        "StoppedInstances",
        "Count",
        ("pool", "instance_type"),
        "stopped machines the warm pool keeps, by type",
        machine_types=True,
    ),
    MetricSpec(
        "StoppedDiskCost", "None", ("pool",), "dollars per hour the stopped machines' disks bill"
    ),
    MetricSpec("Stops", "Count", ("pool",), "idle machines stopped for the warm pool"),
    MetricSpec("Starts", "Count", ("pool",), "stopped machines started"),
    MetricSpec("StartsRefused", "Count", ("pool", "code"), "starts refused", LAUNCH_ERROR_CODES),
)

BY_NAME: Final = {spec.name: spec for spec in CATALOG}


@dataclass(frozen=True)
class Point:
    """One value of a catalog metric for one pool, with its other dimensions' values.

    Built only through the catalog: an unknown name, a missing dimension or a value the
    catalog does not list raises, so no emitter can write what dashboards don't name.
    (A machine type must look like one; ``pass_metrics`` names only its pool's.)
    """

    name: str
    value: float
    pool: str
    # The dimensions other than ``pool``, in the catalog's order: (("state", "idle"),).
    dimensions: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        spec = BY_NAME.get(self.name)
        if spec is None:
            raise ValueError(f"{self.name!r} is not in the metrics catalog")
        names = tuple(name for name, _ in self.dimensions)
        if ("pool", *names) != spec.dimensions:
            raise ValueError(f"{self.name} has dimensions {spec.dimensions}, not pool+{names}")
        for _, value in self.dimensions:
            if spec.machine_types:
                if not _MACHINE_TYPE.fullmatch(value):
                    raise ValueError(f"{self.name}: {value!r} is not a machine type")
            elif value not in spec.values:
                raise ValueError(f"{self.name}: {value!r} is not one of {spec.values}")

    @property
    def unit(self) -> str:
        return BY_NAME[self.name].unit

    def labels(self) -> dict[str, str]:
        """Every dimension by name, pool first."""
        return {"pool": self.pool, **dict(self.dimensions)}


def point(name: str, value: float, pool: str, **dimensions: str) -> Point:
    """``point("Agents", 3, "a100", state="idle")``."""
    return Point(name, value, pool, tuple(dimensions.items()))
