"""The Compute Engine adapter over the wire: the real google-cloud-compute client (REST)
against the local Compute fake on loopback."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dynagent.core.decide import decide
from dynagent.core.fleet import InstanceState, Mark
from dynagent.core.plan import Interruption, Launch, MarkWrite, Plan, Termination
from dynagent.run.reconcile import reconcile, sweep
from dynagent.testing.gcp.compute import LocalCompute

from .helpers import ZONE, config, gcp_pool_document, managed, now, provider_for, snapshot


def launches(count: int, key: str) -> Plan:
    return Plan(
        pool="t4",
        launch_key=key,
        launch_at=now(),
        launches=tuple(Launch(reason="test") for _ in range(count)),
    )


def test_launch_labels_gpus_and_boots_the_agent(compute: LocalCompute) -> None:
    provider = provider_for(compute, spot=True)
    result = provider.launch(launches(2, "t4:1042"))

    assert result.started == ("det-agent-t4-1042-0", "det-agent-t4-1042-1")
    assert result.error is None
    vm = compute.instance("det-agent-t4-1042-0")
    assert vm["labels"]["managed-by"] == "dynagent-test"
    assert vm["labels"]["dynagent-pool"] == "t4"
    assert vm["labels"]["dynagent-launch-key"] == "t4-1042"
    (gpu,) = vm["guestAccelerators"]
    assert gpu["acceleratorType"].endswith(f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4")
    assert gpu["acceleratorCount"] == 4
    assert vm["scheduling"]["provisioningModel"] == "SPOT"
    assert vm["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert vm["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert vm["serviceAccounts"][0]["email"].startswith("agent@")
    assert vm["tags"]["items"] == ["det-agent"]
    (script,) = [i["value"] for i in vm["metadata"]["items"] if i["key"] == "startup-script"]
    assert script.index("echo hello") < script.index("docker run")
    assert "DET_MASTER_HOST=10.128.0.2" in script and "DET_RESOURCE_POOL=t4" in script
    # The agent id is the VM's name: the snapshot's agents then name their VMs.
    assert "AGENT_ID=$(curl" in script and "computeMetadata/v1/instance/name" in script
    assert '-e DET_AGENT_ID="$AGENT_ID"' in script


def test_a_replayed_snapshot_never_creates_a_second_vm(compute: LocalCompute) -> None:
    provider = provider_for(compute)
    first = provider.launch(launches(2, "t4:7"))
    again = provider.launch(launches(2, "t4:7"))  # same names, same request ids
    fewer = provider.launch(launches(1, "t4:7"))
    assert first.started == again.started
    assert fewer.started == first.started[:1]
    assert len(managed(compute)) == 2


def test_an_operation_that_ends_in_error_is_a_launch_error(compute: LocalCompute) -> None:
    provider = provider_for(compute)
    compute.fail_next_inserts(1, "ZONE_RESOURCE_POOL_EXHAUSTED", "no T4s left in the zone")
    result = provider.launch(launches(2, "t4:1"))
    assert result.error and "ZONE_RESOURCE_POOL_EXHAUSTED" in result.error
    assert len(result.started) == 1
    assert len(managed(compute)) == 1


def test_launch_waits_on_operations_through_the_right_endpoint(compute: LocalCompute) -> None:
    provider = provider_for(compute)
    compute.hold_operations(polls=2)
    result = provider.launch(launches(1, "t4:3"))
    assert result.error is None
    assert compute.call_names().count("zoneOperations.wait") >= 2


def test_base_config_merges_under_ours_and_a_bad_field_is_reported(
    compute: LocalCompute,
) -> None:
    extra = {"labels": {"team": "vision"}, "deletionProtection": False,
             "scheduling": {"onHostMaintenance": "MIGRATE"}}  # fmt: skip
    provider = provider_for(compute, base_config=extra)
    provider.launch(launches(1, "t4:1"))
    vm = compute.instance("det-agent-t4-1-0")
    assert vm["labels"]["team"] == "vision"
    assert vm["labels"]["managed-by"] == "dynagent-test"
    assert vm["scheduling"]["onHostMaintenance"] == "TERMINATE"  # ours wins

    typo = provider_for(compute, base_config={"dissks": []})
    result = typo.launch(launches(1, "t4:2"))
    assert result.error and "dissks" in result.error


def test_base_config_lists_merge_as_determined_merges_them(compute: LocalCompute) -> None:
    # The docs' "attach a disk to each dynamic agent": base_config lists a data disk.
    data_disk = {"autoDelete": True, "initializeParams": {"diskSizeGb": "500"}}
    extra = {
        "disks": [data_disk],
        "tags": {"items": ["from-base"]},
        "metadata": {"items": [{"key": "enable-oslogin", "value": "TRUE"}]},
    }
    provider = provider_for(
        compute, base_config=extra, labels={"team": "vision"}, boot_disk_type="pd-ssd"
    )
    provider.launch(launches(1, "t4:1"))
    vm = compute.instance("det-agent-t4-1-0")
    boot, attached = vm["disks"]
    assert boot["boot"] is True and attached["diskSizeGb"] == "500"
    assert vm["tags"]["items"] == ["from-base", "det-agent"]
    keys = [item["key"] for item in vm["metadata"]["items"]]
    assert keys == ["startup-script", "enable-oslogin"]
    assert vm["labels"]["team"] == "vision" and vm["labels"]["managed-by"] == "dynagent-test"
    # provconfig GetCPUPlatform: Broadwell for n1 machines.
    assert vm["minCpuPlatform"] == "Intel Broadwell"


def test_observe_reads_every_page_states_and_marks(compute: LocalCompute) -> None:
    provider = provider_for(compute)
    names = provider.launch(launches(5, "t4:1")).started
    compute.set_status(names[0], "TERMINATED")  # preempted
    when = now() - timedelta(minutes=4)
    provider.observe()
    provider.write_marks((MarkWrite(Mark.IDLE_SINCE, when, (names[1],), "test"),))

    provider.page_size = 2
    compute.clear_calls()
    fleet = provider.observe()
    assert compute.call_names().count("instances.list") == 3
    by_name = {i.id: i for i in fleet.instances}
    assert set(by_name) == set(names)
    assert by_name[names[0]].state is InstanceState.STOPPED
    assert by_name[names[1]].idle_since == when.replace(microsecond=0)


def test_marks_are_one_set_labels_per_vm_and_survive_a_stale_fingerprint(
    compute: LocalCompute,
) -> None:
    provider = provider_for(compute)
    names = provider.launch(launches(2, "t4:1")).started
    provider.observe()
    # Someone relabels a VM between our read and our write: the fingerprint is stale.
    other = provider_for(compute)
    other.observe()
    other.write_marks((MarkWrite(Mark.REGISTERED, now(), names[:1], "test"),))

    compute.clear_calls()
    when = now()
    provider.write_marks(
        (
            MarkWrite(Mark.REGISTERED, when, names, "agent connected"),
            MarkWrite(Mark.IDLE_SINCE, when, names, "agent idle"),
        )
    )
    assert compute.call_names().count("instances.setLabels") == 3  # one retried
    for name in names:
        labels = compute.instance(name)["labels"]
        assert labels["dynagent-idle-since"] == str(int(when.timestamp()))
        assert labels["managed-by"] == "dynagent-test"
    provider.observe()
    provider.write_marks((MarkWrite(Mark.IDLE_SINCE, None, names, "agent busy"),))
    assert all("dynagent-idle-since" not in compute.instance(n)["labels"] for n in names)


def test_terminate_deletes_and_not_found_is_done(compute: LocalCompute) -> None:
    provider = provider_for(compute)
    names = provider.launch(launches(2, "t4:1")).started
    provider.terminate(tuple(Termination(n, "test") for n in names))
    provider.terminate((Termination("det-agent-never-was", "gone"),))
    assert managed(compute) == []


def test_reconcile_never_touches_a_vm_without_the_managed_pair(compute: LocalCompute) -> None:
    mine = provider_for(compute)
    theirs = provider_for(compute, label_value="someone-else")
    (lookalike,) = theirs.launch(launches(1, "t4:1")).started
    compute.set_status(lookalike, "TERMINATED")
    cfg = config(gcp_pool_document(max_instances=0))
    pool = cfg.pool("t4")
    outcome = reconcile(pool, mine, snapshot(1, pool="t4", agents=[(lookalike, 4, 0)]), now())
    assert outcome.plan is not None and outcome.plan.changes_nothing
    vm = compute.instance(lookalike)
    assert vm["status"] == "TERMINATED"
    assert "dynagent-registered" not in vm["labels"]


PREEMPTIBLE_T4 = {"machine_type": "n1-standard-32", "gpu_type": "nvidia-tesla-t4", "gpu_num": 4,
                  "preemptible": True}  # fmt: skip


def test_the_sweep_deletes_a_preempted_vm_as_interrupted_and_nothing_else(
    compute: LocalCompute,
) -> None:
    # Legacy preemptible VMs stop when preempted (Spot VMs of ours are deleted by GCE).
    cfg = config(gcp_pool_document(instance_type=PREEMPTIBLE_T4))
    provider = provider_for(compute, cfg)
    names = provider.launch(launches(2, "t4:1")).started
    theirs = provider_for(compute, label_value="someone-else", instance_type=PREEMPTIBLE_T4)
    (lookalike,) = theirs.launch(launches(1, "t4:9")).started
    assert compute.preempt(names[0]) is False  # stopped, not deleted
    compute.preempt(lookalike)
    compute.clear_calls()

    (outcome,) = sweep(cfg, lambda _: provider, now())

    assert outcome.plan is not None
    (termination,) = outcome.plan.terminations
    assert termination == Termination(
        names[0], "instance is stopped: preempted by the cloud", "interrupted"
    )
    assert outcome.plan.interruptions == (Interruption(names[0], "preempted"),)
    assert compute.call_names().count("instances.delete") == 1
    assert {vm["name"]: vm["status"] for vm in compute.instances()} == {
        names[1]: compute.instance(names[1])["status"],
        lookalike: "TERMINATED",
    }
    assert compute.instance(names[1])["status"] not in ("STOPPING", "TERMINATED")


def test_a_preempted_spot_vm_of_ours_is_gone_and_a_standard_one_is_never_preempted(
    compute: LocalCompute,
) -> None:
    spot = provider_for(compute, spot=True)
    (name,) = spot.launch(launches(1, "t4:1")).started
    assert compute.preempt(name) is True  # termination action DELETE
    assert spot.observe().instances == ()
    standard = provider_for(compute)
    (other,) = standard.launch(launches(1, "t4:2")).started
    with pytest.raises(ValueError, match="never preempted"):
        compute.preempt(other)


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("suffix", ["", ":repack1"])  # a re-pack round's key is longer
def test_names_and_labels_stay_valid_for_long_pools_and_sweep_keys(
    compute: LocalCompute, count: int, suffix: str
) -> None:
    cfg = config(gcp_pool_document(name="a-pool-with-a-rather-long-name-for-labels"))
    provider = provider_for(compute, cfg)
    key = "a-pool-with-a-rather-long-name-for-labels:sweep:20261121T2300" + suffix
    plan = Plan(
        pool="a-pool-with-a-rather-long-name-for-labels",
        launch_key=key,
        launch_at=now(),
        launches=tuple(Launch(reason="min") for _ in range(count)),
    )
    result = provider.launch(plan)
    assert result.error is None and len(result.started) == count
    assert all(len(name) <= 63 for name in result.started)
    labels = {vm["labels"]["dynagent-launch-key"] for vm in managed(compute, plan.pool)}
    (label,) = labels
    assert len(label) <= 63 and label.startswith("a-pool-with-a-rather-long-name-for-labels-")


def test_every_status_the_api_lists_is_mapped() -> None:
    import json
    from pathlib import Path

    import googleapiclient

    from dynagent.gcp.labels import INSTANCE_STATES

    documents = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"
    schema = json.loads((documents / "compute.v1.json").read_text())["schemas"]["Instance"]
    assert set(schema["properties"]["status"]["enum"]) == set(INSTANCE_STATES)


def test_rate_limits_and_unavailability_are_retried_within_the_pass(
    compute: LocalCompute,
) -> None:
    """Found by the reliability suite (R6): a pass makes a dozen calls, so with 429s and
    503s about it rarely got through them all; each failure cost a Pub/Sub redelivery,
    and after 5 the snapshot was forwarded to the dead letters without a reason."""
    compute.fail_calls(429, every=3)
    compute.fail_calls(503, every=2, methods=["instances.insert", "zoneOperations.wait"])
    slept: list[float] = []
    provider = provider_for(compute)
    provider.sleep = slept.append
    plan = decide(provider.pool, provider.observe(), snapshot(1, "t4", [("a", 4), ("b", 4)]), now())
    result = provider.launch(plan)
    assert result.error is None and len(result.started) == 2
    assert len(compute.created()) == 2
    assert compute.faults_served() > 0 and slept
