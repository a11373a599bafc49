"""What EC2's launch refusals come to (``provider.LaunchErrorKind``), by error code, and
which spot request statuses will not turn into an instance.

EC2 names its refusals by code (``InsufficientInstanceCapacity``, ...); the adapter
reads them here, once, and the rest of dynagent reads the kind. A code not listed is
``OTHER``: bad parameters, permissions, an unsupported configuration.
"""

from __future__ import annotations

from dynagent.run.provider import LaunchErrorKind

_CODES: dict[LaunchErrorKind, tuple[str, ...]] = {
    LaunchErrorKind.CAPACITY: (
        "InsufficientInstanceCapacity", "InsufficientCapacity", "UnfulfillableCapacity",
        "InsufficientHostCapacity", "capacity-not-available", "ReservationCapacityExceeded",
    ),
    LaunchErrorKind.QUOTA: (
        "InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded",
    ),
    LaunchErrorKind.THROTTLED: ("RequestLimitExceeded", "Throttling", "ThrottlingException"),
}  # fmt: skip
KINDS = {code: kind for kind, codes in _CODES.items() for code in codes}


# Spot request status codes that will not turn into an instance by waiting: the adapter
# reports such a request unfulfillable (``fleet.SpotRequest``).
UNFULFILLABLE_SPOT_STATUSES = frozenset(
    {
        "bad-parameters", "capacity-not-available", "capacity-oversubscribed",
        "constraint-not-fulfillable", "launch-group-constraint", "az-group-constraint",
        "placement-group-constraint", "price-too-low", "not-scheduled-yet",
        "schedule-expired", "system-error", "limit-exceeded",
    }
)  # fmt: skip


def refusal_kind(code: str) -> LaunchErrorKind:
    """What an EC2 error code comes to."""
    return KINDS.get(code, LaunchErrorKind.OTHER)
