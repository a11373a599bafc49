"""What the functions measure, cloud-neutral: each metric's name, unit and dimensions.

The AWS functions write them as CloudWatch embedded metric format (Powertools Metrics);
the GCP functions as structured log entries that log-based metrics read. The dashboard
and alarms in template.yaml, and those infra/gcp/deploy.sh creates, name only these.
Dimensions stay low-cardinality: a pool, a reason, a code, a state; never an instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dynagent.plan import LAUNCH_CAUSES, TERMINATION_CAUSES

NAMESPACE: Final = "dynagent"

AGENT_STATES: Final = ("idle", "busy", "draining")
INSTANCE_STATES: Final = ("starting", "running", "stopping", "stopped")
LAUNCH_ERROR_CODES: Final = ("capacity", "quota", "throttling", "other")
INTERRUPTION_KINDS: Final = ("interruption", "rebalance", "preempted")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    unit: str  # CloudWatch's unit names
    dimensions: tuple[str, ...]
    description: str
    # The values a dimension other than ``pool`` takes.
    values: tuple[str, ...] = ()


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
    MetricSpec(
        "Interruptions", "Count", ("pool", "kind"), "spot reclaims seen", INTERRUPTION_KINDS
    ),
)

BY_NAME: Final = {spec.name: spec for spec in CATALOG}
