"""What EC2's launch refusals come to (``provider.LaunchErrorKind``), by error code.

EC2 names its refusals by code (``InsufficientInstanceCapacity``, ...); the adapter
reads them here, once, and the rest of dynagent reads the kind. A code not listed is
``OTHER``: bad parameters, permissions, an unsupported configuration.
"""

from __future__ import annotations

from dynagent.provider import LaunchErrorKind

_CODES: dict[LaunchErrorKind, tuple[str, ...]] = {
    LaunchErrorKind.CAPACITY: (
        "InsufficientInstanceCapacity", "InsufficientCapacity", "UnfulfillableCapacity",
        "InsufficientHostCapacity", "capacity-not-available",
    ),
    LaunchErrorKind.QUOTA: (
        "InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded",
    ),
    LaunchErrorKind.THROTTLED: ("RequestLimitExceeded", "Throttling", "ThrottlingException"),
}  # fmt: skip
KINDS = {code: kind for kind, codes in _CODES.items() for code in codes}


def refusal_kind(code: str) -> LaunchErrorKind:
    """What an EC2 error code comes to."""
    return KINDS.get(code, LaunchErrorKind.OTHER)
