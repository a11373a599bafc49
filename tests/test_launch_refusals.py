"""Each cloud's adapter says what a launch refusal comes to, from its own codes: the
core, the re-pack and the metrics read only the kind (``provider.LaunchErrorKind``)."""

from __future__ import annotations

import pytest

from dynagent.aws.refusals import refusal_kind as ec2_kind
from dynagent.gcp.refusals import refusal_kind as gce_kind
from dynagent.run.provider import LaunchErrorKind

CAPACITY, QUOTA, THROTTLED, OTHER = (
    LaunchErrorKind.CAPACITY, LaunchErrorKind.QUOTA, LaunchErrorKind.THROTTLED,
    LaunchErrorKind.OTHER,
)  # fmt: skip


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("InsufficientInstanceCapacity", CAPACITY),
        ("UnfulfillableCapacity", CAPACITY),
        ("InstanceLimitExceeded", QUOTA),
        ("MaxSpotInstanceCountExceeded", QUOTA),
        ("VcpuLimitExceeded", QUOTA),
        ("RequestLimitExceeded", THROTTLED),
        ("InvalidParameterValue", OTHER),
        ("Unsupported", OTHER),
        ("UnauthorizedOperation", OTHER),
    ],
)
def test_ec2_codes(code: str, kind: LaunchErrorKind) -> None:
    assert ec2_kind(code) is kind


@pytest.mark.parametrize(
    ("codes", "kind"),
    [
        (["ZONE_RESOURCE_POOL_EXHAUSTED"], CAPACITY),
        (["ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"], CAPACITY),
        (["QUOTA_EXCEEDED"], QUOTA),
        (["rateLimitExceeded"], THROTTLED),
        (["INVALID_FIELD_VALUE", "QUOTA_EXCEEDED"], QUOTA),  # the first code that says
        (["INVALID_FIELD_VALUE"], OTHER),
        ([], OTHER),
    ],
)
def test_compute_engine_codes(codes: list[str], kind: LaunchErrorKind) -> None:
    assert gce_kind(codes) is kind
