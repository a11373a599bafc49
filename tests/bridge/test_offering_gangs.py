"""Gangs on a pool of 1-, 4- and 8-GPU offerings, end to end, on AWS and on GCP: tasks
of 12, 20 and 28 slots get the machines Determined's fitting places them on, in one
reconcile.

The pool is written as an admin writes it: the 8-GPU type as ``instance_type``,
``max_instances: 60`` and the three types as ``offerings``, nothing else tuned. No
8-GPU machine can hold any of these tasks: the master places a task over one machine
on idle agents of one size that divides it (agentrm fitting.go
``findDedicatedAgentFits``), so each needs 4-GPU machines: 3, 5 and 7 of them. Under
the old rule ``max_instances`` counted machines of any size and a machine smaller than
the largest was allowed only while ``machines x 8 - slots`` left slack: 60 x 8 - 480 is
none, so no 4-GPU machine was launched and the three tasks waited forever.

The local master admits the three experiments at zero agents; one bridge pass and one
reconcile launch the 15 machines and one spare of their size (``gang_spares``); they
boot and register on the harness's clock, and the master places each gang on whole
4-GPU agents, with nothing more launched.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from dynagent.core.config import Pool, config_from_document
from dynagent.core.gpus import aws_gpus
from dynagent.testing.determined.master import LocalDetermined

from ..aws.helpers import image_id, pool_document
from ..gcp.conftest import compute, local_compute, names, publisher, pubsub_emulator, subscriber
from ..gcp.helpers import gcp_pool_document
from ..gcp.test_bridge_end_to_end import GcpSide
from .aws_side import AwsSide
from .cluster import Cluster, Recorder, VirtualClock

# The GCP fixtures, for the GCP case (requested only by it: the AWS case starts no
# Pub/Sub emulator).
__all__ = ["compute", "local_compute", "names", "publisher", "pubsub_emulator", "subscriber"]

GANGS = (12, 20, 28)  # slots per trial of the three experiments
V100 = "nvidia-tesla-v100"


@dataclass(frozen=True)
class Machine:
    """What a machine is, read from the cloud: its type and the GPUs it has."""

    type: str
    gpus: int


@dataclass
class OfferingCluster(Cluster):
    """The whole cluster, with each agent registering the GPUs of its own machine.

    ``Cluster`` registers every agent with the slots of the pool's ``instance_type``,
    which holds for a pool of one shape only: here a 4-GPU machine would register as
    an 8-slot agent. Determined's agent reports the devices it finds, so the slots
    come from what the cloud says the machine has.
    """

    machines: Callable[[], dict[str, Machine]] = field(kw_only=True)

    def agent_slots(self, instance_id: str, pool: Pool) -> int:
        return self.machines()[instance_id].gpus


@dataclass(frozen=True)
class Case:
    cluster: OfferingCluster
    gang: Machine  # the machine each gang must get: the cloud's 4-GPU offering


def aws_case(request: pytest.FixtureRequest, master: LocalDetermined) -> Case:
    aws = request.getfixturevalue("aws")
    ec2 = aws.client("ec2")
    entry = pool_document(
        image_id(ec2),
        "v100",
        instance_type="p3.16xlarge",
        max_instances=60,
        offerings={"instance_types": ["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"]},
    )
    document = {"resource_pools": [entry]}
    cfg = config_from_document(document)
    clock, log = VirtualClock(), Recorder()

    def machines() -> dict[str, Machine]:
        """Every instance in the account not terminated, managed or not."""
        reservations = ec2.describe_instances()["Reservations"]
        return {
            i["InstanceId"]: Machine(i["InstanceType"], aws_gpus(i["InstanceType"]) or 0)
            for r in reservations
            for i in r["Instances"]
            if i["State"]["Name"] != "terminated"
        }

    side = AwsSide(aws, cfg, clock, log)
    cluster = OfferingCluster(master, side, cfg, clock, log, document=document, machines=machines)
    return Case(cluster, Machine("p3.8xlarge", 4))


def gcp_case(request: pytest.FixtureRequest, master: LocalDetermined) -> Case:
    compute = request.getfixturevalue("compute")
    fixtures = ("pubsub_emulator", "publisher", "subscriber", "names")
    emulator, publisher, subscriber, names = map(request.getfixturevalue, fixtures)

    def n1(machine_type: str, gpus: int) -> dict[str, Any]:
        return {"machine_type": machine_type, "gpu_type": V100, "gpu_num": gpus}

    entry = gcp_pool_document(
        "v100",
        instance_type=n1("n1-standard-64", 8),
        max_instances=60,
        offerings={
            "machines": [n1("n1-standard-8", 1), n1("n1-standard-32", 4), n1("n1-standard-64", 8)]
        },
    )
    document = {"resource_pools": [entry]}
    cfg = config_from_document(document)
    clock, log = VirtualClock(), Recorder()

    def machines() -> dict[str, Machine]:
        """Every VM in the project not terminated, managed or not; its GPUs are the
        accelerators attached to it (an n1 machine has none of its own)."""
        return {
            vm["name"]: Machine(
                vm["machineType"].rsplit("/", 1)[-1],
                sum(
                    int(a["acceleratorCount"])
                    for a in vm.get("guestAccelerators", [])
                    if a["acceleratorType"].endswith(f"/{V100}")
                ),
            )
            for vm in compute.instances()
            if vm["status"] != "TERMINATED"
        }

    side = GcpSide(compute, emulator, publisher, subscriber, names, cfg, clock, log)
    cluster = OfferingCluster(master, side, cfg, clock, log, document=document, machines=machines)
    return Case(cluster, Machine("n1-standard-32", 4))


@pytest.fixture(params=["aws", "gcp"])
def case(request: pytest.FixtureRequest, master: LocalDetermined) -> Case:
    build = aws_case if request.param == "aws" else gcp_case
    return build(request, master)


def admitted_gangs(cluster: Cluster) -> dict[str, int]:
    """The three experiments, submitted through the master's admission (as ``det
    experiment create`` does) with no agent connected: task id -> slots."""
    trials = {}
    for slots in GANGS:
        launched = cluster.master.launch("TRIAL", slots, cluster.pool.name)
        assert launched.warnings == ()
        trials[launched.task_id] = slots
    cluster.tasks.extend(trials)
    assert cluster.master.schedule() == []  # no agent: all three wait
    assert [cluster.state(t) for t in trials] == ["QUEUED"] * 3
    return trials


def test_gangs_get_the_machines_determined_places_them_on_in_one_reconcile(case: Case) -> None:
    cluster, gang = case.cluster, case.gang
    trials = admitted_gangs(cluster)

    # One bridge pass and one reconcile of its snapshot: no step, no sweep, no retry.
    (sent,) = cluster.bridge_pass()
    assert sorted(task.slots for task in sent.pending) == sorted(GANGS)
    cluster.deliver()
    assert cluster.applied_seqs() == {sent.seq}
    # 3 + 5 + 7 machines of 4 GPUs and one spare of that size, every one the pool's and
    # managed, and nothing else: on the old rule nothing would be there at all.
    machines = cluster.machines()
    assert Counter(machines.values()) == {gang: sum(s // gang.gpus for s in GANGS) + 1}
    assert set(machines) == set(cluster.cloud.alive()) == set(cluster.born)
    launched = dict(cluster.born)

    # They boot and register on the harness's clock; the master places the gangs.
    cluster.run_until(lambda: len(cluster.running()) == 3, "the three gangs running")
    assert cluster.born == launched  # no launch while they booted

    # Each gang on whole 4-GPU agents of its own: 3, 5 and 7, every device of each; the
    # agent none of them took is the spare.
    placed: set[str] = set()
    for task, slots in trials.items():
        placement = cluster.master.placement(task)
        assert len(placement) == slots // gang.gpus
        assert all(devices == list(range(gang.gpus)) for devices in placement.values())
        assert not placed & set(placement)
        placed |= set(placement)
    assert placed < cluster.agents == set(launched)
    assert len(cluster.agents - placed) == 1
    # The master says the same to the bridge: 15 agents of 4 slots all used, one free.
    latest = cluster.sink.sent[-1]
    assert latest.pending == ()
    used = Counter((a.slots, a.used_slots) for a in latest.agents)
    assert used == {(4, 4): len(launched) - 1, (4, 0): 1}

    # A while on, nothing more launched, nothing terminated or killed, nothing lost.
    cluster.run(timedelta(minutes=2))
    assert cluster.born == launched and set(cluster.machines()) == set(launched)
    assert cluster.terminations() == [] and cluster.killed() == []
    assert len(cluster.running()) == 3
    cluster.check_no_snapshot_lost()
