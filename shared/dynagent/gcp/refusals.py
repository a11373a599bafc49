"""What Compute Engine's launch refusals come to (``provider.LaunchErrorKind``), by the
codes of a failed insert operation's errors.

A zone out of a machine (``ZONE_RESOURCE_POOL_EXHAUSTED``...) is capacity, a project
or region limit (``QUOTA_EXCEEDED``) quota, the API's rate limit throttling; any other
code, or an insert the API refused outright (bad request, permission), is ``OTHER``.
"""

from __future__ import annotations

from collections.abc import Iterable

from dynagent.run.provider import LaunchErrorKind

_CODES: dict[LaunchErrorKind, tuple[str, ...]] = {
    LaunchErrorKind.CAPACITY: (
        "ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "RESOURCE_POOL_EXHAUSTED", "STOCKOUT",
    ),
    LaunchErrorKind.QUOTA: ("QUOTA_EXCEEDED", "quotaExceeded"),
    LaunchErrorKind.THROTTLED: ("rateLimitExceeded", "RATE_LIMIT_EXCEEDED"),
}  # fmt: skip
KINDS = {code: kind for kind, codes in _CODES.items() for code in codes}


def refusal_kind(codes: Iterable[str]) -> LaunchErrorKind:
    """What a failed insert comes to: the kind of its first code that has one."""
    for code in codes:
        kind = KINDS.get(code)
        if kind is not None:
            return kind
    return LaunchErrorKind.OTHER
