"""The reliability scenarios on the local AWS (moto's server over HTTP).

Each drives the real Lambda code (``AwsFunctions.reconcile_batch`` with Lambda-shaped
SQS events, and ``sweep``) on a virtual clock (tests/reliability/aws_rig.py), injects
its faults only at the local AWS (its knobs, or the queue as a master or Lambda would
fill it), and fills ``Figures`` from what the cloud shows at the end.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from dynagent.aws.tags import POOL_TAG
from dynagent.testing.event_source import LambdaContext, sqs_event
from tests.reliability.aws_rig import (
    REGION,
    TAG_KEY,
    Convergence,
    Rig,
    VirtualClock,
    pool,
    pool_config,
    seeded,
    snapshot,
    tags_of,
)
from tests.reliability.clouds import Clouds
from tests.reliability.figures import Figures, Mode, Scenario

# -- R1 -------------------------------------------------------------------------------

# Three pools (one spot), each with a backlog that grows over four snapshots, a minute
# apart, to three tasks of one instance each: whatever the order, the newest snapshot
# asks for 3 instances a pool and no older one for more.
R1_POOLS = {"a100": ("p4d.24xlarge", 8, False), "t4": ("g4dn.xlarge", 1, False)}
R1_SPOT = {"a10g": ("g5.xlarge", 1, True)}
R1_BACKLOG = (("a",), ("a", "b"), ("a", "b", "c"), ("a", "b", "c"))


def r1_duplicates(clouds: Clouds, mode: Mode) -> Figures:
    figures = Figures("R1 duplicates", "aws")
    for run in range(3 if mode.long else 1):
        clean = _r1_run(clouds, copies=1, shuffle=None)
        # Every snapshot three times (a master resending past the queue's deduplication
        # window, Lambda redelivering), all shuffled across the pools.
        copies, shuffle = (3, seeded(f"R1:{run}")) if mode.inject else (1, None)
        faulty = _r1_run(clouds, copies=copies, shuffle=shuffle)
        figures.runs += 1
        figures.launches_expected += clean["launches"]
        figures.launches_made += faulty["launches"]
        figures.faults += faulty["faults"]
        figures.leaked += max(0, faulty["live"] - clean["live"])
        figures.lost += len(faulty["escaped"])
        figures.converge_passes = max(figures.converge_passes, faulty["passes"])
        figures.converge_seconds = max(figures.converge_seconds, faulty["seconds"])
        figures.calls_per_minute = max(figures.calls_per_minute or 0, faulty["rate"])
    # Each batch (10 virtual seconds apart) costs SQS 3 calls and each pool it names a
    # describe page, a launch and its visibility check: ~60 a minute with three pools.
    figures.limits = {"calls_per_minute": 120}
    return figures


def _r1_run(clouds: Clouds, copies: int, shuffle: Any) -> dict[str, Any]:
    aws = clouds.aws()
    image = aws.image_id()
    kinds = {**R1_POOLS, **R1_SPOT}
    config = pool_config(
        *(
            pool(name, image, instance_type=kind, spot=spot, max_instances=5)
            for name, (kind, _, spot) in kinds.items()
        )
    )
    rig = Rig(aws, config)
    start = rig.clock.now()
    items = [
        snapshot(name, seq, start.replace(second=0) + timedelta(minutes=seq - 1), pending)
        for seq, tasks in enumerate(R1_BACKLOG, 1)
        for name, (_, slots, _) in kinds.items()
        for pending in [[(f"{name}-{t}", slots) for t in tasks]]
    ]
    sends = [(item, copy) for item in items for copy in range(copies)]
    if shuffle is not None:
        shuffle.shuffle(sends)
    # All are in the queue by the time of the last; the clock is there too.
    rig.clock.advance(minutes=len(R1_BACKLOG) - 1)
    ids = {rig.publish(item, copy): (item.pool, item.seq) for item, copy in sends}
    before: set[str] = set()
    converge = Convergence(rig.clock)
    aws.clear_calls()
    seen: dict[str, int] = {}
    faults = 0
    while True:
        received = rig.deliver()
        if not received:
            break
        for message_id in received:
            pool_name, seq = ids[message_id]
            # A copy already applied, or a snapshot older than one applied: both faults.
            if seq <= seen.get(pool_name, 0):
                faults += 1
            seen[pool_name] = max(seq, seen.get(pool_name, 0))
        converge.see(len(rig.live()))
        rig.clock.advance(seconds=10)
    for _ in range(2):  # the sweeps that follow change nothing
        rig.functions.sweep()
        converge.see(len(rig.live()))
    return {
        "launches": rig.launches_since(before),
        "live": len(rig.live()),
        "faults": faults,
        "escaped": rig.delivery.escaped,
        "passes": converge.settled_passes,
        "seconds": converge.settled_seconds,
        "rate": rig.calls_per_minute(),
    }


# -- R2 -------------------------------------------------------------------------------

R2_RECONCILES, R2_SWEEPS = 8, 2


def r2_concurrency(clouds: Clouds, mode: Mode) -> Figures:
    # 10 passes in the scenario's minute, each a describe page, a launch or replay, its
    # visibility check and SQS's calls: about 12 calls a pass at most, without a loop.
    figures = Figures("R2 concurrency", "aws", limits={"churn": 0, "calls_per_minute": 120})
    for run in range(3 if mode.long else 1):
        clean = _r2_run(clouds, concurrent=False, run=run)
        faulty = _r2_run(clouds, concurrent=mode.inject, run=run)
        figures.runs += 1
        figures.launches_expected += clean["launches"]
        figures.launches_made += faulty["launches"]
        figures.faults += faulty["overlap"]
        figures.lost += faulty["escaped"]
        figures.leaked += max(0, faulty["live"] - clean["live"])
        figures.extra["churn"] = figures.extra.get("churn", 0) + faulty["churn"]
        figures.converge_passes = R2_RECONCILES + R2_SWEEPS
        figures.calls_per_minute = max(figures.calls_per_minute or 0, faulty["rate"])
    return figures


def _r2_run(clouds: Clouds, concurrent: bool, run: int) -> dict[str, Any]:
    """The same snapshot handed to 8 invocations at once (the SQS FIFO queue hands a
    pool's group to one invocation at a time, so concurrent reconciles of one pool are
    redeliveries of one record: a visibility timeout ran out, or Lambda retried), while
    2 sweeps run; each its own boto3 clients, functions object and clock."""
    aws = clouds.aws()
    config = pool_config(pool("a100", aws.image_id(), max_instances=8))
    rig = Rig(aws, config)
    tasks = [(f"trial-{run}-{n}", 8) for n in range(3)]
    rig.publish(snapshot("a100", 1, rig.clock.now(), tasks))
    messages = rig.sqs.receive_message(
        QueueUrl=rig.queue, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    )["Messages"]
    event = sqs_event(messages, rig.arn, REGION)
    before = rig.resources()
    aws.clear_calls()
    start = rig.clock.now()
    gate = threading.Barrier(R2_RECONCILES + R2_SWEEPS) if concurrent else None
    lock = threading.Lock()
    state = {"in_flight": 0, "overlap": 0, "escaped": 0}

    def worker(kind: str) -> None:
        clock = VirtualClock(start)
        functions = rig.new_functions(rig.client("ec2", clock), rig.client("sqs", clock), clock)
        if gate is not None:
            gate.wait()
        with lock:
            state["overlap"] += 1 if state["in_flight"] else 0
            state["in_flight"] += 1
        try:
            if kind == "reconcile":
                functions.reconcile_batch(event, LambdaContext())
            else:
                functions.sweep()
        except Exception:
            with lock:
                state["escaped"] += 1
        finally:
            with lock:
                state["in_flight"] -= 1

    kinds = ["reconcile"] * R2_RECONCILES + ["sweep"] * R2_SWEEPS
    if concurrent:
        threads = [threading.Thread(target=worker, args=(kind,)) for kind in kinds]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        worker("reconcile")  # one clean reconcile
    managed = [i for i in rig.instances() if tags_of(i).get("dynagent:pool") == "a100"]
    rig.clock.advance(minutes=1)
    return {
        "launches": rig.launches_since(before),
        "live": len(rig.live("a100")),
        # Launched and terminated within the scenario's minute.
        "churn": sum(i["State"]["Name"] in ("shutting-down", "terminated") for i in managed),
        "overlap": state["overlap"],
        "escaped": state["escaped"],
        "rate": rig.calls_per_minute(),
    }


# -- R4 -------------------------------------------------------------------------------


def r4_foreign_and_busy(clouds: Clouds, mode: Mode) -> Figures:
    figures = Figures("R4 foreign and busy", "aws")
    for _ in range(2 if mode.long else 1):
        _r4_run(clouds, mode, figures)
    return figures


def _r4_run(clouds: Clouds, mode: Mode, figures: Figures) -> None:
    aws = clouds.aws()
    image = aws.image_id()
    periods = {
        "max_idle_agent_period": "10m",
        "max_agent_starting_period": "10m",
        "max_disconnected_period": "5m",
    }
    config = pool_config(pool("a100", image, max_instances=4, **periods))
    rig = Rig(aws, config)
    foreign: list[str] = []
    if mode.inject:
        # Not ours: untagged; our tag key with another deployment's value (and our pool
        # tag); our pool tag alone. All connected to the master as idle static agents of
        # the pool, and old enough for every reaping rule.
        for tags in ([], [(TAG_KEY, "someone-else"), (POOL_TAG, "a100")], [(POOL_TAG, "a100")]):
            foreign += _run_instances(rig, 2, tags)
        for instance_id in foreign:
            aws.set_launch_time(instance_id, rig.clock.now() - timedelta(hours=3))
    tags_before = {i["InstanceId"]: tags_of(i) for i in rig.instances()}
    before = rig.resources()
    aws.clear_calls()
    converge = Convergence(rig.clock)
    statics = [(instance_id, 8, 0) for instance_id in foreign]
    seq = 0
    busy: set[str] = set()

    def reconcile(pending: list[tuple[str, int]]) -> None:
        nonlocal seq
        seq += 1
        # Busy agents: every managed instance runs a task (used_slots 8 of 8), so none may
        # go; without injection they are reported idle and may.
        used = 8 if mode.inject else 0
        ours = [
            (i["InstanceId"], 8, used) for i in rig.live("a100") if i["InstanceId"] not in foreign
        ]
        if used:
            busy.update(instance_id for instance_id, _, _ in ours)
            figures.faults += len(ours)
        rig.publish(snapshot("a100", seq, rig.clock.now(), pending, [*ours, *statics]))
        rig.deliver()
        converge.see(len(rig.live("a100")))

    reconcile([("a", 8), ("b", 8)])  # two new instances: foreign ones do not count
    rig.clock.advance(minutes=3)
    reconcile([("c", 8), ("d", 8)])  # two more: max_instances 4 is ours alone
    for _ in range(4):  # an hour of snapshots and sweeps: nothing may go
        rig.clock.advance(minutes=15)
        reconcile([])
        rig.functions.sweep()
        converge.see(len(rig.live("a100")))
    figures.faults += len(foreign)
    after = {i["InstanceId"]: i for i in rig.instances()}
    for instance_id in foreign:
        item = after[instance_id]
        gone = item["State"]["Name"] not in ("pending", "running")
        figures.touched += gone or tags_of(item) != tags_before[instance_id]
    figures.touched += sum(after[i]["State"]["Name"] not in ("pending", "running") for i in busy)
    figures.runs += 1
    figures.launches_expected += 4
    figures.launches_made += rig.launches_since(before)
    figures.converge_passes = max(figures.converge_passes, converge.settled_passes)
    figures.converge_seconds = max(figures.converge_seconds, converge.settled_seconds)
    figures.lost += len(rig.delivery.escaped) + rig.delivery.failed


def _run_instances(rig: Rig, count: int, tags: list[tuple[str, str]]) -> list[str]:
    specs = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags]}]
    response = rig.ec2.run_instances(
        ImageId=rig.image,
        InstanceType="p4d.24xlarge",
        MinCount=count,
        MaxCount=count,
        **({"TagSpecifications": specs} if tags else {}),
    )
    return [i["InstanceId"] for i in response["Instances"]]


SCENARIOS: dict[str, Scenario] = {
    "R1 duplicates": r1_duplicates,
    "R2 concurrency": r2_concurrency,
    "R4 foreign and busy": r4_foreign_and_busy,
}
