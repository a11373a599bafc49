"""Warm headroom and the warm pool sized from the pool's own history on the local
Compute, through the Cloud Function's code with Pub/Sub's CloudEvents and the real
google-cloud-compute client: a burst gets room for a burst of its sizes (a redelivery
adds nothing), a quiet night lets the room go, the cap holds the room, a gang arriving
gets none; with ``max_stopped: auto`` a stopped VM goes once its disk has billed what a
start of it saves, a small one sooner than a large one."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dynagent.core.fleet import Mark
from dynagent.core.plan import MarkWrite
from dynagent.core.snapshot import Arrival
from dynagent.gcp.functions import GcpFunctions
from dynagent.testing.gcp.compute import LocalCompute

from .helpers import config, gcp_pool_document, managed, now, provider_for, snapshot
from .test_compute_offerings import LARGE, SMALL
from .test_functions import event

# T4 machines of 1 and 4 GPUs; the cap as Determined's max_instances of the 4-GPU one.
AUTO = {
    "instance_type": LARGE,
    "offerings": {"machines": [SMALL, LARGE]},
    "max_instances": 3,
    "max_idle_agent_period": "5m",
    "warm_headroom_slots": "auto",
}


class Passes:
    """Snapshots of pool t4 with the bridge's arrivals, as Pub/Sub delivers them."""

    def __init__(self, compute: LocalCompute, **provider: Any) -> None:
        self.compute = compute
        self.config = config(gcp_pool_document(**AUTO | provider))
        instances, operations = compute.instances_client(), compute.zone_operations_client()
        self.functions = GcpFunctions(
            self.config,
            instances=lambda: instances,
            operations=lambda: operations,
            sleep=lambda _: None,
        )
        self.seq = 0
        self.body = b""

    def __call__(self, arrivals: tuple[tuple[int, int, int], ...] = (), **fields: Any) -> None:
        self.seq += 1
        # Two busy agents of another group's machines: the room is at most the slots busy.
        agents = [*fields.pop("agents", ()), ("other-1", 4, 4), ("other-2", 4, 4)]
        shot = snapshot(self.seq, pool="t4", agents=agents, **fields)
        shot = shot.model_copy(update={"arrivals": tuple(Arrival(*a) for a in arrivals)})
        self.body = shot.to_json().encode()
        self.again()

    def again(self) -> None:
        self.functions.reconcile_event(event(self.body))

    def gpus(self) -> int:
        return sum({"n1-standard-8": 1, "n1-standard-32": 4}[machine(vm)] for vm in self.vms())

    def vms(self) -> list[dict[str, Any]]:
        return [vm for vm in managed(self.compute) if vm["status"] != "STOPPING"]

    def idle_for(self, name: str, minutes: float) -> None:
        self.mark(name, Mark.IDLE_SINCE, hours=minutes / 60)

    def mark(self, name: str, mark: Mark, hours: float) -> None:
        """The VM's ``mark``, aged: tests move the cloud's state, not the clock."""
        since = now() - timedelta(hours=hours)
        provider = provider_for(self.compute, self.config)
        provider.observe()
        provider.write_marks((MarkWrite(mark, since, (name,), "aged by the test"),))


def machine(vm: dict[str, Any]) -> str:
    return str(vm["machineType"]).rsplit("/", 1)[-1]


def test_a_burst_gets_room_and_a_redelivery_adds_nothing(compute: LocalCompute) -> None:
    passes = Passes(compute)
    # Three 1-GPU tasks and a 2-GPU one came together a minute ago; they run elsewhere.
    passes(arrivals=((60, 1, 3), (60, 2, 1)))
    assert passes.gpus() == 5  # a 4-GPU VM for the 2-GPU task and two more, and one
    made = sorted(vm["name"] for vm in passes.vms())
    passes.again()
    assert sorted(vm["name"] for vm in passes.vms()) == made
    labels = compute.instance(made[0])["labels"]
    assert labels["managed-by"] == "dynagent-test"


def test_a_quiet_night_lets_the_room_go(compute: LocalCompute) -> None:
    passes = Passes(compute)
    passes(arrivals=((120, 1, 1),))
    (vm,) = passes.vms()
    assert machine(vm) == "n1-standard-8"
    name = str(vm["name"])
    passes(agents=[(name, 1, 0)], arrivals=((125, 1, 1),))
    passes.idle_for(name, 30)
    passes(agents=[(name, 1, 0)], arrivals=((1800, 1, 1),))
    assert [v["name"] for v in managed(compute)] == [name]  # kept for the work expected
    passes(agents=[(name, 1, 0)], arrivals=())
    assert managed(compute) == []


def test_the_cap_holds_the_room(compute: LocalCompute) -> None:
    passes = Passes(compute, max_instances=1)  # 4 GPUs, taken by a trial
    passes(pending=[("trial-1.0", 4)])
    (vm,) = passes.vms()
    passes(agents=[(str(vm["name"]), 4, 4)], arrivals=((30, 1, 3),))
    assert [v["name"] for v in passes.vms()] == [vm["name"]]


def test_a_gang_arriving_gets_no_room(compute: LocalCompute) -> None:
    passes = Passes(compute)
    passes(arrivals=((30, 8, 1), (30, 4, 1)))
    assert passes.vms() == []


def test_a_stopped_vm_goes_once_its_disk_billed_what_a_start_saves(
    compute: LocalCompute,
) -> None:
    passes = Passes(compute, warm_pool={"max_stopped": "auto"}, warm_headroom_slots=0)
    passes(pending=[("a", 1), ("b", 4)])
    by_type = {machine(vm): str(vm["name"]) for vm in passes.vms()}
    assert set(by_type) == {"n1-standard-8", "n1-standard-32"}
    agents = [(by_type["n1-standard-8"], 1, 0), (by_type["n1-standard-32"], 4, 0)]
    passes(agents=agents)
    for name in by_type.values():
        passes.idle_for(name, 30)
    passes(agents=agents)
    assert {vm["status"] for vm in pool_vms(compute)} == {"TERMINATED"}  # GCE's stopped
    # Stopped 6 hours: past the 1-T4 VM's break-even (5 h), not the 4-T4 one's (20 h).
    for name in by_type.values():
        passes.mark(name, Mark.STOPPED_AT, hours=6)
    passes()
    assert [str(vm["name"]) for vm in pool_vms(compute)] == [by_type["n1-standard-32"]]


def pool_vms(compute: LocalCompute) -> list[dict[str, Any]]:
    """The pool's VMs, stopped ones (GCE's TERMINATED) too."""
    return [vm for vm in compute.instances() if vm["labels"].get("dynagent-pool") == "t4"]
