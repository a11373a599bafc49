"""Warm headroom and the warm pool sized from the pool's own history on the local AWS,
through the reconcile function as Lambda runs it: a burst gets room for a burst of its
sizes (and a duplicate delivery launches nothing more), a quiet night lets the room go,
a cap holds the room, a gang arriving gets none; a stopped machine of the warm pool is
started for the room; with ``max_stopped: auto`` a stopped machine goes once its disk
has billed what a start of it saves, a small one sooner than a large one."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from dynagent.aws import tags
from dynagent.core.fleet import Mark
from dynagent.core.snapshot import Arrival, Snapshot
from dynagent.testing.aws.event_source import LambdaContext
from dynagent.testing.aws.local_aws import LocalAws

from .helpers import fifo_queue, managed_instances, now, published_event, snapshot
from .test_warm_pool import functions_for, idle_for, state_of

V100S = ["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"]
# As an admin writes it beside master.yaml's pool: the cap as Determined's max_instances.
AUTO = {
    "instance_type": "p3.16xlarge",
    "max_instances": 3,
    "max_idle_agent_period": "5m",
    "offerings": {"instance_types": V100S},
    "warm_headroom_slots": "auto",
}


class Pass:
    """Snapshots of pool a100, with the arrivals the bridge reports, through the
    reconcile function; ``again`` delivers the last one a second time."""

    def __init__(self, sqs: Any, functions: Any) -> None:
        self.sqs, self.functions = sqs, functions
        self.queue = fifo_queue(sqs, "snapshots.fifo")
        self.seq = 0
        self.last: Snapshot | None = None

    def __call__(self, arrivals: tuple[tuple[int, int, int], ...] = (), **fields: Any) -> None:
        self.seq += 1
        shot = snapshot(self.seq, **fields)
        self.last = shot.model_copy(update={"arrivals": tuple(Arrival(*a) for a in arrivals)})
        self.again()

    def again(self) -> None:
        assert self.last is not None
        event = published_event(self.sqs, self.queue, self.last)
        assert self.functions.reconcile_batch(event, LambdaContext()) == {"batchItemFailures": []}


def types(ec2: Any) -> Counter[str]:
    return Counter(str(i["InstanceType"]) for i in managed_instances(ec2))


def test_a_burst_gets_room_and_a_duplicate_launches_nothing_more(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    send = Pass(sqs, functions_for(ec2, **AUTO))
    # Five 1-GPU tasks and a 4-GPU one came a minute ago; all run on one p3.16xlarge.
    # Busy agents of another group's machines: the room is at most the slots busy.
    send(agents=[("i-busy", 8, 8), ("i-busy-2", 8, 8)], arrivals=((60, 1, 5), (60, 4, 1)))
    launched = types(ec2)
    assert sum(launched.values()) >= 1
    slots = {"p3.2xlarge": 1, "p3.8xlarge": 4, "p3.16xlarge": 8}
    assert sum(slots[t] * n for t, n in launched.items()) == 9
    send.again()
    assert types(ec2) == launched


def test_a_quiet_night_lets_the_room_go(aws: LocalAws, ec2: Any, sqs: Any) -> None:
    send = Pass(sqs, functions_for(ec2, **AUTO))
    busy = ("i-busy", 8, 8)
    send(agents=[busy], arrivals=((120, 1, 1),))
    (machine,) = managed_instances(ec2)
    instance_id = str(machine["InstanceId"])
    assert machine["InstanceType"] == "p3.2xlarge"
    send(agents=[busy, (instance_id, 1, 0)], arrivals=((125, 1, 1),))
    idle_for(ec2, instance_id, minutes=30)
    # Idle past its period while work came within the hour: kept for it.
    send(agents=[busy, (instance_id, 1, 0)], arrivals=((1800, 1, 1),))
    assert state_of(ec2, instance_id) == "running"
    # No task for an hour: the bridge reports none, and the room goes.
    send(agents=[busy, (instance_id, 1, 0)], arrivals=())
    assert state_of(ec2, instance_id) in ("shutting-down", "terminated")
    assert not managed_instances(ec2)


def test_the_cap_holds_the_room(aws: LocalAws, ec2: Any, sqs: Any) -> None:
    # max_instances 1 of the p3.16xlarge: 8 GPUs, all taken by a trial.
    send = Pass(sqs, functions_for(ec2, **AUTO | {"max_instances": 1}))
    send(pending=[("exp-1", 8)])
    (machine,) = managed_instances(ec2)
    instance_id = str(machine["InstanceId"])
    send(agents=[(instance_id, 8, 8)], arrivals=((30, 1, 4), (30, 8, 1)))
    assert [i["InstanceId"] for i in managed_instances(ec2)] == [instance_id]


def test_a_gang_arriving_gets_no_room(aws: LocalAws, ec2: Any, sqs: Any) -> None:
    send = Pass(sqs, functions_for(ec2, **AUTO))
    send(agents=[("i-1", 8, 8), ("i-2", 8, 8)], arrivals=((30, 16, 1),))
    assert not managed_instances(ec2)


def test_the_room_is_a_start_of_a_stopped_machine(aws: LocalAws, ec2: Any, sqs: Any) -> None:
    send = Pass(sqs, functions_for(ec2, **AUTO | {"warm_pool": {"max_stopped": 2}}))
    send(pending=[("exp-1", 1)])
    (machine,) = managed_instances(ec2)
    instance_id = str(machine["InstanceId"])
    send(agents=[(instance_id, 1, 0)])
    idle_for(ec2, instance_id, minutes=30)
    send(agents=[(instance_id, 1, 0)])
    assert state_of(ec2, instance_id) in ("stopping", "stopped")
    aws.clear_calls()
    send(agents=[("i-busy", 8, 8)], arrivals=((40, 1, 1),))
    calls = Counter(aws.calls("ec2"))
    assert calls["StartInstances"] == 1 and not calls["RunInstances"] and not calls["CreateFleet"]


def stopped_hours_ago(ec2: Any, instance_id: str, hours: float) -> None:
    """The machine's stopped-at mark, aged: tests move the cloud's state, not the clock."""
    since = tags.format_time(now() - timedelta(hours=hours))
    ec2.create_tags(
        Resources=[instance_id], Tags=[{"Key": tags.MARK_TAGS[Mark.STOPPED_AT], "Value": since}]
    )


def test_a_stopped_machine_goes_once_its_disk_billed_what_a_start_saves(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    warm = {"warm_pool": {"max_stopped": "auto"}, "warm_headroom_slots": 0}
    send = Pass(sqs, functions_for(ec2, **AUTO | warm))
    send(pending=[("a", 1), ("b", 8)])
    machines = {str(i["InstanceType"]): str(i["InstanceId"]) for i in managed_instances(ec2)}
    assert set(machines) == {"p3.2xlarge", "p3.16xlarge"}
    agents = [(machines["p3.2xlarge"], 1, 0), (machines["p3.16xlarge"], 8, 0)]
    send(agents=agents)
    for instance_id in machines.values():
        idle_for(ec2, instance_id, minutes=30)
    send(agents=agents)
    assert {state_of(ec2, i) for i in machines.values()} == {"stopped"}
    # Stopped 12 hours: past the p3.2xlarge's break-even (10.5 h), not the p3.16xlarge's.
    for instance_id in machines.values():
        stopped_hours_ago(ec2, instance_id, 12)
    send()
    assert state_of(ec2, machines["p3.2xlarge"]) in ("shutting-down", "terminated")
    assert state_of(ec2, machines["p3.16xlarge"]) == "stopped"
