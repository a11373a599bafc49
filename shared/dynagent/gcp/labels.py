"""How dynagent's state reads in Compute Engine labels: names, values, the state table.

Labels allow only lowercase letters, digits, ``-`` and ``_``, so times are epoch seconds
and the launch key's ``:`` becomes ``-``.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from dynagent.core.fleet import InstanceState, Mark
from dynagent.core.pools.gcp import GcpProvider

POOL_LABEL = "dynagent-pool"
LAUNCH_KEY_LABEL = "dynagent-launch-key"
# The boot config a VM was created with (``core.boot.drift``; lowercase hex, a valid
# label value): a stopped one of another is deleted, never started.
BOOT_CONFIG_LABEL = "dynagent-boot-config"
MARK_LABELS = {mark: f"dynagent-{mark.value}" for mark in Mark}
# Compute Engine's longest label value.
MAX_LABEL_VALUE = 63
_MARK_BY_LABEL = {label: mark for mark, label in MARK_LABELS.items()}

# Compute Engine instance statuses (every one the compute.v1 API lists), mapped once.
# TERMINATED is a stopped or preempted VM: it bills for its disks and holds its name,
# so the decision deletes it, unless the pool's warm pool keeps it. DEPROVISIONING is a
# VM on its way out: not capacity.
INSTANCE_STATES = {
    "PENDING": InstanceState.STARTING,
    "PROVISIONING": InstanceState.STARTING,
    "STAGING": InstanceState.STARTING,
    "RUNNING": InstanceState.RUNNING,
    "REPAIRING": InstanceState.RUNNING,
    "PENDING_STOP": InstanceState.STOPPING,
    "STOPPING": InstanceState.STOPPING,
    "SUSPENDING": InstanceState.STOPPING,
    "DEPROVISIONING": InstanceState.STOPPING,
    "SUSPENDED": InstanceState.STOPPED,
    "STOPPED": InstanceState.STOPPED,
    "TERMINATED": InstanceState.STOPPED,
}


def format_time(value: datetime) -> str:
    return str(int(value.timestamp()))


def parse_time(value: str) -> datetime | None:
    """A mark's time, or None when someone edited the label into something else."""
    return datetime.fromtimestamp(int(value), UTC) if value.isdigit() else None


def label_safe(text: str) -> str:
    """Lowercase, and every character labels do not allow becomes ``-``."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "-" for c in text.lower())


def launch_key_label(launch_key: str) -> str:
    """The launch key as a label value: a long pool's sweep or re-pack key would pass 63
    characters, so such a key keeps its start and ends in a digest of the whole."""
    value = label_safe(launch_key)
    if len(value) <= MAX_LABEL_VALUE:
        return value
    digest = hashlib.sha256(launch_key.encode()).hexdigest()[:10]
    return f"{value[: MAX_LABEL_VALUE - len(digest) - 1]}-{digest}"


def managed_filter(provider: GcpProvider, pool: str) -> str:
    """The list filter that selects exactly the pool's managed VMs."""
    return (
        f'(labels.{provider.label_key} = "{provider.label_value}") AND '
        f'(labels.{POOL_LABEL} = "{pool}")'
    )


def identity_labels(provider: GcpProvider, pool: str) -> dict[str, str]:
    return {provider.label_key: provider.label_value, POOL_LABEL: pool}


def marks_from_labels(labels: dict[str, str]) -> dict[Mark, datetime]:
    marks = {}
    for label, value in labels.items():
        mark = _MARK_BY_LABEL.get(label)
        when = parse_time(value) if mark else None
        if mark and when:
            marks[mark] = when
    return marks


def is_managed(labels: dict[str, str], provider: GcpProvider, pool: str) -> bool:
    """Checked again on what the list returned: a filter is not a guarantee."""
    return all(labels.get(k) == v for k, v in identity_labels(provider, pool).items())
