"""The API's messages as the master's grpc-gateway writes them (``JSONPb{EmitDefaults:
true}``: see master.py's docstring): agents with their slots, devices and containers,
resource pools, allocations, jobs, commands, notebooks, shells, TensorBoards, experiments
and the printed master config, each made from the master's state."""

from __future__ import annotations

import hashlib
import uuid

from dynagent.testing.determined.admission import WORKSPACE_ID
from dynagent.testing.determined.gateway import JsonObject, timestamp
from dynagent.testing.determined.master_config import (
    DEFAULT_PRIORITY,
    VERSION,
    ProviderConfig,
    default_resource_manager,
    parse_go_duration,
    pool_fields,
    printable_config,
)
from dynagent.testing.determined.state import (
    DEVICE_TYPES,
    JOB_TYPES,
    Agent,
    Experiment,
    MasterState,
    Pool,
    Task,
)

# -- agents, their slots and devices ---------------------------------------------------


def _device_json(agent: Agent, device: int) -> JsonObject:
    digest = hashlib.sha256(f"{agent.id}/{device}".encode()).digest()
    return {
        "id": device,
        "brand": agent.brand,
        "uuid": f"GPU-{uuid.UUID(bytes=digest[:16])}",
        "type": DEVICE_TYPES[agent.slot_type],
    }


def _container_json(agent: Agent, container_id: str) -> JsonObject:
    devices = [d for d, owner in enumerate(agent.owners) if owner == container_id]
    return {
        "parent": "",
        "id": container_id,
        "state": "STATE_RUNNING",
        "devices": [_device_json(agent, d) for d in devices],
        "permissionDenied": False,
    }


def slot_json(agent: Agent, device: int) -> JsonObject:
    owner = agent.owners[device]
    return {
        "id": str(device),
        "device": _device_json(agent, device),
        "enabled": agent.enabled,
        "container": None if owner is None else _container_json(agent, owner),
        "draining": agent.draining,
    }


def agent_json(
    agent: Agent, exclude_slots: bool = False, exclude_containers: bool = False
) -> JsonObject:
    slots = {f"/agents/{agent.id}/slots/{d}": slot_json(agent, d) for d in range(agent.slots)}
    containers = {
        owner: _container_json(agent, owner) for owner in agent.owners if owner is not None
    }
    return {
        "id": agent.id,
        "registeredTime": timestamp(agent.registered),
        "slots": {} if exclude_slots else dict(sorted(slots.items())),
        "containers": {} if exclude_containers else dict(sorted(containers.items())),
        "addresses": [agent.address],
        "enabled": agent.enabled,
        "draining": agent.draining,
        "version": VERSION,
        "resourcePools": [agent.pool],
        "slotStats": _slot_stats(list(slots.values())),
    }


def _slot_stats(slots: list[JsonObject]) -> JsonObject:
    """model.SummarizeSlots: per device type and per brand."""
    by_type: dict[str, JsonObject] = {}
    by_brand: dict[str, JsonObject] = {}
    for slot in slots:
        device = slot["device"]
        for stats, key in ((by_type, device["type"]), (by_brand, device["brand"])):
            entry = stats.setdefault(key, {"states": {}, "draining": 0, "disabled": 0, "total": 0})
            entry["total"] += 1
            if not slot["enabled"]:
                entry["disabled"] += 1
            if slot["draining"]:
                entry["draining"] += 1
            if slot["container"] is not None:
                state = slot["container"]["state"]
                entry["states"][state] = entry["states"].get(state, 0) + 1
    return {
        "typeStats": dict(sorted(by_type.items())),
        "brandStats": dict(sorted(by_brand.items())),
    }


# -- resource pools --------------------------------------------------------------------


def pool_json(state: MasterState, pool: Pool) -> JsonObject:
    agents = [a for a in state.agents.values() if a.pool == pool.name]
    available = used = aux_capacity = aux_running = 0
    for agent in agents:
        used += agent.used()
        aux_running += len(agent.zero_slot)
        if agent.draining:
            available += agent.used()
            aux_capacity += len(agent.zero_slot)
        elif agent.enabled:
            available += agent.slots
            aux_capacity += pool.max_aux_containers_per_agent
    provider = pool.provider
    device_types = {a.slot_type for a in agents if a.slots and (a.enabled or a.draining)}
    if provider is not None:
        slot_type = provider.slot_type
    elif device_types:
        slot_type = "TYPE_CUDA" if "cuda" in device_types else "TYPE_CPU"
    else:
        slot_type = "TYPE_UNSPECIFIED"
    queued = scheduled = 0
    for task in state.visible_tasks(pool.name):
        if task.placed:
            scheduled += 1
        else:
            queued += 1
    return {
        "name": pool.name,
        "description": pool.description,
        "type": f"RESOURCE_POOL_TYPE_{pool.type}",
        "numAgents": len(agents),
        "slotsAvailable": available,
        "slotsUsed": used,
        "slotType": slot_type,
        "auxContainerCapacity": aux_capacity,
        "auxContainersRunning": aux_running,
        "defaultComputePool": pool.name == state.default_compute_pool,
        "defaultAuxPool": pool.name == state.default_aux_pool,
        "preemptible": pool.preemptible,
        "minAgents": pool.min_agents,
        "maxAgents": pool.max_agents,
        "slotsPerAgent": pool.slots_per_agent,
        "auxContainerCapacityPerAgent": pool.max_aux_containers_per_agent,
        "schedulerType": "SCHEDULER_TYPE_PRIORITY",
        "schedulerFittingPolicy": f"FITTING_POLICY_{pool.fitting_policy.upper()}",
        "location": pool.location,
        "instanceType": pool.instance_type,
        **_provider_summary(provider),
        "details": {
            "aws": _aws_detail(provider) if provider and provider.type == "aws" else None,
            "gcp": _gcp_detail(provider) if provider and provider.type == "gcp" else None,
            "priorityScheduler": {
                "preemption": False,
                "defaultPriority": DEFAULT_PRIORITY,
                "k8Priorities": [],
            },
        },
        "accelerator": provider.accelerator if provider else "",
        "stats": {"queuedCount": queued, "scheduledCount": scheduled},
        "resourceManagerMetadata": {},
        "clusterName": state.local_cluster_name,
    }


def _seconds(duration: str) -> float:
    return parse_go_duration(duration) / 1e9


def _provider_summary(provider: ProviderConfig | None) -> JsonObject:
    """agent_resource_manager.go createResourcePoolSummary: a pool's provider fields (the
    printable config's: scripts masked); a static pool's are empty."""
    if provider is None:
        fields: JsonObject = {}
    else:
        fields = printable_config(True, "", {}, [pool_fields("", "", provider)])
        fields = fields["resource_pools"][0]["provider"]
    return {
        "imageId": provider.image_id if provider else "",
        "masterUrl": fields.get("master_url", ""),
        "masterCertName": fields.get("master_cert_name", ""),
        "startupScript": fields.get("startup_script", ""),
        "containerStartupScript": fields.get("container_startup_script", ""),
        "agentDockerNetwork": fields.get("agent_docker_network", ""),
        "agentDockerRuntime": fields.get("agent_docker_runtime", ""),
        "agentDockerImage": fields.get("agent_docker_image", ""),
        "agentFluentImage": "",
        "maxIdleAgentPeriod": _seconds(fields.get("max_idle_agent_period", "0s")),
        "maxAgentStartingPeriod": _seconds(fields.get("max_agent_starting_period", "0s")),
    }


def _aws_detail(provider: ProviderConfig) -> JsonObject:
    aws = provider.fields
    network = aws["network_interface"]
    return {
        "region": aws["region"],
        "rootVolumeSize": aws["root_volume_size"],
        "imageId": aws["image_id"],
        "tagKey": aws["tag_key"],
        "tagValue": aws["tag_value"],
        "instanceName": aws["instance_name"],
        "sshKeyName": aws["ssh_key_name"],
        "publicIp": network["public_ip"],
        "subnetId": network["subnet_id"],
        "securityGroupId": network["security_group_id"],
        "iamInstanceProfileArn": aws["iam_instance_profile_arn"],
        "instanceType": aws["instance_type"],
        "logGroup": aws["log_group"],
        "logStream": aws["log_stream"],
        "spotEnabled": aws["spot"],
        "spotMaxPrice": aws["spot_max_price"],
        "customTags": [
            {"key": tag.get("key", ""), "value": tag.get("value", "")}
            for tag in aws["custom_tags"] or []
        ],
    }


def _gcp_detail(provider: ProviderConfig) -> JsonObject:
    gcp = provider.fields
    network, account, kind = gcp["network_interface"], gcp["service_account"], gcp["instance_type"]
    return {
        "project": gcp["project"],
        "zone": gcp["zone"],
        "bootDiskSize": gcp["boot_disk_size"],
        "bootDiskSourceImage": gcp["boot_disk_source_image"],
        "labelKey": gcp["label_key"],
        "labelValue": gcp["label_value"],
        "namePrefix": gcp["name_prefix"],
        "network": network["network"],
        "subnetwork": network["subnetwork"],
        "externalIp": network["external_ip"],
        "networkTags": list(gcp["network_tags"] or []),
        "serviceAccountEmail": account["email"],
        "serviceAccountScopes": list(account["scopes"] or []),
        "machineType": kind["machine_type"],
        "gpuType": kind["gpu_type"],
        "gpuNum": kind["gpu_num"],
        "preemptible": kind["preemptible"],
        "operationTimeoutPeriod": _seconds(gcp["operation_timeout_period"]),
    }


# -- tasks and jobs --------------------------------------------------------------------


def allocation_json(state: MasterState, task: Task) -> JsonObject:
    resources = []
    for res in task.resources:
        agent = state.agents[res.agent_id]
        resources.append(
            {
                "resourcesId": res.container_id,
                "resourcesType": "docker-container",
                "allocationId": task.allocation_id,
                "agentDevices": {
                    res.agent_id: {"devices": [_device_json(agent, d) for d in res.devices]}
                },
                "containerId": res.container_id,
                "started": {
                    "addresses": [],
                    "nativeResourcesId": hashlib.sha256(res.container_id.encode()).hexdigest(),
                },
            }
        )
    out: JsonObject = {
        "taskId": task.task_id,
        "allocationId": task.allocation_id,
        "name": task.name,
        "registeredTime": timestamp(task.submitted),
        "resourcePool": task.pool,
        "slotsNeeded": task.slots,
        "resources": resources,
        "schedulerType": "priority",
    }
    if task.job_id is not None:  # proto3 optional: only tasks of a job have one
        out["priority"] = task.priority
    out["proxyPorts"] = []
    return out


def job_json(task: Task, jobs_ahead: int) -> JsonObject:
    return {
        "summary": {
            "state": "STATE_SCHEDULED" if task.placed else "STATE_QUEUED",
            "jobsAhead": jobs_ahead,
        },
        "type": JOB_TYPES[task.type],
        "submissionTime": timestamp(task.submitted),
        "username": task.username,
        "userId": task.user_id,
        "resourcePool": task.pool,
        "isPreemptible": task.type == "TRIAL",
        "priority": task.priority,
        "weight": 1,
        "entityId": task.entity_id,
        "jobId": task.job_id,
        "requestedSlots": task.slots,
        "allocatedSlots": task.slots if task.placed else 0,
        "name": task.job_name or task.name,
        "progress": 0,
        "workspaceId": 1,
    }


# -- commands, notebooks, shells, TensorBoards, experiments ----------------------------


def ntsc_json(task: Task, type: str) -> JsonObject:
    """command.go ToV1Command/Notebook/Shell/Tensorboard, for a task not yet placed."""
    out: JsonObject = {
        "id": task.task_id,
        "description": task.name,
        "state": "STATE_RUNNING" if task.placed else "STATE_QUEUED",
        "startTime": timestamp(task.submitted),
        "container": None,
        "displayName": "",
        "userId": task.user_id,
        "username": task.username,
        "resourcePool": task.pool,
        "exitStatus": "",
        "jobId": task.job_id,
        "workspaceId": WORKSPACE_ID,
    }
    if type == "NOTEBOOK":
        out["serviceAddress"] = f"/proxy/{task.task_id}/?token="
    elif type == "TENSORBOARD":
        out["serviceAddress"] = f"/proxy/{task.task_id}/"
    elif type == "SHELL":
        out |= {"privateKey": "", "publicKey": "", "addresses": [], "agentUserGroup": None}
    return out


def empty_ntsc(type: str) -> JsonObject:
    """A Notebook (or command, shell, TensorBoard) message left unset, as JSONPb writes it."""
    out: JsonObject = {
        "id": "",
        "description": "",
        "state": "STATE_UNSPECIFIED",
        "startTime": None,
        "container": None,
        "displayName": "",
        "userId": 0,
        "username": "",
        "resourcePool": "",
        "exitStatus": "",
        "jobId": "",
        "workspaceId": 0,
    }
    if type in ("NOTEBOOK", "TENSORBOARD"):
        out["serviceAddress"] = ""
    return out


def empty_experiment() -> JsonObject:
    """experimentv1.Experiment{} as JSONPb writes it (the validate-only answer)."""
    return {
        "id": 0,
        "description": "",
        "labels": [],
        "startTime": None,
        "endTime": None,
        "state": "STATE_UNSPECIFIED",
        "archived": False,
        "numTrials": 0,
        "trialIds": [],
        "displayName": "",
        "userId": 0,
        "username": "",
        "resourcePool": "",
        "searcherType": "",
        "searcherMetric": "",
        "hyperparameters": None,
        "name": "",
        "notes": "",
        "jobId": "",
        "forkedFrom": None,
        "progress": None,
        "projectId": 1,
        "projectName": "Uncategorized",
        "workspaceId": WORKSPACE_ID,
        "workspaceName": "Uncategorized",
        "parentArchived": False,
        "config": None,
        "originalConfig": "",
        "projectOwnerId": 1,
        "checkpointSize": "0",
        "checkpointCount": 0,
        "unmanaged": False,
    }


def experiment_json(experiment: Experiment) -> JsonObject:
    searcher = experiment.config.get("searcher") or {}
    return {
        **empty_experiment(),
        "id": experiment.id,
        "description": str(experiment.config.get("description") or ""),
        "labels": list(experiment.config.get("labels") or []),
        "startTime": timestamp(experiment.started),
        "state": "STATE_ACTIVE" if experiment.active else "STATE_PAUSED",
        "numTrials": len(experiment.trial_ids),
        "trialIds": list(experiment.trial_ids),
        "userId": experiment.user.id,
        "username": experiment.user.username,
        "resourcePool": experiment.pool,
        "searcherType": str(searcher.get("name") or ""),
        "searcherMetric": str(searcher.get("metric") or ""),
        "hyperparameters": experiment.config.get("hyperparameters"),
        "name": experiment.name,
        "jobId": experiment.job_id,
        "config": experiment.config,
        "originalConfig": experiment.original_config,
    }


# -- the master's config ---------------------------------------------------------------


def printable_master_config(state: MasterState) -> JsonObject:
    config = state.config
    manager = dict(config.resource_manager) if config else default_resource_manager()
    manager["default_compute_resource_pool"] = state.default_compute_pool
    manager["default_aux_resource_pool"] = state.default_aux_pool
    return printable_config(
        state.launch_error,
        state.cluster_name_now(),
        manager,
        [p.config_fields for p in state.pools.values()],
    )
