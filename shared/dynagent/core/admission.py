"""What a stock Determined master admits for a pool, from its config: the facts both
``dynagent master-config`` (which writes the master's pools) and the bridge's start check
(which reads them back) need.

A master admits work for a pool only if it believes the pool has room for it
(determined-ai/determined, master/internal/rm/agentrm):

* Single-agent work (commands, notebooks, shells, TensorBoards): ``resource_pool.go
  ValidateResources``: a pool with a provider admits up to its ``SlotsPerInstance``; a
  pool without one only up to its largest connected agent, so nothing at zero agents.
  ``agent_resource_manager.go ValidateResources`` refuses the rest with "request
  unfulfillable", whatever ``launch_error`` says.
* Experiments: ``resource_pool.go CapacityCheck``: ``max_instances * SlotsPerInstance``
  with a provider, the connected agents' slots without; more is refused "slots
  requested exceeds cluster capacity" while ``launch_error`` is true (its default).

So dynagent's pools keep a provider in the master's config, for these counts, whose
provisioner can never act: its ``region`` fails the AWS SDK's region check, so every
EC2 call of the master's provisioner fails before it is sent (aws-sdk-go v1.40, which
Determined pins: aws/endpoints/v3model.go ``validateInputRegion``; the session's
Validate handler fails the request). ``provisioner.go Provision`` returns when listing
fails, before terminating or launching, so no launch error is ever set and
``resource_pool.go pruneTaskList`` never drops a queued task.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from dynagent.core.gpus import DETERMINED_EC2_SLOTS

# The region of every provider ``dynagent master-config`` writes: readable in the
# master's WebUI as the pool's location, and no AWS SDK sends a request for it.
ADMISSION_REGION: Final = "scaled by dynagent"
# aws-sdk-go v1 aws/endpoints/v3model.go regionValidationRegex ([[:alnum:]] is ASCII).
_SDK_REGION: Final = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$")


def provisioner_can_act(provider_type: str, region: str) -> bool:
    """Whether the master's own provisioner for this provider can list, launch and
    terminate: an AWS one unless its region fails the SDK's check; a GCP one always."""
    if provider_type == "aws":
        return bool(_SDK_REGION.match(region))
    return provider_type == "gcp"


def aws_slots(instance_type: str, instance_slots: int | None, cpu_slots_allowed: bool) -> int:
    """provconfig/aws_config.go ``SlotsPerInstance``: the slot table's count for a type it
    knows (``instance_slots`` is then ignored, ``validateInstanceTypeSlots``), else
    ``instance_slots``; a type without GPUs has 1 slot with ``cpu_slots_allowed``."""
    slots = DETERMINED_EC2_SLOTS.get(instance_type)
    if slots is None:
        slots = instance_slots or 0
    return 1 if slots == 0 and cpu_slots_allowed else slots


def gcp_slots(gpu_num: int, cpu_slots_allowed: bool) -> int:
    """provconfig/gcp_config.go ``SlotsPerInstance``."""
    return 1 if gpu_num == 0 and cpu_slots_allowed else gpu_num


@dataclass(frozen=True)
class MasterPool:
    """One pool as the master's admission sees it."""

    name: str
    provider: str | None  # "aws", "gcp", or None (static agents only)
    slots_per_agent: int  # the provider's SlotsPerInstance; -1 without a provider
    max_instances: int
    location: str  # the AWS region or GCP zone; "on-prem" without a provider

    @property
    def provisioner_acts(self) -> bool:
        return self.provider is not None and provisioner_can_act(self.provider, self.location)

    @property
    def capacity(self) -> int:
        """The slots CapacityCheck allows an experiment with a provider."""
        return self.max_instances * max(self.slots_per_agent, 0)


# Determined's provider defaults where admission reads them (provconfig ``DefaultConfig``,
# aws_config.go ``defaultAWSClusterConfig``, gcp_config.go ``DefaultGCPClusterConfig``).
_DEFAULT_MAX_INSTANCES: Final = 5
_DEFAULT_AWS_TYPE: Final = "g4dn.metal"
_DEFAULT_GCP_GPU_NUM: Final = 4


def pools_from_master_config(config: Mapping[str, Any]) -> dict[str, MasterPool]:
    """The pools of a master's config (``GET /api/v1/master/config``'s ``config``, or a
    master.yaml), by name."""
    found = {}
    for entry in config.get("resource_pools") or ():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("pool_name"), str):
            continue
        found[entry["pool_name"]] = _pool_from_entry(entry["pool_name"], entry.get("provider"))
    return found


def _pool_from_entry(name: str, provider: Any) -> MasterPool:
    kind = provider.get("type") if isinstance(provider, Mapping) else None
    if kind not in ("aws", "gcp"):
        return MasterPool(name, None, -1, 0, "on-prem")
    assert isinstance(provider, Mapping)
    max_instances = int(provider.get("max_instances") or _DEFAULT_MAX_INSTANCES)
    cpu = bool(provider.get("cpu_slots_allowed"))
    if kind == "aws":
        slots = aws_slots(
            str(provider.get("instance_type") or _DEFAULT_AWS_TYPE),
            provider.get("instance_slots"),
            cpu,
        )
        return MasterPool(name, "aws", slots, max_instances, str(provider.get("region") or ""))
    machine = provider.get("instance_type")
    gpu_num = machine.get("gpu_num") if isinstance(machine, Mapping) else None
    slots = gcp_slots(_DEFAULT_GCP_GPU_NUM if gpu_num is None else int(gpu_num), cpu)
    return MasterPool(name, "gcp", slots, max_instances, str(provider.get("zone") or ""))


_POOL_TYPES: Final = {"RESOURCE_POOL_TYPE_AWS": "aws", "RESOURCE_POOL_TYPE_GCP": "gcp"}


def pools_from_resource_pools(pools: Sequence[Mapping[str, Any]]) -> dict[str, MasterPool]:
    """The pools as ``GET /api/v1/resource-pools`` lists them (any user may read it):
    ``agent_resource_manager.go`` fills type, slotsPerAgent, maxAgents and location (the
    AWS region, the GCP zone) from the provider."""
    found = {}
    for pool in pools:
        name = str(pool.get("name") or "")
        kind = _POOL_TYPES.get(str(pool.get("type") or ""))
        found[name] = MasterPool(
            name,
            kind,
            int(pool.get("slotsPerAgent", -1)) if kind else -1,
            int(pool.get("maxAgents") or 0) if kind else 0,
            str(pool.get("location") or ""),
        )
    return found
