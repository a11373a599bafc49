"""A stock master's admission: the rules (determined_admission) and the local master using
them, through launch() and its HTTP API. Determined's CLI is in test_det_admission.py;
these need no Determined client, so they run in both environments."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from dynagent.testing.determined.admission import (
    CURRENT_SLOTS_EXCEEDED,
    PoolState,
    Refusal,
    aws_region_resolves,
    capacity,
    listing_failure,
    resolve_resources,
    single_node_fulfillable,
    tasks_to_prune,
)
from dynagent.testing.determined.master import DEFAULT_PASSWORD, ApiError, LocalDetermined
from dynagent.testing.determined.master_config import (
    MasterConfigError,
    ProviderConfig,
    read_master_config,
)
from tests.determined.fragment import FRAGMENT

UNFULFILLABLE = (
    "failed to prepare launch params: validating resources: "
    "request unfulfillable, please try requesting less slots"
)
EXCEEDS = "invalid resource configuration: slots requested exceeds cluster capacity"


def provider(text: str = FRAGMENT) -> ProviderConfig:
    found = read_master_config(text).pools[0].provider
    assert found is not None
    return found


def gcp_provider(gpu_num: int = 4, max_instances: int = 5) -> ProviderConfig:
    pool = {
        "pool_name": "t4",
        "provider": {
            "type": "gcp",
            "project": "p",
            "zone": "z",
            "max_instances": max_instances,
            "instance_type": {"gpu_type": "nvidia-tesla-a100", "gpu_num": gpu_num},
        },
    }
    found = read_master_config({"resource_pools": [pool]}).pools[0].provider
    assert found is not None
    return found


def resolve(
    pools: dict[str, PoolState], pool: str, slots: int, single_node: bool, launch_error: bool
) -> tuple[str, tuple[str, ...]]:
    return resolve_resources(
        pools,
        pool,
        slots,
        single_node,
        default_compute="default",
        default_aux="default",
        launch_error=launch_error,
    )


# -- the rules ----------------------------------------------------------------------


def test_single_node_work_fits_one_instance_of_a_provider_whatever_the_agents() -> None:
    with_provider = PoolState("a100", provider(), agent_slots=(16,))
    assert single_node_fulfillable(with_provider, 8)
    assert not single_node_fulfillable(with_provider, 9)  # the 16-slot agent does not count
    static = PoolState("a100", None, agent_slots=(2, 4))
    assert single_node_fulfillable(static, 4) and not single_node_fulfillable(static, 5)
    assert not single_node_fulfillable(PoolState("a100", None), 1)
    # A CPU instance type has no slots per instance: the agents decide again.
    cpu = provider(FRAGMENT.replace("p4d.24xlarge", "c5.xlarge"))
    assert cpu.slots_per_instance == 0
    assert single_node_fulfillable(PoolState("a100", cpu, agent_slots=(2,)), 2)


def test_capacity_is_the_agents_without_a_provider_and_max_instances_with_one() -> None:
    assert capacity(PoolState("a", None, agent_slots=(8, 8, 4))) == 20
    assert capacity(PoolState("a", provider(), agent_slots=(8,))) == 4 * 8
    assert capacity(PoolState("a", gcp_provider(gpu_num=4, max_instances=3))) == 12


@pytest.mark.parametrize("launch_error", [True, False])
def test_over_capacity_is_refused_or_warned_by_launch_error(launch_error: bool) -> None:
    pools = {"a100": PoolState("a100", provider())}
    assert resolve(pools, "a100", 32, False, launch_error) == ("a100", ())
    if launch_error:
        with pytest.raises(Refusal) as caught:
            resolve(pools, "a100", 33, False, launch_error)
        assert (caught.value.message, caught.value.code) == (
            "slots requested exceeds cluster capacity",
            None,  # a plain Go error
        )
    else:
        assert resolve(pools, "a100", 33, False, launch_error) == (
            "a100",
            (CURRENT_SLOTS_EXCEEDED,),
        )


def test_unfulfillable_single_node_work_is_refused_whatever_launch_error() -> None:
    pools = {"a100": PoolState("a100", None)}
    for launch_error in (True, False):
        with pytest.raises(Refusal) as caught:
            resolve(pools, "a100", 1, True, launch_error)
        assert caught.value.message == (
            "validating resources: request unfulfillable, please try requesting less slots"
        )
    # No slots: admitted without a look at the pool.
    assert resolve(pools, "a100", 0, True, True) == ("a100", ())


def test_pool_resolution() -> None:
    pools = {"default": PoolState("default", None, (8,)), "a100": PoolState("a100", provider())}
    assert resolve(pools, "", 1, True, True) == ("default", ())
    with pytest.raises(Refusal) as caught:
        resolve(pools, "h100", 1, True, True)
    assert (caught.value.message, caught.value.code) == (
        "resource pool h100 does not exist or is not available to workspace id 1",
        3,
    )
    # A default compute pool that names no pool fails in ValidateResources.
    with pytest.raises(Refusal) as caught:
        resolve({"a100": pools["a100"]}, "", 1, True, True)
    assert caught.value.message == (
        "validating resources: validating request for (default, 1): "
        "cannot find resource pool default"
    )
    with pytest.raises(Refusal) as caught:
        resolve_resources(pools, "", 0, True, default_compute="", default_aux="", launch_error=True)
    assert caught.value.message == "defaulting to aux pool: no default resource pool set"


@pytest.mark.parametrize(
    ("region", "resolves"),
    [
        ("us-west-2", True),
        ("a", True),
        ("scaled by dynagent", False),
        ("us-west-2-", False),
        ("-us", False),
        ("", False),
        ("us_west_2", False),
    ],
)
def test_aws_region_check(region: str, resolves: bool) -> None:
    assert aws_region_resolves(region) is resolves


def test_pruning_needs_a_provider_that_lists() -> None:
    pending = [("small", 8), ("fits", 16), ("large", 17)]
    gcp = gcp_provider(gpu_num=8)
    assert listing_failure(gcp) is None
    assert tasks_to_prune(pending, gcp, listed_instances=2) == ["large"]
    assert tasks_to_prune(pending, gcp, listed_instances=0) == ["small", "fits", "large"]
    fragment = provider()
    failure = listing_failure(fragment)
    assert failure is not None and "scaled by dynagent" in failure
    assert tasks_to_prune(pending, fragment, listed_instances=0) == []
    listing = provider(FRAGMENT.replace("scaled by dynagent", "us-west-2"))
    assert tasks_to_prune(pending, listing, listed_instances=1) == ["fits", "large"]


# -- the local master ---------------------------------------------------------------


def test_launch_admits_into_a_pool_with_a_provider_and_no_agent(master: LocalDetermined) -> None:
    master.configure(FRAGMENT)
    notebook = master.launch("NOTEBOOK", pool="a100")
    eight = master.launch("COMMAND", 8, "a100")
    trial = master.launch("TRIAL", 32, "a100")
    assert notebook.warnings == eight.warnings == trial.warnings == ()
    assert [master.task_state(t.task_id) for t in (notebook, eight, trial)] == ["QUEUED"] * 3
    with pytest.raises(ApiError) as caught:
        master.launch("SHELL", 9, "a100")
    assert (caught.value.code, caught.value.message) == (3, UNFULFILLABLE)
    with pytest.raises(ApiError) as caught:
        master.launch("TRIAL", 33, "a100")
    assert (caught.value.code, caught.value.http_status, caught.value.message) == (
        13,
        500,
        EXCEEDS,
    )
    # A single-node trial is held to one instance.
    with pytest.raises(ApiError) as caught:
        master.launch("TRIAL", 9, "a100", single_node=True)
    assert caught.value.message == (
        "invalid resource configuration: validating resources: "
        "request unfulfillable, please try requesting less slots"
    )


def test_a_stock_pool_refuses_until_an_agent_connects(master: LocalDetermined) -> None:
    master.configure("resource_pools: [{pool_name: a100}]")
    with pytest.raises(ApiError) as caught:
        master.launch("COMMAND", 1, "a100")
    assert caught.value.message == UNFULFILLABLE
    with pytest.raises(ApiError) as caught:
        master.launch("TRIAL", 16, "a100")
    assert caught.value.message == EXCEEDS
    master.add_agent("gpu-1", "a100", slots=8)
    assert master.launch("COMMAND", 8, "a100").warnings == ()
    with pytest.raises(ApiError):
        master.launch("TRIAL", 9, "a100")  # capacity: the one agent's 8 slots


def test_launch_error_false_admits_over_capacity_with_the_warning(
    master: LocalDetermined,
) -> None:
    master.configure("{launch_error: false, resource_pools: [{pool_name: a100}]}")
    assert master.launch("TRIAL", 16, "a100").warnings == (CURRENT_SLOTS_EXCEEDED,)
    with pytest.raises(ApiError) as caught:
        master.launch("NOTEBOOK", pool="a100")
    assert caught.value.message == UNFULFILLABLE


TWO_POOLS = FRAGMENT + (
    "  - pool_name: t4\n"
    "    provider: {type: gcp, project: p, zone: z, instance_type: {gpu_num: 4}}\n"
)


def test_a_launch_error_prunes_what_the_listed_instances_cannot_hold(
    master: LocalDetermined,
) -> None:
    master.configure(TWO_POOLS)
    small = master.launch("COMMAND", 4, "t4")
    large = master.launch("TRIAL", 8, "t4")
    kept = master.launch("TRIAL", 16, "a100")
    master.provisioner_launch_error("t4", "InsufficientInstanceCapacity", listed_instances=1)
    assert master.task_state(large.task_id) == "QUEUED"  # until the next scheduler tick
    assert master.schedule() == []  # no agents: nothing placed
    assert master.task_state(large.task_id) == "ERROR"
    assert master.task_error(large.task_id) == (
        "invalid resources request: InsufficientInstanceCapacity"
    )
    assert master.task_state(small.task_id) == master.task_state(kept.task_id) == "QUEUED"
    master.provisioner_launch_error("t4", None)
    later = master.launch("TRIAL", 8, "t4")
    master.schedule()
    assert master.task_state(later.task_id) == "QUEUED"


def test_no_launch_error_where_determined_never_launches(master: LocalDetermined) -> None:
    master.configure(TWO_POOLS)
    with pytest.raises(ValueError, match="cannot list instances") as refused:
        master.provisioner_launch_error("a100", "InsufficientInstanceCapacity")
    assert "scaled by dynagent" in str(refused.value)
    master.add_pool("static")
    with pytest.raises(ValueError, match="has no provider"):
        master.provisioner_launch_error("static", "InsufficientInstanceCapacity")


def test_add_pool_cloud_pools_get_a_provider_for_admission(master: LocalDetermined) -> None:
    master.add_pool("gcp-t4", "GCP", slots_per_agent=4, max_agents=2)
    assert master.launch("COMMAND", 4, "gcp-t4").warnings == ()
    with pytest.raises(ApiError):
        master.launch("COMMAND", 5, "gcp-t4")
    master.launch("TRIAL", 8, "gcp-t4")
    with pytest.raises(ApiError):
        master.launch("TRIAL", 9, "gcp-t4")
    master.add_pool("aws-a100", "AWS", slots_per_agent=8, instance_type="p4d.24xlarge")
    master.launch("TRIAL", 40, "aws-a100")  # Determined's default max_instances: 5
    # submit() queues what the master already admitted: no admission.
    assert master.task_state(master.submit("big", 64, "gcp-t4").task_id) == "QUEUED"


def test_reset_goes_back_to_the_constructor_config() -> None:
    with LocalDetermined(master_config=FRAGMENT) as master:
        master.configure("resource_pools: [{pool_name: other}]")
        master.reset()
        config = master.master_config
        assert config is not None and [p.name for p in config.pools] == ["a100"]
        assert master.launch("COMMAND", 8, "a100").warnings == ()


# -- the HTTP API -------------------------------------------------------------------


def call(
    master: LocalDetermined, method: str, path: str, user: str = "admin", **body: Any
) -> requests.Response:
    token = master.login(user)
    return requests.request(
        method,
        master.url + path,
        json=body or None,
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )


def test_launch_endpoints_answer_as_determined_handlers(master: LocalDetermined) -> None:
    master.configure(FRAGMENT)
    refused = call(master, "POST", "/api/v1/commands", config={"resources": {"slots": 9}})
    assert refused.status_code == 400
    # The default compute pool, "default", is not among the fragment's pools.
    assert refused.json() == {
        "error": {
            "code": 3,
            "reason": "InvalidArgument",
            "error": "failed to prepare launch params: validating resources: "
            "validating request for (default, 9): cannot find resource pool default",
        }
    }
    accepted = call(
        master,
        "POST",
        "/api/v1/shells",
        config={"resources": {"slots": 8, "resource_pool": "a100"}},
    )
    assert accepted.status_code == 200
    shell = accepted.json()["shell"]
    assert (shell["state"], shell["resourcePool"], shell["username"]) == (
        "STATE_QUEUED",
        "a100",
        "admin",
    )
    assert master.task_state(shell["id"]) == "QUEUED"
    assert accepted.json()["warnings"] == []
    exp = call(
        master,
        "POST",
        "/api/v1/experiments",
        config="entrypoint: x\nresources: {slots_per_trial: 40, resource_pool: a100}\n",
        activate=True,
    )
    assert (exp.status_code, exp.json()["error"]) == (
        500,
        {"code": 13, "reason": "Internal", "error": EXCEEDS},
    )
    unknown = call(
        master,
        "POST",
        "/api/v1/experiments",
        config="entrypoint: x\nresources: {resource_pool: h100}\n",
    )
    assert (unknown.status_code, unknown.json()["error"]["error"]) == (
        400,
        "invalid resource configuration: resource pool h100 does not exist or is not "
        "available to workspace id 1",
    )
    slots = call(
        master, "POST", "/api/v1/experiments", config="resources: {slots: 2, resource_pool: a100}"
    )
    assert slots.json()["error"]["error"] == (
        '<config>.resources: additionalProperties "slots" not allowed'
    )


def test_tensorboards_take_no_slot_and_need_an_experiment(master: LocalDetermined) -> None:
    master.configure(FRAGMENT + "resource_manager: {default_aux_resource_pool: a100}\n")
    missing = call(master, "POST", "/api/v1/tensorboards", experimentIds=[7])
    assert (missing.status_code, missing.json()["error"]["error"]) == (400, "no experiments found")
    trial = master.launch("TRIAL", 8, "a100")
    experiment_id = int(trial.task_id.split(".")[0])
    board = call(master, "POST", "/api/v1/tensorboards", experimentIds=[experiment_id])
    assert board.status_code == 200, board.text
    tensorboard = board.json()["tensorboard"]
    assert tensorboard["experimentIds"] == [experiment_id]
    summaries = call(master, "GET", "/api/v1/tasks").json()["allocationIdToSummary"]
    (summary,) = [s for s in summaries.values() if s["taskId"] == tensorboard["id"]]
    assert (summary["slotsNeeded"], summary["resourcePool"]) == (0, "a100")


def test_master_config_is_for_admins(master: LocalDetermined) -> None:
    master.configure(FRAGMENT)
    master.add_pool("extra")
    answer = call(master, "GET", "/api/v1/master/config")
    assert answer.status_code == 200
    config = answer.json()["config"]
    assert config["launch_error"] is True
    pools = {p["pool_name"]: p for p in config["resource_pools"]}
    assert pools["a100"]["provider"]["type"] == "aws"
    assert pools["a100"]["provider"]["max_instances"] == 4
    assert pools["a100"]["provider"]["region"] == "scaled by dynagent"
    assert pools["extra"]["provider"] is None
    master.add_user("viewer", DEFAULT_PASSWORD)
    denied = call(master, "GET", "/api/v1/master/config", user="viewer")
    assert (denied.status_code, denied.json()["error"]) == (
        403,
        {"code": 7, "reason": "PermissionDenied", "error": "user does not have permission"},
    )


def test_the_pool_list_shows_a_provider_pool_by_its_config(master: LocalDetermined) -> None:
    master.configure(FRAGMENT)
    (pool,) = call(master, "GET", "/api/v1/resource-pools").json()["resourcePools"]
    assert (pool["type"], pool["slotsPerAgent"], pool["maxAgents"], pool["minAgents"]) == (
        "RESOURCE_POOL_TYPE_AWS",
        8,
        4,
        0,
    )
    assert (pool["location"], pool["instanceType"]) == ("scaled by dynagent", "p4d.24xlarge")
    assert pool["details"]["aws"]["sshKeyName"] == "none"
    assert pool["details"]["aws"]["imageId"] == "none"
    assert pool["details"]["gcp"] is None
    assert (pool["defaultComputePool"], pool["slotType"]) == (False, "TYPE_CUDA")


def test_configure_keeps_logins_and_a_refused_config_changes_nothing(
    master: LocalDetermined,
) -> None:
    token = master.login("admin")
    master.configure(FRAGMENT)
    me = requests.get(
        master.url + "/api/v1/me", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    assert me.status_code == 200
    with pytest.raises(MasterConfigError, match="ec2 key name must be non-empty"):
        master.configure(FRAGMENT.replace("      ssh_key_name: none\n", ""))
    config = master.master_config
    assert config is not None and config.pools[0].provider is not None
    assert config.pools[0].provider.fields["ssh_key_name"] == "none"
    assert master.launch("COMMAND", 8, "a100").warnings == ()
