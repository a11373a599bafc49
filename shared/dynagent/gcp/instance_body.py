"""The Compute Engine instance a launch asks for, as the REST API's JSON.

Built as plain JSON (the API's own field names, as Determined's ``base_config`` is
written) and merged over ``base_config``: ours wins where both set a field.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from dynagent.pools.gcp import GcpInstanceType, GcpProvider
from dynagent.userdata import agent_startup_script

from .labels import LAUNCH_KEY_LABEL, identity_labels, label_safe

MAX_NAME = 63
# The metadata server names the VM: on GCP the agent id is the instance name.
AGENT_ID_COMMAND = (
    'curl -sf -H "Metadata-Flavor: Google" '
    "http://metadata.google.internal/computeMetadata/v1/instance/name"
)


def instance_names(provider: GcpProvider, launch_key: str, count: int) -> list[str]:
    """Deterministic names from (pool, seq, index): a replay asks for the same names."""
    base = provider.name_prefix + label_safe(launch_key).replace("_", "-")
    if len(base) + len(f"-{count}") > MAX_NAME:
        digest = hashlib.sha256(launch_key.encode()).hexdigest()[:16]
        base = f"{provider.name_prefix}{digest}"
    return [f"{base}-{index}" for index in range(count)]


def offering_names(
    provider: GcpProvider, launch_key: str, offering_key: str, count: int
) -> list[str]:
    """Names for ``count`` VMs of one offering of a plan: deterministic from (pool, seq,
    offering, index), so a replay asks for the same names, and a VM refused in one zone
    is asked for under another name in the next."""
    digest = hashlib.sha256(offering_key.encode()).hexdigest()[:6]
    base = instance_names(provider, launch_key, 1)[0].rsplit("-", 1)[0]
    if len(base) + len(f"-{digest}-{count}") > MAX_NAME:
        base = base[: MAX_NAME - len(f"-{digest}-{count}")].rstrip("-")
    return [f"{base}-{digest}-{index}" for index in range(count)]


def instance_body(
    provider: GcpProvider,
    pool: str,
    name: str,
    launch_key: str,
    machine: GcpInstanceType | None = None,
    zone: str | None = None,
    spot: bool | None = None,
) -> dict[str, Any]:
    """The VM to insert: the pool's one machine in its zone, or an offering's."""
    zone = zone or provider.zone
    kind = machine or provider.instance_type
    spot = provider.spot if spot is None else spot
    ours: dict[str, Any] = {
        "name": name,
        "machineType": f"zones/{zone}/machineTypes/{kind.machine_type}",
        "labels": {**identity_labels(provider, pool), LAUNCH_KEY_LABEL: label_safe(launch_key)},
        "disks": [
            {
                "boot": True,
                "autoDelete": True,
                "type": "PERSISTENT",
                "initializeParams": {
                    "sourceImage": provider.boot_disk_source_image,
                    "diskSizeGb": str(provider.boot_disk_size),
                },
            }
        ],
        "networkInterfaces": [_network_interface(provider)],
        "scheduling": _scheduling(kind, spot),
        "metadata": {
            "items": [
                {
                    "key": "startup-script",
                    "value": agent_startup_script(provider, pool, AGENT_ID_COMMAND),
                }
            ]
        },
    }
    if kind.gpu_num:
        ours["guestAccelerators"] = [
            {
                "acceleratorType": f"zones/{zone}/acceleratorTypes/{kind.gpu_type}",
                "acceleratorCount": kind.gpu_num,
            }
        ]
    if provider.service_account.email:
        ours["serviceAccounts"] = [
            {
                "email": provider.service_account.email,
                "scopes": list(provider.service_account.scopes),
            }
        ]
    if provider.network_tags:
        ours["tags"] = {"items": list(provider.network_tags)}
    return merge(provider.base_config, ours)


def _network_interface(provider: GcpProvider) -> dict[str, Any]:
    network = provider.network_interface
    interface: dict[str, Any] = {"network": network.network}
    if network.subnetwork:
        interface["subnetwork"] = network.subnetwork
    if network.external_ip:
        interface["accessConfigs"] = [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
    return interface


def _scheduling(kind: GcpInstanceType, spot: bool) -> dict[str, Any]:
    # GPUs cannot live-migrate: the VM must stop for host maintenance.
    scheduling: dict[str, Any] = {"onHostMaintenance": "TERMINATE", "automaticRestart": False}
    if spot:
        scheduling["provisioningModel"] = "SPOT"
        scheduling["instanceTerminationAction"] = "DELETE"
    elif kind.preemptible:
        scheduling["preemptible"] = True
    return scheduling


def merge(base: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """``ours`` over ``base``: nested objects merge, anything else ours replaces."""
    merged = copy.deepcopy(base)
    for key, value in ours.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
