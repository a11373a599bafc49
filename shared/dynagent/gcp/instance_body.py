"""The Compute Engine instance a launch asks for, as the REST API's JSON.

Built as plain JSON (the API's own field names, as Determined's ``base_config`` is
written) over ``base_config`` as Determined merges them (provconfig
``GCPClusterConfig.InstanceProperties`` and provisioner/gcp/gcp.go
``clusterInstanceProperties``): lists the admin gives there keep their entries, so a disk
``base_config`` attaches stays beside the boot disk.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from dynagent.core.boot import MasterAddress, agent_boot, render
from dynagent.core.pools.gcp import GcpInstanceType, GcpProvider
from dynagent.gcp.reservations import affinity

from .labels import (
    BOOT_CONFIG_LABEL,
    LAUNCH_KEY_LABEL,
    identity_labels,
    label_safe,
    launch_key_label,
)

MAX_NAME = 63
# The metadata server names the VM: on GCP the agent id is the instance name.
AGENT_ID_COMMAND = (
    'curl -sf -H "Metadata-Flavor: Google" '
    "http://metadata.google.internal/computeMetadata/v1/instance/name"
)


def instance_names(provider: GcpProvider, launch_key: str, count: int) -> list[str]:
    """Deterministic names from (pool, seq, index): a replay asks for the same names."""
    base = _name_base(provider, launch_key, len(f"-{count}"))
    return [f"{base}-{index}" for index in range(count)]


def offering_names(
    provider: GcpProvider, launch_key: str, offering_key: str, count: int
) -> list[str]:
    """Names for ``count`` VMs of one offering of a plan: deterministic from (pool, seq,
    offering, index), so a replay asks for the same names, and a VM refused in one zone
    is asked for under another name in the next."""
    digest = hashlib.sha256(offering_key.encode()).hexdigest()[:6]
    base = _name_base(provider, launch_key, len(f"-{digest}-{count}"))
    return [f"{base}-{digest}-{index}" for index in range(count)]


def _name_base(provider: GcpProvider, launch_key: str, suffix: int) -> str:
    """The prefix and the launch key, for a name with ``suffix`` characters more. A key
    too long for that is replaced by its digest, never cut: cut, the keys of two
    snapshots (or of a snapshot and its re-pack) could name the same VMs, and the second
    launch would take the first one's VMs for its own."""
    base = provider.name_prefix + label_safe(launch_key).replace("_", "-")
    if len(base) + suffix > MAX_NAME:
        digest = hashlib.sha256(launch_key.encode()).hexdigest()[:16]
        base = f"{provider.name_prefix}{digest}"
    return base


def startup_script(
    provider: GcpProvider,
    pool: str,
    master: MasterAddress,
    machine: GcpInstanceType | None = None,
) -> str:
    """The boot script of a VM of ``machine`` (the pool's one machine by default)."""
    kind = machine or provider.instance_type
    boot = agent_boot(provider, pool, {kind.machine_type: kind.gpu_num}, master)
    return render(boot, AGENT_ID_COMMAND)


def instance_body(
    provider: GcpProvider,
    pool: str,
    name: str,
    launch_key: str,
    script: str,
    machine: GcpInstanceType | None = None,
    zone: str | None = None,
    spot: bool | None = None,
    boot_config: str = "",
    reservation: str = "",
) -> dict[str, Any]:
    """The VM to insert: the pool's one machine in its zone, or an offering's, booting
    ``script`` (``startup_script``); into ``reservation`` if named, else into none (an
    admin's ``reservationAffinity`` in base_config stands for those)."""
    zone = zone or provider.zone
    kind = machine or provider.instance_type
    spot = provider.spot if spot is None else spot
    body = copy.deepcopy(provider.base_config)
    body["name"] = name
    body["machineType"] = f"zones/{zone}/machineTypes/{kind.machine_type}"
    platform = min_cpu_platform(kind.machine_type)
    if platform:
        body["minCpuPlatform"] = platform
    if kind.gpu_num:
        body["guestAccelerators"] = [
            {
                "acceleratorType": f"zones/{zone}/acceleratorTypes/{kind.gpu_type}",
                "acceleratorCount": kind.gpu_num,
            }
        ]
    body["disks"] = [_boot_disk(provider, zone), *body.get("disks", [])]
    # The admin's labels, then ours: the managed pair is never overwritten.
    body["labels"] = {
        **body.get("labels", {}),
        **provider.labels,
        **identity_labels(provider, pool),
        LAUNCH_KEY_LABEL: launch_key_label(launch_key),
        **({BOOT_CONFIG_LABEL: boot_config} if boot_config else {}),
    }
    body["networkInterfaces"] = _network_interfaces(provider, body.get("networkInterfaces", []))
    if provider.network_tags:
        items = body.get("tags", {}).get("items", [])
        body["tags"] = {**body.get("tags", {}), "items": [*items, *provider.network_tags]}
    if provider.service_account.email:
        account = {
            "email": provider.service_account.email,
            "scopes": list(provider.service_account.scopes),
        }
        body["serviceAccounts"] = [*body.get("serviceAccounts", []), account]
    body["scheduling"] = _scheduling(kind, spot, provider.warm_pool.enabled)
    if reservation or "reservationAffinity" not in body:
        body["reservationAffinity"] = affinity(reservation)
    item = {"key": "startup-script", "value": script}
    theirs = [
        i for i in body.get("metadata", {}).get("items", []) if i.get("key") != "startup-script"
    ]
    body["metadata"] = {**body.get("metadata", {}), "items": [item, *theirs]}
    return body


# Determined's minimum CPU platform by machine family (provconfig ``GetCPUPlatform``):
# Cascade Lake for these, Broadwell for the other families it accepts.
_CASCADE_LAKE = ("a2-highgpu", "a2-megagpu", "a2-ultragpu", "g2-standard", "n2-standard")
_BROADWELL = ("n1-", "c2-", "m2-", "custom-")


def min_cpu_platform(machine_type: str) -> str | None:
    """The platform Determined asks for; None for a family Determined does not accept
    (a3, e2...), where Compute Engine's own default applies."""
    if machine_type.startswith(_CASCADE_LAKE):
        return "Intel Cascade Lake"
    if machine_type.startswith(_BROADWELL):
        return "Intel Broadwell"
    return None


def _boot_disk(provider: GcpProvider, zone: str) -> dict[str, Any]:
    disk_type = provider.boot_disk_type.rsplit("/", 1)[-1]
    return {
        "boot": True,
        "autoDelete": True,
        "type": "PERSISTENT",
        "initializeParams": {
            "sourceImage": provider.boot_disk_source_image,
            "diskSizeGb": str(provider.boot_disk_size),
            "diskType": f"zones/{zone}/diskTypes/{disk_type}",
        },
    }


def _network_interfaces(provider: GcpProvider, theirs: list[Any]) -> list[Any]:
    """Determined adds its interface to base_config's when both network and subnetwork
    are set; a VM needs one, so with none in base_config ours is added all the same."""
    network = provider.network_interface
    if theirs and not (network.network and network.subnetwork):
        return theirs
    interface: dict[str, Any] = {"network": network.network}
    if network.subnetwork:
        interface["subnetwork"] = network.subnetwork
    if network.external_ip:
        interface["accessConfigs"] = [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
    return [*theirs, interface]


def _scheduling(kind: GcpInstanceType, spot: bool, warm: bool = False) -> dict[str, Any]:
    # GPUs cannot live-migrate: the VM must stop for host maintenance.
    scheduling: dict[str, Any] = {"onHostMaintenance": "TERMINATE", "automaticRestart": False}
    if spot:
        scheduling["provisioningModel"] = "SPOT"
        # With a warm pool a preempted Spot VM is stopped, not deleted: the pool may keep
        # it, with its images, and start it when capacity is back.
        scheduling["instanceTerminationAction"] = "STOP" if warm else "DELETE"
    elif kind.preemptible:
        scheduling["preemptible"] = True
    return scheduling
