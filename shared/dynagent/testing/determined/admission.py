"""Whether a stock Determined 0.38 master admits work: the agent resource manager's rules.

Pure functions over a pool's provider config and the agents connected to it, each
mirroring the Go it names (``master/internal/rm/agentrm``, ``master/internal/spec_util.go``,
``master/internal/experiment.go``). ``LocalDetermined`` runs every submission through
``resolve_resources`` and prunes with ``tasks_to_prune``; the API handlers there wrap a
``Refusal`` as Determined's handlers do.

A submission is a slot count, a pool (or none, for the default) and whether it must fit
on one node: commands, notebooks, shells and TensorBoards always
(``getCommandLaunchParams`` passes ``isSingleNode: true``), an experiment's trials only
with ``resources.is_single_node: true``.

* ``ValidateResources`` (``agent_resource_manager.go``): no slots, admitted. Single-node:
  the pool's ``ValidateResources`` (``resource_pool.go``): with slots per instance (a
  provider whose instances have slots) the request must fit one instance; otherwise it
  must fit the largest agent connected to the pool, disabled ones too; else "request
  unfulfillable, please try requesting less slots". Otherwise ``CheckMaxSlotsExceeded``:
  the pool's ``CapacityCheck``, where a pool without a provider holds its agents' slots
  and a pool with one holds ``max_instances`` * slots per instance; more than that is the
  launch warning ``LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED``.
* ``ResolveResources`` (``spec_util.go``) and ``newExperiment`` (``experiment.go``): the
  warning refuses the submission ("slots requested exceeds cluster capacity") when the
  master's ``launch_error`` is true (the default), and rides in the answer's ``warnings``
  when it is false.
* ``pruneTaskList`` (``resource_pool.go``, run by ``schedulerTick``): only in a pool whose
  provisioner has a launch error; then every pending task wanting more slots than the
  instances the provider lists hold (``Provisioner.CurrentSlotCount``) fails. A
  provisioner records a launch error only after it launched, and ``Provision``
  (``provisioner/provisioner.go``) returns before launching when the provider cannot list
  its instances. The EC2 provider can never list when its ``region`` fails aws-sdk-go
  v1's region check (``aws/endpoints/v3model.go`` ``validateInputRegion``; the session's
  Validate handler then fails every request before it is sent): that is how dynagent's
  master.yaml fragment keeps a provider, for the slot counts above, whose provisioner
  can never act.

Simpler than Determined: no workspace-bound pools, no blocked nodes (log policies), and a
GCE provider is taken to list its instances (the double has no Compute Engine behind it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from dynagent.testing.determined.master_config import ProviderConfig

CURRENT_SLOTS_EXCEEDED: Final = "LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED"
UNFULFILLABLE: Final = "request unfulfillable, please try requesting less slots"
EXCEEDS_CAPACITY: Final = "slots requested exceeds cluster capacity"
NO_DEFAULT_POOL: Final = "no default resource pool set"  # rmerrors.ErrNoDefaultResourcePool
WORKSPACE_ID: Final = 1  # the only workspace modelled ("Uncategorized")
INVALID_ARGUMENT: Final = 3  # codes.InvalidArgument
# aws-sdk-go v1, aws/endpoints/v3model.go: the region an endpoint can be resolved for.
_AWS_REGION: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?")


class Refusal(Exception):
    """The master refuses a submission: its message as the Go code builds it, and its gRPC
    code when it is a status error (None: a plain Go error, codes.Unknown on the wire)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True)
class PoolState:
    """What admission reads of a pool: its provider and the slots of each agent connected
    to it (``len(slotStates)``: every agent, enabled or not)."""

    name: str
    provider: ProviderConfig | None
    agent_slots: tuple[int, ...] = ()


def aws_region_resolves(region: str) -> bool:
    """Whether aws-sdk-go v1 resolves an endpoint for the region (``validateInputRegion``:
    ``^[[:alnum:]]([[:alnum:]\\-]*[[:alnum:]])?$``)."""
    return _AWS_REGION.fullmatch(region) is not None


def listing_failure(provider: ProviderConfig) -> str | None:
    """Why the provider's ``List`` fails on every call, or None when it can list."""
    if provider.type == "aws" and not aws_region_resolves(provider.location):
        return (
            f"region {provider.location!r} fails aws-sdk-go's region check, so every EC2 "
            "call fails before it is sent (invalid region identifier format provided)"
        )
    return None


def single_node_fulfillable(pool: PoolState, slots: int) -> bool:
    """``resourcePool.ValidateResources``: one instance, or else the largest agent."""
    per_instance = pool.provider.slots_per_instance if pool.provider else 0
    if per_instance > 0:
        return per_instance >= slots
    return max(pool.agent_slots, default=0) >= slots


def capacity(pool: PoolState) -> int:
    """``resourcePool.CapacityCheck``'s slots: the agents' without a provider,
    ``max_instances`` * slots per instance with one."""
    if pool.provider is None:
        return sum(pool.agent_slots)
    return pool.provider.max_instances * pool.provider.slots_per_instance


def validate_resources(
    pools: Mapping[str, PoolState], pool: str, slots: int, single_node: bool
) -> tuple[str, ...]:
    """``ResourceManager.ValidateResources``: the launch warnings; Refusal (a plain Go
    error) when the request cannot be met or the pool does not exist."""
    if slots == 0:
        return ()
    state = pools.get(pool)
    if state is None:  # poolByName
        raise Refusal(f"validating request for ({pool}, {slots}): cannot find resource pool {pool}")
    if single_node:
        if not single_node_fulfillable(state, slots):
            raise Refusal(UNFULFILLABLE)
        return ()
    return (CURRENT_SLOTS_EXCEEDED,) if capacity(state) < slots else ()


def resolve_pool(
    pools: Iterable[str], requested: str, slots: int, default_compute: str, default_aux: str
) -> str:
    """``ResourceManager.ResolveResourcePool`` with no workspace defaults: an unnamed pool
    is the default aux pool for zero slots, else the default compute pool, taken as
    configured (a default that names no pool fails later, in validate_resources); a named
    pool must exist. Refusal with codes.InvalidArgument, as ResolveResources wraps it."""
    if not requested:
        default, kind = (default_aux, "aux") if slots == 0 else (default_compute, "compute")
        if not default:
            raise Refusal(f"defaulting to {kind} pool: {NO_DEFAULT_POOL}", INVALID_ARGUMENT)
        return default
    if requested not in set(pools):
        raise Refusal(
            f"resource pool {requested} does not exist or is not available to workspace id "
            f"{WORKSPACE_ID}",
            INVALID_ARGUMENT,
        )
    return requested


def resolve_resources(
    pools: Mapping[str, PoolState],
    requested: str,
    slots: int,
    single_node: bool,
    *,
    default_compute: str,
    default_aux: str,
    launch_error: bool,
) -> tuple[str, tuple[str, ...]]:
    """``Master.ResolveResources``: (the pool, the launch warnings), or Refusal with the
    message the handler wraps."""
    pool = resolve_pool(pools, requested, slots, default_compute, default_aux)
    try:
        warnings = validate_resources(pools, pool, slots, single_node)
    except Refusal as refusal:
        raise Refusal(f"validating resources: {refusal.message}") from None
    if launch_error and warnings:
        raise Refusal(EXCEEDS_CAPACITY)
    return pool, warnings


def current_slot_count(provider: ProviderConfig, listed_instances: int) -> int:
    """``Provisioner.CurrentSlotCount``: slots per instance * the instances listed."""
    return provider.slots_per_instance * listed_instances


def tasks_to_prune(
    pending: Iterable[tuple[str, int]], provider: ProviderConfig, listed_instances: int
) -> list[str]:
    """``resourcePool.pruneTaskList`` in a pool whose provisioner has a launch error: the
    pending (not yet scheduled) tasks, as (id, slots needed), that want more slots than
    the listed instances hold. None when the provider cannot list (CurrentSlotCount
    fails and the pool prunes nothing)."""
    if listing_failure(provider) is not None:
        return []
    count = current_slot_count(provider, listed_instances)
    return [task_id for task_id, slots in pending if slots > count]
