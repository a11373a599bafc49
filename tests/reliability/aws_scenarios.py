"""The reliability scenarios on the local AWS (moto's server over HTTP).

Each drives the real Lambda code (``AwsFunctions.reconcile_batch`` with Lambda-shaped
SQS events, and ``sweep``) on a virtual clock (tests/reliability/aws_rig.py), injects
its faults only at the local AWS (its knobs, or the queue as a master or Lambda would
fill it), and fills ``Figures`` from what the cloud shows at the end. R7 alone runs the
function in a child process on the real clock, as Lambda does, to measure its memory and
time; its load is its fault.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from dynagent.aws.tags import MARK_TAGS, POOL_TAG, format_time
from dynagent.bridge.drain_notices import SqsDrainNotices
from dynagent.core.fleet import Mark
from dynagent.core.snapshot import Agent
from dynagent.testing.aws.event_source import LambdaContext, sqs_event
from dynagent.testing.aws.local_aws import LocalAws
from tests import builders
from tests.reliability.aws_rig import (
    REGION,
    TAG_KEY,
    TAG_VALUE,
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
        _escaped(figures, len(faulty["escaped"]))
        figures.converge_passes = max(figures.converge_passes, faulty["passes"])
        figures.converge_seconds = max(figures.converge_seconds, faulty["seconds"])
        figures.calls_per_minute = max(figures.calls_per_minute or 0, faulty["rate"])
    # Each batch (10 virtual seconds apart) costs SQS 3 calls and each pool it names a
    # describe page, a launch and its visibility check: ~60 a minute with three pools.
    figures.limits["calls_per_minute"] = 120
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
        _escaped(figures, faulty["escaped"])
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
    figures.lost += sum(reason is None for reason in rig.dead_lettered().values())
    _escaped(figures, len(rig.delivery.escaped))


# -- R5 -------------------------------------------------------------------------------

# Instances hidden from this many DescribeInstances calls after their launch: more than
# the launch's visibility check makes in launch_visibility_timeout (60 s of 0.25..4 s
# sleeps: about 19), so the lag outlasts the check, as EC2's sometimes does.
R5_HIDDEN_DESCRIBES = 25


def r5_leftovers(clouds: Clouds, mode: Mode) -> Figures:
    figures = Figures("R5 leftovers", "aws", limits={"calls_per_minute": 120})
    for _ in range(2 if mode.long else 1):
        _r5_run(clouds, mode, figures)
    return figures


def _r5_run(clouds: Clouds, mode: Mode, figures: Figures) -> None:
    aws = clouds.aws()
    image = aws.image_id()
    config = pool_config(
        pool("od", image, max_instances=5),
        pool("sp", image, instance_type="g4dn.xlarge", spot=True, max_instances=5),
    )
    rig = Rig(aws, config)
    now = rig.clock.now()
    stale: list[tuple[str, str]] = []  # (kind, id) that two sweeps must clear
    if mode.inject:
        # Spot requests a crashed pass left open, half an hour ago.
        aws.fulfil_spot_requests = False
        for request_id in _request_spot(rig, "sp", 2):
            aws.set_spot_request_create_time(request_id, now - timedelta(minutes=30))
            stale.append(("open", request_id))
        aws.fulfil_spot_requests = True
        # Requests cancelled while their instance kept running (it has none of our tags).
        requests = _request_spot(rig, "sp", 2)
        rig.ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=requests)
        for request in rig.spot_requests():
            if request["SpotInstanceRequestId"] in requests:
                stale.append(("instance", request["InstanceId"]))
        # Our instances stuck booting for half an hour.
        for instance_id in _run_instances(rig, 2, [(TAG_KEY, TAG_VALUE), (POOL_TAG, "od")]):
            aws.set_instance_state(instance_id, "pending")
            aws.set_launch_time(instance_id, now - timedelta(minutes=30))
            stale.append(("instance", instance_id))
        aws.hide_new_instances(R5_HIDDEN_DESCRIBES)
    before = rig.resources()
    aws.clear_calls()
    converge = Convergence(rig.clock)
    # The master sends the pool's backlog every 30 s; the queue holds a newer snapshot
    # while the first launch is still invisible.
    for seq in (1, 2, 3):
        rig.publish(snapshot("od", seq, rig.clock.now(), [("a", 8), ("b", 8)]))
        rig.deliver()
        converge.see(len(rig.live("od")))
        rig.clock.advance(seconds=30)
    rig.drain()
    for _ in range(2):
        rig.clock.advance(minutes=1)
        rig.functions.sweep()
        converge.see((len(rig.live()), len(_open(rig))))
    figures.faults += len(stale) + aws.faults_served().get("hidden", 0)
    alive = {i["InstanceId"] for i in rig.live()}
    still_open = set(_open(rig))
    figures.leaked += sum(item in (still_open if kind == "open" else alive) for kind, item in stale)
    figures.runs += 1
    figures.launches_expected += 2
    figures.launches_made += rig.launches_since(before)
    figures.lost += sum(reason is None for reason in rig.dead_lettered().values())
    _escaped(figures, len(rig.delivery.escaped))
    figures.converge_passes = max(figures.converge_passes, converge.settled_passes)
    figures.converge_seconds = max(figures.converge_seconds, converge.settled_seconds)
    figures.calls_per_minute = max(figures.calls_per_minute or 0, rig.calls_per_minute())


def _request_spot(rig: Rig, pool_name: str, count: int) -> list[str]:
    tags = [{"Key": TAG_KEY, "Value": TAG_VALUE}, {"Key": POOL_TAG, "Value": pool_name}]
    response = rig.ec2.request_spot_instances(
        InstanceCount=count,
        LaunchSpecification={"ImageId": rig.image, "InstanceType": "g4dn.xlarge"},
        TagSpecifications=[{"ResourceType": "spot-instances-request", "Tags": tags}],
    )
    return [r["SpotInstanceRequestId"] for r in response["SpotInstanceRequests"]]


def _open(rig: Rig) -> list[str]:
    return [r["SpotInstanceRequestId"] for r in rig.spot_requests() if r["State"] == "open"]


# -- R6 -------------------------------------------------------------------------------

# A backlog per pool, one snapshot a minute: it grows, then holds.
R6_BACKLOG = {
    "a100": (("a",), ("a", "b"), ("a", "b", "c"), ("a", "b", "c"), ("a", "b", "c")),
    "t4": ((), ("x",), ("x", "y"), ("x", "y"), ("x", "y")),
}
R6_SLOTS = {"a100": 8, "t4": 1}
# The functions' EC2 client gives up on an answer after this long (real seconds); late
# answers come after R6_LATE.
R6_READ_TIMEOUT, R6_LATE = 0.4, 0.8


def r6_cloud_faults(clouds: Clouds, mode: Mode) -> Figures:
    # Per virtual minute: one batch per pool (3 SQS calls, a describe page, a launch and
    # its visibility check) and the sweep's describes, each retried after a throttle:
    # some 30 calls. 120 leaves room; a loop retrying without backoff makes thousands.
    figures = Figures("R6 cloud faults", "aws", limits={"calls_per_minute": 120})
    for _ in range(2 if mode.long else 1):
        clean = _r6_run(clouds, inject=False)
        faulty = _r6_run(clouds, inject=mode.inject)
        figures.runs += 1
        figures.launches_expected += clean["launches"]
        figures.launches_made += faulty["launches"]
        figures.leaked += max(0, faulty["live"] - clean["live"])
        figures.lost += faulty["lost"]
        _escaped(figures, faulty["escaped"])
        figures.faults += faulty["faults"]
        figures.converge_passes = max(figures.converge_passes, faulty["passes"])
        figures.converge_seconds = max(figures.converge_seconds, faulty["seconds"])
        figures.calls_per_minute = max(figures.calls_per_minute or 0, faulty["rate"])
        for kind, count in faulty["served"].items():
            figures.extra[kind] = figures.extra.get(kind, 0) + count
    return figures


def _r6_run(clouds: Clouds, inject: bool) -> dict[str, Any]:
    aws = clouds.aws()
    image = aws.image_id()
    config = pool_config(
        pool("a100", image, max_instances=5),
        pool("t4", image, instance_type="g4dn.xlarge", max_instances=5),
    )
    rig = Rig(aws, config)
    impatient = rig.client("ec2", read_timeout=R6_READ_TIMEOUT, connect_timeout=1)
    rig.functions = rig.new_functions(ec2=impatient)
    if inject:
        aws.inject_errors("RequestLimitExceeded", every=3, status=503)
        aws.inject_errors("InternalError", every=7, status=500)
        aws.inject_errors("Unavailable", every=11, status=503)
        # Launches take effect but their answers are lost: the retry must not launch again.
        aws.answer_late(R6_LATE, every=2, action="RunInstances")
        aws.fail_next_launch("p4d.24xlarge", "InsufficientInstanceCapacity")
        aws.fail_next_launch("g4dn.xlarge", "InsufficientInstanceCapacity")
    before = rig.resources()
    aws.clear_calls()
    start = rig.clock.now()
    sent: set[str] = set()
    passes, settled, settled_at, settled_passes = 0, 0, 0.0, 0
    for minute in range(len(R6_BACKLOG["a100"])):
        for name, backlog in R6_BACKLOG.items():
            pending = [(f"{name}-{t}", R6_SLOTS[name]) for t in backlog[minute]]
            sent.add(rig.publish(snapshot(name, minute + 1, rig.clock.now(), pending)))
        while rig.deliver():
            passes += 1
        if minute % 2:
            rig.functions.sweep()
            passes += 1
        launched = sum(len(p.get("launched", [])) for p in rig.logger.passes())
        if launched != settled:
            settled, settled_at = launched, (rig.clock.now() - start).total_seconds()
            settled_passes = passes
        rig.clock.advance(minutes=1)
    served = aws.faults_served()
    rate = rig.calls_per_minute()
    aws.clear_wire_faults()  # the scenario's own reading of the end state is not a fault
    dead = rig.dead_lettered()
    return {
        "launches": rig.launches_since(before),
        "live": len(rig.live()),
        # A record redriven with no reason was given up on: lost, as one that escaped.
        "lost": sum(1 for m, reason in dead.items() if m in sent and reason is None),
        "escaped": len(rig.delivery.escaped),
        "faults": sum(served.values()),
        "served": served,
        "passes": settled_passes,
        "seconds": settled_at,
        "rate": rate,
    }


# -- R3 -------------------------------------------------------------------------------

R3_BAD_KINDS = (
    "malformed",
    "wrong types",
    "huge array",
    "unknown pool",
    "negative slots",
    "wrong type or version",
    "256 KB",
    "deeply nested",
)
# Largest body SQS takes (256 KiB) less room for the group and deduplication ids.
R3_LARGE = 256 * 1024 - 512


def r3_bad_input(clouds: Clouds, mode: Mode) -> Figures:
    # Per batch (10 virtual seconds apart): 3 SQS calls, up to 10 dead letters, a describe
    # per pool: at most 15, 90 a minute.
    figures = Figures("R3 bad input", "aws", limits={"calls_per_minute": 120})
    # The short form runs inside `make test`: 100 records there, the 1,000 here.
    runs, records = (1, 1000) if mode.long else (1, 100)
    for run in range(runs):
        _r3_run(clouds, mode, figures, seeded(f"R3:{run}"), records)
    return figures


def _r3_run(clouds: Clouds, mode: Mode, figures: Figures, rng: Any, records: int) -> None:
    aws = clouds.aws()
    image = aws.image_id()
    config = pool_config(
        pool("a100", image), pool("sp", image, instance_type="g4dn.xlarge", spot=True)
    )
    rig = Rig(aws, config)
    now = rig.clock.now()
    seqs = {"a100": 0, "sp": 0}
    # (body, group, fate, (pool, seq) if good, kind), then by message id
    planned: list[tuple[str, str, str, Any, str]] = []
    for _ in range(records):
        name = rng.choice(("a100", "sp"))
        seqs[name] += 1
        good = snapshot(name, seqs[name], now).model_dump(mode="json")
        roll = rng.random()
        if not mode.inject or roll < 0.3:
            planned.append((json.dumps(good), name, "good", (name, seqs[name]), "good"))
        elif roll < 0.36:
            # A snapshot from long ago (skipped as stale) or days ahead: valid JSON of
            # the right shape, so set aside with a reason or skipped, never lost.
            days = rng.choice((-4000, -1, 2, 3000))
            good["time"] = (now + timedelta(days=days)).isoformat()
            planned.append((json.dumps(good), name, "odd", None, f"{days:+} days"))
        else:
            kind = rng.choice(R3_BAD_KINDS)
            group = rng.choice(("a100", "sp", "junk"))
            planned.append((_r3_bad(kind, good, rng), group, "bad", None, kind))
    ids = rig.send_all([(body, group) for body, group, *_ in planned])
    expect = {message_id: plan[2:] for message_id, plan in zip(ids, planned, strict=True)}
    aws.clear_calls()
    start = rig.clock.now()
    delivered: set[str] = set()
    while batch := rig.deliver():
        delivered.update(batch)
        rig.clock.advance(seconds=10)
    dead = rig.dead_lettered()
    applied = {(p["pool"], p["seq"]) for p in rig.logger.passes() if not p.get("error")}
    for message_id, (fate, key, kind) in expect.items():
        reason = dead.get(message_id)
        if fate == "bad":
            figures.faults += message_id in delivered
            lost = not reason
        elif fate == "odd":
            figures.faults += message_id in delivered
            lost = message_id in dead and not reason
        else:
            lost = message_id in dead or key not in applied
        if lost:
            figures.lost += 1
            figures.extra[f"lost {kind}"] = figures.extra.get(f"lost {kind}", 0) + 1
    figures.runs += 1
    figures.launches_made += rig.launches_since(set())  # no snapshot asks for any
    figures.converge_passes = max(figures.converge_passes, rig.delivery.batches)
    figures.converge_seconds = max(
        figures.converge_seconds, (rig.clock.now() - start).total_seconds()
    )
    figures.calls_per_minute = max(figures.calls_per_minute or 0, rig.calls_per_minute())
    figures.extra["records"] = figures.extra.get("records", 0) + len(expect)
    _escaped(figures, len(rig.delivery.escaped))


def _r3_bad(kind: str, good: dict[str, Any], rng: Any) -> str:
    """A record that is not a snapshot this function can apply, of the given kind."""
    text = json.dumps(good)
    if kind == "malformed":
        cut = rng.randrange(1, len(text))
        return rng.choice((text[:cut], text.replace('"', "'"), text + "}", "\x00" + text))
    if kind == "wrong types":
        field, value = rng.choice(
            (("seq", "seven"), ("time", "yesterday"), ("pending", "all"), ("pool", 7))
        )
        return json.dumps({**good, field: value})
    if kind == "huge array":
        return json.dumps({**good, "pending": [rng.randrange(9)] * 40_000})
    if kind == "unknown pool":
        return json.dumps({**good, "pool": f"zz-{rng.randrange(10**6)}"})
    if kind == "negative slots":
        task = {"task": "t", "slots": -rng.randrange(1, 9)}
        return json.dumps({**good, "pending": [task], "seq": -1 if rng.random() < 0.3 else 1})
    if kind == "wrong type or version":
        return json.dumps({**good, **rng.choice(({"type": "pool.delta"}, {"version": 2}))})
    if kind == "256 KB":
        document = {**good, "pending": [{"task": "t", "slots": "x"}]}
        padding = R3_LARGE - len(json.dumps(document)) - len(', "pad": ""')
        return json.dumps({**document, "pad": "p" * padding})
    return "[" * 100_000  # deeply nested


# -- R7 -------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
# A pool of 1,000 managed instances, one dynamic agent each (the agent id is the
# instance id), in a pool the master shares with 9,000 static agents (machines it runs
# itself, which dynagent must leave alone and reports as unmatched): 10,000 agents, all
# busy, and a backlog of 50 whole-machine tasks. The same fleet and backlog as
# `make bench`'s scale-up of 50 on 1,000 instances, so its call counts are the limit.
R7_SCALE = {"instances": 1000, "static": 9000, "pending": 50}
# Without injection: a handful of each, which proves nothing about scale.
R7_HANDFUL = {"instances": 5, "static": 5, "pending": 2}
R7_RESERVATION = 250  # as bench/api_calls.py: moto's pages are then what EC2's would be
R7_SLOTS = 8  # p4d.24xlarge


def r7_scale(clouds: Clouds, mode: Mode) -> Figures:
    template = _template()
    reconcile = template["Resources"]["ReconcileFunction"]["Properties"]
    memory = int(reconcile.get("MemorySize") or template["Globals"]["Function"]["MemorySize"])
    timeout = int(reconcile.get("Timeout") or template["Globals"]["Function"]["Timeout"])
    queue_max = int(template["Resources"]["SnapshotQueue"]["Properties"]["MaximumMessageSize"])
    bench = json.loads((ROOT / "bench" / "results.json").read_text())
    bench_calls = bench["api_calls"]["fleets"]["1000"]["scale_up_50"]["calls"]
    # The reconcile's wall time against its Timeout: the configured figure is the limit,
    # some 40 times what the pass takes here, so a slow or busy machine does not fail it.
    limits = {
        "peak MiB": memory,
        "reconcile s": timeout,
        "describe pages": bench_calls["DescribeInstances"],
        "ec2 calls": sum(bench_calls.values()),
    }
    figures = Figures("R7 scale", "aws", limits=dict(limits))
    sizes = R7_SCALE if mode.inject else R7_HANDFUL
    for _ in range(3 if mode.long else 1):
        run = _r7_run(clouds, sizes, queue_max)
        figures.runs += 1
        figures.launches_expected += sizes["pending"]
        figures.launches_made += run["launched"]
        figures.leaked += run["leaked"]
        figures.touched += run["touched"]
        figures.lost += run["lost"]
        if mode.inject:  # the load is the fault: every instance and agent it served
            figures.faults += sizes["instances"] + run["agents"]
        _escaped(figures, run["escaped"])
        worst = figures.extra
        worst["peak MiB"] = max(worst.get("peak MiB", 0.0), round(run["peak_mib"], 1))
        worst["reconcile s"] = max(worst.get("reconcile s", 0.0), round(run["seconds"], 2))
        worst["handler CPU s"] = max(worst.get("handler CPU s", 0.0), round(run["cpu"], 2))
        worst["describe pages"] = max(worst.get("describe pages", 0), run["describes"])
        worst["ec2 calls"] = max(worst.get("ec2 calls", 0), run["ec2"])
        worst["message KiB"] = round(run["message"] / 1024)
        # One pass is one log line (its report names every unmatched agent).
        worst["log line KiB"] = max(worst.get("log line KiB", 0), round(run["log_line"] / 1024))
        figures.converge_passes = 1
        figures.converge_seconds = worst["reconcile s"]
    # What each is measured against: template.yaml's MemorySize and Timeout, and the
    # calls `make bench` counts for the same reconcile.
    figures.extra.update({f"limit {name}": limit for name, limit in limits.items()})
    return figures


def _r7_run(clouds: Clouds, sizes: dict[str, int], queue_max: int) -> dict[str, Any]:
    aws = clouds.aws()
    image = aws.image_id()
    document = pool("a100", image, max_instances=sizes["instances"] + sizes["pending"])
    rig = Rig(aws, pool_config(document))
    # The queue as template.yaml makes it: a snapshot of 10,000 agents is over SQS's
    # default 256 KiB.
    rig.sqs.set_queue_attributes(
        QueueUrl=rig.queue, Attributes={"MaximumMessageSize": str(queue_max)}
    )
    now = rig.clock.now()
    fleet = _r7_fleet(rig, sizes["instances"], now - timedelta(minutes=50))
    agents = [(i, R7_SLOTS, R7_SLOTS) for i in fleet]
    agents += [(f"gpu-static-{n:05d}", R7_SLOTS, R7_SLOTS) for n in range(sizes["static"])]
    pending = [(f"trial-{n}", R7_SLOTS) for n in range(sizes["pending"])]
    item = snapshot("a100", 1, datetime.now(UTC), pending, agents)
    body = item.to_json()
    rig.publish(item)  # through the queue, whose size rule the local SQS enforces
    messages = rig.sqs.receive_message(
        QueueUrl=rig.queue, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    )["Messages"]
    aws.clear_calls()
    with tempfile.TemporaryDirectory(prefix="dynagent-r7-") as scratch:
        result = _r7_invoke(aws, rig, document, sqs_event(messages, rig.arn, REGION), scratch)
    ec2 = Counter(aws.calls("ec2"))
    # The end state from moto's own records: a describe of 1,050 instances over HTTP
    # costs seconds, and nothing the function does depends on how it is read.
    instances = list(aws.ec2_backend().all_instances())
    launched = {i.id for i in instances} - set(fleet)
    live = {i.id for i in instances if i.state in ("pending", "running")}
    failures = result.get("response", {}).get("batchItemFailures", [])
    return {
        "agents": len(agents),
        "launched": len(launched),
        # One instance a pending task: any more alive is left over.
        "leaked": max(0, len(live) - sizes["instances"] - sizes["pending"]),
        "touched": len(set(fleet) - live),
        "lost": len(failures),
        "escaped": 1 if "escaped" in result else 0,
        "peak_mib": result["peak_mib"],
        "seconds": result["seconds"],
        "cpu": result["cpu_seconds"],
        "describes": ec2["DescribeInstances"],
        "ec2": sum(ec2.values()),
        "message": len(body.encode()),
        "log_line": result["log_line"],
    }


def _r7_fleet(rig: Rig, count: int, registered: datetime) -> list[str]:
    """``count`` instances of the pool whose agents registered at ``registered``."""
    tags = [(TAG_KEY, TAG_VALUE), (POOL_TAG, "a100")]
    tags.append((MARK_TAGS[Mark.REGISTERED], format_time(registered)))
    ids: list[str] = []
    while len(ids) < count:
        ids += _run_instances(rig, min(R7_RESERVATION, count - len(ids)), tags)
    return ids


def _r7_invoke(
    aws: LocalAws, rig: Rig, document: dict[str, Any], event: dict[str, Any], scratch: str
) -> dict[str, Any]:
    """The reconcile function in a child process, configured as template.yaml does it."""
    folder = Path(scratch)
    config = folder / "dynagent.yaml"
    config.write_text(json.dumps({"resource_pools": [document]}))  # JSON is YAML
    event_path, result_path = folder / "event.json", folder / "result.json"
    event_path.write_text(json.dumps(event))
    env = {
        **aws.env(),
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("shared", "functions/aws", ".")),
        # No shared AWS config of whoever runs the suite: the local AWS and nothing else.
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "DYNAGENT_CONFIG": str(config),
        "DYNAGENT_DEAD_LETTER_QUEUE_URL": rig.dead_letters,
        "DYNAGENT_SNAPSHOT_QUEUE_URL": rig.queue,
        "POWERTOOLS_SERVICE_NAME": "dynagent",
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }
    command = [sys.executable, "-m", "tests.reliability.handler_child"]
    with open(folder / "log", "wb") as log:
        done = subprocess.run(
            [*command, str(event_path), str(result_path)],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=600,
        )
    lines = (folder / "log").read_bytes().splitlines()
    if done.returncode:
        tail = b"\n".join(lines[-20:]).decode(errors="replace")
        raise RuntimeError(f"the reconcile's process exited {done.returncode}:\n{tail}")
    result: dict[str, Any] = json.loads(result_path.read_text())
    result["log_line"] = max(map(len, lines), default=0)
    return result


def _template() -> dict[str, Any]:
    """template.yaml, its CloudFormation tags (!Ref, !GetAtt, ...) read as nothing."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    document: dict[str, Any] = yaml.load((ROOT / "template.yaml").read_text(), Loader=Loader)
    return document


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


# -- R8 -------------------------------------------------------------------------------

R8_OLD, R8_NEW = "determinedai/determined-agent:0.38.0", "determinedai/determined-agent:0.39.0"
# After the upgrade, the minute each busy agent's task ends (a, b: of the old image; d:
# lost a GPU, registered 7 of its 8). c is idle, kept by min_instances.
R8_ENDS = {"a": 3, "b": 6, "d": 4}
R8_MINUTES = 10


def r8_drift_and_repair(clouds: Clouds, mode: Mode) -> Figures:
    # A batch a minute (delivered twice, once concurrently), a sweep, their describes and
    # terminates, the drain-notice sends, each throttled call retried: some 40 calls.
    figures = Figures("R8 drift and repair", "aws", limits={"calls_per_minute": 120})
    for run in range(2 if mode.long else 1):
        clean = _r8_run(clouds, inject=False, run=run)
        faulty = _r8_run(clouds, inject=mode.inject, run=run)
        figures.runs += 1
        figures.launches_expected += clean["launches"]
        figures.launches_made += faulty["launches"]
        figures.leaked += faulty["old_left"] + max(0, faulty["live"] - clean["live"])
        figures.touched += faulty["busy_killed"]
        figures.lost += faulty["lost"]
        figures.faults += faulty["faults"]
        _escaped(figures, faulty["escaped"])
        figures.converge_passes = max(figures.converge_passes, faulty["passes"])
        figures.converge_seconds = max(figures.converge_seconds, faulty["seconds"])
        figures.calls_per_minute = max(figures.calls_per_minute or 0, faulty["rate"])
        figures.extra["drained"] = figures.extra.get("drained", 0) + faulty["drained"]
    return figures


def _r8_run(clouds: Clouds, inject: bool, run: int) -> dict[str, Any]:
    """Four agents of the old agent image (two busy, one idle kept by min_instances, one
    busy that lost a GPU) when the pool moves to the new image. The bridge is played
    here: it drains what the notices name, and reports those agents retired. With
    ``inject``: every snapshot twice (a resend past the deduplication window), a second
    invocation on the same batch at once, and EC2 throttling every 5th call."""
    aws = clouds.aws()
    image = aws.image_id()
    fields = {"min_instances": 1, "max_instances": 6}
    rig = Rig(aws, pool_config(pool("a100", image, agent_docker_image=R8_OLD, **fields)))
    notices = rig.sqs.create_queue(QueueName="drain-notices")["QueueUrl"]
    reader = SqsDrainNotices(rig.sqs, notices, rig.logger)  # as the bridge reads them
    rig.publish(snapshot("a100", 1, rig.clock.now(), [(f"t{n}", 8) for n in range(4)]))
    rig.drain()
    a, b, c, d = sorted(i["InstanceId"] for i in rig.live("a100"))
    rig.config = pool_config(pool("a100", image, agent_docker_image=R8_NEW, **fields))
    rig.functions = rig.new_functions()
    rig.functions.drain_notice_queue_url = notices
    ends = {a: R8_ENDS["a"], b: R8_ENDS["b"], d: R8_ENDS["d"]}
    slots = {a: 8, b: 8, c: 8, d: 7}
    old = {a, b, c, d}
    drained: set[str] = set()
    before = rig.resources()
    if inject:
        aws.inject_errors("RequestLimitExceeded", every=5, status=503)
    aws.clear_calls()
    converge = Convergence(rig.clock)
    busy_killed, duplicates = 0, 0
    for minute in range(1, R8_MINUTES + 1):
        rig.clock.advance(minutes=1)
        live = {i["InstanceId"] for i in rig.live("a100")}
        busy = {i for i, end in ends.items() if minute < end}
        agents = [
            Agent(
                id=i,
                slots=slots.get(i, 8),
                used_slots=slots.get(i, 8) if i in busy else 0,
                enabled=i not in drained,
                draining=i in drained,
                retired=i in drained,
            )
            for i in sorted(live)
        ]
        item = builders.snapshot(
            pool_name="a100", seq=minute + 1, time=rig.clock.now(), agents=agents
        )
        rig.publish(item)
        if inject:
            rig.publish(item, copy=1)
            duplicates += 1
        while rig.deliver(_twin(rig) if inject else None):
            pass
        rig.functions.sweep()
        drained.update(notice.agent_id for _, notice in reader.receive())
        gone = live - {i["InstanceId"] for i in rig.live("a100")}
        busy_killed += len(gone & busy)
        converge.see(sorted(i["InstanceId"] for i in rig.live("a100")), passes=2)
    served = aws.faults_served()
    rate = rig.calls_per_minute()
    aws.clear_wire_faults()
    left = {i["InstanceId"] for i in rig.live("a100")}
    return {
        "launches": rig.launches_since(before),
        "live": len(left),
        "old_left": len(left & old),
        "busy_killed": busy_killed,
        "drained": len(drained),
        "lost": sum(reason is None for reason in rig.dead_lettered().values()),
        "faults": sum(served.values()) + duplicates + (rig.twins if inject else 0),
        "escaped": len(rig.delivery.escaped),
        "passes": converge.settled_passes,
        "seconds": converge.settled_seconds,
        "rate": rate,
    }


def _twin(rig: Rig) -> Any:
    """The rig's functions, with each batch handed at once to a second invocation too,
    as a redelivery after a visibility timeout does; each its own functions object."""
    twin = rig.new_functions()
    twin.drain_notice_queue_url = rig.functions.drain_notice_queue_url

    class Both:
        def reconcile_batch(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
            other = threading.Thread(target=twin.reconcile_batch, args=(event, context))
            other.start()
            result = rig.functions.reconcile_batch(event, context)
            other.join()
            rig.twins += 1
            return result

    return Both()


def _escaped(figures: Figures, count: int) -> None:
    """Exceptions out of the handler: Lambda retries the whole batch, so nothing is lost,
    but every record of it, applied or not, runs again; the handler must not raise."""
    figures.extra["escaped"] = figures.extra.get("escaped", 0) + count
    figures.limits["escaped"] = 0


SCENARIOS: dict[str, Scenario] = {
    "R1 duplicates": r1_duplicates,
    "R2 concurrency": r2_concurrency,
    "R3 bad input": r3_bad_input,
    "R4 foreign and busy": r4_foreign_and_busy,
    "R5 leftovers": r5_leftovers,
    "R6 cloud faults": r6_cloud_faults,
    "R7 scale": r7_scale,
    "R8 drift and repair": r8_drift_and_repair,
}
