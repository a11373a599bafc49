"""The warm pool on the local Compute, through the real google-cloud-compute client: an
idle agent past its period is stopped (instances.stop), not deleted; the next scale-up
starts it (instances.start, no insert); a start refused for capacity creates a VM in the
pool's other zone in the same pass; a stopped VM of another boot config is deleted, never
started; the sweep keeps max_stopped."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dynagent.core.fleet import Mark
from dynagent.core.plan import MarkWrite, Stop
from dynagent.gcp.compute import GceProvider
from dynagent.run.fallback import CapacityMemory
from dynagent.run.reconcile import reconcile, sweep
from dynagent.testing.gcp.compute import LocalCompute

from .helpers import ZONE, config, gcp_pool_document, now, snapshot

ZONE_B = "us-central1-b"
WARM = {"max_stopped": 1}


class Passes:
    """Reconcile passes of pool t4, each with a provider of its own, as each function
    invocation has (one capacity memory, as a warm function keeps)."""

    def __init__(self, compute: LocalCompute, **provider: Any) -> None:
        self.compute, self.config = compute, config(gcp_pool_document(**provider))
        self.pool, self.memory, self.seq = self.config.pool("t4"), CapacityMemory(), 0

    def provider(self) -> GceProvider:
        return GceProvider(
            self.pool,
            self.compute.instances_client(),
            self.compute.zone_operations_client(),
            self.config.settings,
            sleep=lambda _: None,
            memory=self.memory,
            **self.provider_options(),
        )

    def provider_options(self) -> dict[str, Any]:
        """More of the provider's arguments, for passes that need them."""
        return {}

    def __call__(self, **fields: Any) -> Any:
        self.seq += 1
        return reconcile(self.pool, self.provider(), snapshot(self.seq, pool="t4", **fields), now())

    def idle_for(self, name: str, minutes: float) -> None:
        since = now() - timedelta(minutes=minutes)
        provider = self.provider()
        provider.observe()
        provider.write_marks((MarkWrite(Mark.IDLE_SINCE, since, (name,), "aged by the test"),))


def stopped_agent(passes: Passes) -> str:
    """A VM launched for a task, registered, idle past its period: stopped."""
    passes(pending=[("exp-1", 4)])
    (name,) = [vm["name"] for vm in passes.compute.instances()]
    passes(agents=[(name, 4, 0)])
    passes.idle_for(name, 30)
    passes(agents=[(name, 4, 0)])
    return str(name)


def test_an_idle_agent_is_stopped_then_started_for_the_next_work(compute: LocalCompute) -> None:
    passes = Passes(compute, warm_pool=WARM)
    name = stopped_agent(passes)
    vm = compute.instance(name)
    assert vm["status"] == "TERMINATED"
    labels = vm["labels"]
    assert "dynagent-stopped-at" in labels and "dynagent-registered" not in labels
    assert labels["dynagent-boot-config"]

    compute.clear_calls()
    passes(pending=[("exp-2", 4)])
    called = compute.call_names()
    assert any(call.endswith("instances.start") for call in called), called
    assert not any(call.endswith("instances.insert") for call in called)
    assert compute.instance(name)["status"] in ("PROVISIONING", "STAGING", "RUNNING")


def test_a_start_refused_for_capacity_creates_a_vm_in_the_other_zone(compute: LocalCompute) -> None:
    machine = {"machine_type": "n1-standard-32", "gpu_type": "nvidia-tesla-t4", "gpu_num": 4}
    offerings = {"machines": [machine], "zones": [ZONE, ZONE_B]}
    passes = Passes(compute, warm_pool=WARM, offerings=offerings)
    name = stopped_agent(passes)
    assert compute.instance(name)["status"] == "TERMINATED"
    zone = compute.instance(name)["zone"].rsplit("/", 1)[-1]
    compute.limit_capacity("n1-standard-32", zone=zone, count=0)

    outcome = passes(pending=[("exp-2", 4)])
    assert outcome.start is not None and [i for i, _, _ in outcome.start.refused] == [name]
    assert compute.instance(name)["status"] == "TERMINATED"
    running = [vm for vm in compute.instances() if vm["status"] != "TERMINATED"]
    assert len(running) == 1
    assert running[0]["zone"].rsplit("/", 1)[-1] != zone
    # The refusal is remembered: the next pass does not ask to start it again.
    compute.clear_calls()
    passes(pending=[("exp-2", 4)])
    assert not any(call.endswith("instances.start") for call in compute.call_names())


def test_a_stopped_vm_of_another_boot_config_is_deleted_never_started(
    compute: LocalCompute,
) -> None:
    name = stopped_agent(Passes(compute, warm_pool=WARM))
    newer = Passes(compute, warm_pool=WARM, startup_script="echo hello again")
    newer.seq = 10
    compute.clear_calls()
    newer(pending=[("exp-2", 4)])
    called = compute.call_names()
    assert not any(call.endswith("instances.start") for call in called)
    assert any(call.endswith("instances.delete") for call in called)
    assert any(call.endswith("instances.insert") for call in called)
    assert name not in {vm["name"] for vm in compute.instances()}


def test_the_sweep_keeps_max_stopped(compute: LocalCompute) -> None:
    passes = Passes(compute, warm_pool={"max_stopped": 2})
    passes(pending=[("a", 4), ("b", 4)])
    names = sorted(vm["name"] for vm in compute.instances())
    passes(agents=[(n, 4, 0) for n in names])
    for name in names:
        passes.idle_for(name, 30)
    passes(agents=[(n, 4, 0) for n in names])
    assert [compute.instance(n)["status"] for n in names] == ["TERMINATED", "TERMINATED"]
    keep_one = Passes(compute, warm_pool=WARM)
    (outcome,) = sweep(keep_one.config, lambda _: keep_one.provider(), now())
    assert outcome.error is None
    left = [vm["name"] for vm in compute.instances()]
    assert len(left) == 1 and left[0] in names


def test_the_sweep_deletes_a_vm_stopped_past_its_period_and_never_an_unmanaged_one(
    compute: LocalCompute,
) -> None:
    passes = Passes(compute, warm_pool={"max_stopped": 2, "max_stopped_period": "24h"})
    name = stopped_agent(passes)
    # Someone else's VM of the pool's name prefix and pool label, stopped: no managed pair.
    other = Passes(compute, label_value="someone-else", name_prefix="det-agent-x-")
    other(pending=[("theirs", 4)])
    (theirs,) = [vm["name"] for vm in compute.instances() if vm["name"] != name]
    provider = other.provider()
    provider.observe()
    provider.stop((Stop(theirs, "stopped by someone else"),))
    assert compute.instance(theirs)["status"] == "TERMINATED"
    # The warm pool's VM, stopped 25 hours ago.
    provider = passes.provider()
    provider.observe()
    long_ago = now() - timedelta(hours=25)
    provider.write_marks((MarkWrite(Mark.STOPPED_AT, long_ago, (name,), "aged by the test"),))
    (outcome,) = sweep(passes.config, lambda _: passes.provider(), now())
    assert outcome.error is None
    assert name not in {vm["name"] for vm in compute.instances()}
    assert compute.instance(theirs)["status"] == "TERMINATED"


def test_a_preempted_spot_vm_is_kept_stopped_and_started_again(compute: LocalCompute) -> None:
    passes = Passes(compute, warm_pool=WARM, spot=True)
    passes(pending=[("exp-1", 4)])
    (name,) = [vm["name"] for vm in compute.instances()]
    # With a warm pool a Spot VM is stopped when preempted, not deleted.
    assert compute.instance(name)["scheduling"]["instanceTerminationAction"] == "STOP"
    passes(agents=[(name, 4, 4)])
    assert compute.preempt(name) is False  # kept, TERMINATED
    first = passes()
    assert first.plan is not None
    assert [(i.instance_id, i.kind) for i in first.plan.interruptions] == [(name, "preempted")]
    assert first.plan.terminations == ()
    assert "dynagent-stopped-at" in compute.instance(name)["labels"]
    again = passes()  # counted once: from now on a stopped machine of the warm pool
    assert again.plan is not None and again.plan.interruptions == ()
    compute.clear_calls()
    passes(pending=[("exp-2", 4)])
    assert any(call.endswith("instances.start") for call in compute.call_names())
