"""How dynagent's state reads in EC2 tags: tag names, values, and the state table."""

from __future__ import annotations

from datetime import UTC, datetime

from dynagent.core.config import AwsProvider
from dynagent.core.fleet import InstanceState, Mark, RequestState

POOL_TAG = "dynagent:pool"
LAUNCH_KEY_TAG = "dynagent:launch-key"
# The boot config a machine was launched with (``core.boot.drift``): a stopped one of
# another is deleted, never started.
BOOT_CONFIG_TAG = "dynagent:boot-config"
MARK_TAGS = {mark: f"dynagent:{mark.value}" for mark in Mark}
_MARK_BY_TAG = {tag: mark for mark, tag in MARK_TAGS.items()}

# EC2 instance states, mapped once; shutting-down and terminated are never observed.
INSTANCE_STATES = {
    "pending": InstanceState.STARTING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPED,
}
SPOT_REQUEST_STATES = {"open": RequestState.OPEN, "active": RequestState.ACTIVE}
CANCELLED_INSTANCE_RUNNING = "request-canceled-and-instance-running"


def format_time(value: datetime) -> str:
    """Tag values read as UTC ISO 8601 in the console: ``2026-11-21T23:00:00Z``."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str) -> datetime | None:
    """A mark's time, or None when someone edited the tag into something else."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def managed_filters(provider: AwsProvider, pool: str) -> list[dict[str, object]]:
    """The describe filters that select exactly the pool's managed resources."""
    return [
        {"Name": f"tag:{provider.tag_key}", "Values": [provider.tag_value]},
        {"Name": f"tag:{POOL_TAG}", "Values": [pool]},
    ]


def identity_tags(provider: AwsProvider, pool: str) -> list[dict[str, str]]:
    """Tags every managed instance and request carries: the managed pair and the pool."""
    return [
        {"Key": provider.tag_key, "Value": provider.tag_value},
        {"Key": POOL_TAG, "Value": pool},
    ]


def instance_tags(provider: AwsProvider, pool: str) -> list[dict[str, str]]:
    """Identity, name and the admin's custom tags (ours win on a clash)."""
    tags = [*identity_tags(provider, pool), {"Key": "Name", "Value": provider.instance_name}]
    ours = {tag["Key"] for tag in tags}
    return tags + [
        {"Key": tag.key, "Value": tag.value} for tag in provider.custom_tags if tag.key not in ours
    ]


def boot_config_tags(boot_config: str) -> list[dict[str, str]]:
    """The boot config tag of a launch; none when the plan knows no config."""
    return [{"Key": BOOT_CONFIG_TAG, "Value": boot_config}] if boot_config else []


def tag_value(tags: list[dict[str, str]], key: str) -> str:
    return next((tag["Value"] for tag in tags if tag["Key"] == key), "")


def marks_from_tags(tags: list[dict[str, str]]) -> dict[Mark, datetime]:
    marks = {}
    for tag in tags:
        mark = _MARK_BY_TAG.get(tag["Key"])
        when = parse_time(tag["Value"]) if mark else None
        if mark and when:
            marks[mark] = when
    return marks
