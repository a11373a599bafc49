"""EC2's spot notices as EventBridge delivers them, and which pool an instance is in.

The events (source ``aws.ec2``) carry the instance id in ``detail.instance-id``, and the
region at the top; the interruption warning also ``detail.instance-action`` (terminate,
stop or hibernate), which changes nothing here: whichever it is, the agent goes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from dynagent.core.config import AwsProvider, Pool
from dynagent.core.interruptions import INTERRUPTION, REBALANCE, Notice

from . import tags

# EventBridge detail-type -> the notice's kind.
DETAIL_TYPES = {
    "EC2 Spot Instance Interruption Warning": INTERRUPTION,
    "EC2 Instance Rebalance Recommendation": REBALANCE,
}


class NotANotice(ValueError):
    """An event this handler does not take: retrying it cannot help."""


def parse_notice(event: dict[str, Any], now: datetime) -> tuple[Notice, str]:
    """The notice and its region; ``now`` stands in for a missing or unreadable time."""
    if event.get("source") != "aws.ec2":
        raise NotANotice(f"source {event.get('source')!r} is not aws.ec2")
    kind = DETAIL_TYPES.get(str(event.get("detail-type")))
    if kind is None:
        raise NotANotice(f"detail-type {event.get('detail-type')!r} is not a spot notice")
    detail = event.get("detail")
    instance_id = detail.get("instance-id") if isinstance(detail, dict) else None
    region = event.get("region")
    if not isinstance(instance_id, str) or not instance_id.startswith("i-"):
        raise NotANotice(f"detail.instance-id {instance_id!r} is not an instance id")
    if not isinstance(region, str) or not region:
        raise NotANotice("no region")
    return Notice(instance_id, kind, _time(event.get("time"), now)), region


def _time(value: Any, now: datetime) -> datetime:
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return now
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def owning_pool(ec2: Any, pools: Iterable[Pool], instance_id: str) -> Pool | None:
    """The pool whose managed pair and pool tag the instance carries, or None.

    One DescribeInstances per distinct managed pair among ``pools`` (one region's),
    filtered by that pair, so an unmanaged instance is never even read.
    """
    by_pair: dict[tuple[str, str], dict[str, Pool]] = defaultdict(dict)
    for pool in pools:
        provider = pool.provider
        assert isinstance(provider, AwsProvider)
        by_pair[(provider.tag_key, provider.tag_value)][pool.name] = pool
    for (key, value), named in by_pair.items():
        response = ec2.describe_instances(
            Filters=[
                {"Name": f"tag:{key}", "Values": [value]},
                {"Name": f"tag:{tags.POOL_TAG}", "Values": sorted(named)},
                {"Name": "instance-id", "Values": [instance_id]},
            ]
        )
        for reservation in response["Reservations"]:
            for item in reservation["Instances"]:
                found = {t["Key"]: t["Value"] for t in item.get("Tags", [])}
                if item["InstanceId"] == instance_id and found.get(key) == value:
                    owner = named.get(found.get(tags.POOL_TAG, ""))
                    if owner is not None:
                        return owner
    return None
