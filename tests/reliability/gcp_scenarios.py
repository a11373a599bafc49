"""The reliability scenarios on the local Compute Engine and the Pub/Sub emulator.

Each drives ``GcpFunctions`` (reconcile on CloudEvents from the emulator, and the sweep)
with the real google-cloud-compute client against ``dynagent.testing.gcp.compute`` and a virtual
clock (tests/reliability/gcp_rig.py). Faults are injected only at the doubles; with
``mode.inject`` False a scenario injects none, and its ``faults`` stays 0.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from google.cloud import compute_v1

from dynagent.bridge.drain_notices import PubSubDrainNotices
from dynagent.core.decide import decide
from dynagent.core.snapshot import Agent
from dynagent.gcp.compute import GceProvider
from tests import builders
from tests.reliability.clouds import Clouds
from tests.reliability.figures import Figures, Mode, Scenario
from tests.reliability.gcp_rig import (
    Rig,
    config,
    gcp_pool_document,
    per_minute,
    shuffled,
    snapshot,
)

GPUS = 4  # gcp_pool_document's machine: one 4-slot task per VM

# R1: a few pools, each growing its demand over a few snapshots.
R1_POOLS = ("p1", "p2", "p3")
R1_STEPS = 3


def r1_duplicates(clouds: Clouds, mode: Mode) -> Figures:
    """Every snapshot delivered three times: its first delivery's ack is lost (Pub/Sub
    delivers the same message id again) and the master re-publishes it later (a new
    message id, possibly after newer snapshots of its pool), pools interleaved at random.
    Level-triggered reconciles and deterministic VM names must insert nothing extra."""
    figures = Figures("R1 duplicates", "gcp")
    cfg = config(*(gcp_pool_document(pool) for pool in R1_POOLS))
    for run in range(5 if mode.long else 1):
        rng = random.Random(run)
        with Rig(clouds.compute(), clouds.pubsub(), cfg) as rig:
            streams = []
            for pool in R1_POOLS:
                snapshots = [
                    snapshot(
                        seq,
                        pool=pool,
                        pending=[(f"{pool}-task-{i}", GPUS) for i in range(1, seq + 1)],
                        time=rig.clock.now(),
                    )
                    for seq in range(1, R1_STEPS + 1)
                ]
                stream = list(snapshots)
                if mode.inject:  # each re-published anywhere after its first copy
                    for item in snapshots:
                        at = rng.randint(stream.index(item) + 1, len(stream))
                        stream.insert(at, item)
                streams.append(stream)
            # Pools interleave at random; each pool's own stream stays in order.
            for pool_index in shuffled(rng, [i for i, s in enumerate(streams) for _ in s]):
                rig.publish(streams[pool_index].pop(0))
            rig.goal = lambda rig=rig: all(len(rig.live(p)) >= R1_STEPS for p in R1_POOLS)
            rig.deliver(lose_first_ack=mode.inject)
            rig.read_dead_letters()
            figures.runs += 1
            figures.launches_expected += R1_STEPS * len(R1_POOLS)
            figures.launches_made += len(rig.compute.created())
            figures.leaked += sum(max(0, len(rig.live(p)) - R1_STEPS) for p in R1_POOLS)
            figures.lost += rig.lost()
            redelivered = sum(m.deliveries - 1 for m in rig.messages.values())
            republished = len(rig.messages) - R1_STEPS * len(R1_POOLS)
            figures.faults += redelivered + republished
            _note_converge(figures, rig)
            _note_escapes(figures, rig)
    return figures


# R3: one pool whose demand stays one VM; bad messages among its snapshots.
R3_POOL = "p1"
R3_GOOD_TASKS = [(f"{R3_POOL}-task-1", GPUS)]
# Pub/Sub's limit is 10,000,000 bytes per publish request; these bodies come within a
# hundred bytes of it (the topic and ordering key take the rest).
NEAR_LIMIT = 10_000_000 - 100
NESTING = 100_000


def _good(number: int, when: datetime, **fields: Any) -> dict[str, Any]:
    document = json.loads(
        snapshot(number, pool=R3_POOL, pending=R3_GOOD_TASKS, time=when).to_json()
    )
    document.update(fields)
    return document


def _bad_fields(rng: random.Random) -> dict[str, Any]:
    """One field of a snapshot given a value no reading of the contract accepts."""
    choices: dict[str, list[Any]] = {
        "seq": ["abc", -1, 1.5, [], {}, None],
        "pool": [5, "", [], None],
        "time": ["yesterday", "", [], "2026-01-01T00:00:00"],  # the last has no zone
        "pending": [
            "x",
            {"a": 1},
            [1],
            [{"task": "", "slots": GPUS}],
            [{"task": "t", "slots": -1}],
            [{"task": "t", "slots": "four"}],
        ],
        "agents": [
            ["x"],
            [{"id": "a", "slots": 1, "used_slots": 2}],
            [{"id": "", "slots": 1, "used_slots": 0}],
            [{"id": "a", "slots": -4, "used_slots": 0}],
        ],
        "type": ["other", None, 1],
        "version": [2, "1", None],
    }
    name = rng.choice(sorted(choices))
    return {name: rng.choice(choices[name])}


def r3_messages(
    rng: random.Random, when: datetime, count: int, big: int
) -> Iterator[tuple[bytes, str]]:
    """(body, what should become of it): seeded, so a run can be repeated exactly."""
    seq = 0

    def good(**fields: Any) -> bytes:
        nonlocal seq
        seq += 1
        return json.dumps(_good(seq, when, **fields)).encode()

    for _ in range(big):  # the large ones, good and bad
        padding = "x" * (NEAR_LIMIT - 1_000)
        yield good(padding=padding), "apply"  # unknown fields are ignored within version 1
        yield b"{" + b"x" * (NEAR_LIMIT - 1), "dead"
        yield (
            good(agents=[{"id": f"a{i}", "slots": 1, "used_slots": 0} for i in range(50_000)]),
            "apply",
        )
        bad_items = [{"task": "t", "slots": -1}] * 50_000
        yield json.dumps(_good(0, when, pending=bad_items)).encode(), "dead"
        yield b"[" * NESTING, "dead"
        yield (
            json.dumps(_good(0, when, pending=[])).encode()[:-1]
            + b', "x": '
            + (b"[" * NESTING + b"]" * NESTING)
            + b"}",
            "dead",
        )
    kinds = ["good", "truncated", "bytes", "not object", "fields", "pool", "future",
             "ancient", "near future"]  # fmt: skip
    for _ in range(count):
        kind = rng.choice(kinds)
        if kind == "good":
            yield good(), "apply"
        elif kind == "truncated":
            body = good()
            yield body[: rng.randrange(1, len(body) - 1)], "dead"
        elif kind == "bytes":
            yield rng.randbytes(rng.randrange(1, 200)), "dead"
        elif kind == "not object":
            # Pub/Sub refuses an empty message, so whitespace stands for nothing.
            yield rng.choice([b"[]", b'"snapshot"', b"null", b"42", b"true", b" "]), "dead"
        elif kind == "fields":
            yield json.dumps(_good(0, when, **_bad_fields(rng))).encode(), "dead"
        elif kind == "pool":
            yield json.dumps(_good(0, when, pool="no-such-pool")).encode(), "dead"
        elif kind == "future":  # a master whose clock is a day ahead
            yield good(time=(when + timedelta(days=rng.randint(1, 400))).isoformat()), "dead"
        elif kind == "ancient":  # older than max_snapshot_age: skipped, with the reason
            yield good(time=(when - timedelta(days=rng.randint(1, 4000))).isoformat()), "skip"
        else:  # clocks drift a little: a minute ahead is still applied
            yield good(time=(when + timedelta(seconds=rng.randint(1, 60))).isoformat()), "apply"


def r3_bad_input(clouds: Clouds, mode: Mode) -> Figures:
    """A seeded fuzz of messages among one pool's good snapshots: each bad one must be
    dead-lettered with its reason, each good one applied (or, if too old, skipped with
    its reason), and no exception may leave the function (Pub/Sub would retry it 5
    times, holding back the pool's later snapshots, then forward it without a reason)."""
    figures = Figures("R3 bad input", "gcp")
    cfg = config(gcp_pool_document(R3_POOL))
    for run in range(3 if mode.long else 1):
        rng = random.Random(1000 + run)
        with Rig(clouds.compute(), clouds.pubsub(), cfg) as rig:
            rig.goal = lambda rig=rig: len(rig.live(R3_POOL)) >= 1
            count, big = (400, 2) if mode.long else (200, 1)
            stream = list(r3_messages(rng, rig.clock.now(), count, big))
            if not mode.inject:
                stream = [(body, expect) for body, expect in stream if expect != "dead"]
            rig.publish_many(stream, key=R3_POOL)
            rig.deliver()
            if mode.inject:  # data that is not base64 (Pub/Sub itself never sends it)
                for text in ("!!!not base64!!!", "eyJ0eXBlIjog", "e30=" * 3 + "%"):
                    rig.deliver_raw(text)
            rig.read_dead_letters()
            figures.runs += 1
            figures.launches_expected += 1
            figures.launches_made += len(rig.compute.created())
            figures.leaked += max(0, len(rig.live(R3_POOL)) - 1)
            figures.lost += rig.lost()
            figures.faults += sum(
                1 for m in rig.messages.values() if m.expect == "dead" and m.deliveries
            )
            figures.extra["messages"] = figures.extra.get("messages", 0) + len(rig.messages)
            figures.extra["misjudged"] = figures.extra.get("misjudged", 0) + rig.misjudged()
            _note_converge(figures, rig)
            _note_escapes(figures, rig)
    figures.limits = {"misjudged": 0, "escaped": 0}
    return figures


# Where other owners' VMs come from: a second deployment in the same project, with the
# same label key and pool names, but its own label value and name prefix.
OTHER_VALUE = "other-team"


def _plant_foreign(rig: Rig, pool: str, count: int, bare: int) -> dict[str, dict[str, Any]]:
    """``count`` VMs of another deployment (our label key, another value, our pool label)
    and ``bare`` more stripped of every label; their state as they stand (name -> VM)."""
    other = config(gcp_pool_document(pool, label_value=OTHER_VALUE, name_prefix="other-"))
    provider = GceProvider(
        next(iter(other.pools.values())),
        rig.compute.instances_client(),
        rig.compute.zone_operations_client(),
        other.settings,
        clock=rig.clock.now,
        sleep=lambda _: None,
    )
    tasks = [(f"theirs-{i}", GPUS) for i in range(count + bare)]
    plan = decide(
        provider.pool,
        provider.observe(),
        snapshot(1, pool=pool, pending=tasks, time=rig.clock.now()),
        rig.clock.now(),
    )
    started = provider.launch(plan).started
    client = rig.compute.instances_client()
    for name in started[count:]:  # someone removed every label from these
        vm = rig.compute.instance(name)
        body = compute_v1.InstancesSetLabelsRequest(
            labels={}, label_fingerprint=vm["labelFingerprint"]
        )
        client.set_labels(
            project=rig.compute.project,
            zone=rig.compute.zone,
            instance=name,
            instances_set_labels_request_resource=body,
        ).result()
    client.transport.close()
    return {name: rig.compute.instance(name) for name in started}


def _foreign_touched(rig: Rig, before: dict[str, dict[str, Any]]) -> int:
    """Foreign VMs deleted, stopped or relabelled since ``before``."""
    now = {vm["name"]: vm for vm in rig.compute.instances()}
    return sum(
        1
        for name, vm in before.items()
        if name not in now
        or now[name].get("labels") != vm.get("labels")
        or now[name]["status"] != vm["status"]
    )


def _ours(rig: Rig) -> list[str]:
    return [name for name in rig.compute.created() if name.startswith("det-agent-")]


R4_POOL = "p1"


def r4_foreign_and_busy(clouds: Clouds, mode: Mode) -> Figures:
    """Another deployment's VMs (our label key, another value, the same pool label),
    VMs with no labels at all, and our own busy agents: none deleted or relabelled, the
    foreign ones never counted against max_instances (5)."""
    figures = Figures("R4 foreign and busy", "gcp")
    cfg = config(gcp_pool_document(R4_POOL))
    for _ in range(3 if mode.long else 1):
        with Rig(clouds.compute(), clouds.pubsub(), cfg) as rig:
            foreign = _plant_foreign(rig, R4_POOL, 3, 2) if mode.inject else {}
            rig.compute.clear_calls()
            tasks = [(f"task-{i}", GPUS) for i in range(5)]
            rig.publish(snapshot(1, pool=R4_POOL, pending=tasks[:2], time=rig.clock.now()))
            rig.deliver()
            busy = [vm["name"] for vm in rig.live(R4_POOL)]
            used = GPUS if mode.inject else 0  # busy agents are this scenario's fault
            agents = [(name, GPUS, used) for name in busy]
            # Two busy agents and three more tasks: room for exactly three more VMs.
            rig.publish(snapshot(2, R4_POOL, tasks[2:], agents, time=rig.clock.now()))
            rig.deliver()
            others = [vm["name"] for vm in rig.live(R4_POOL) if vm["name"] not in busy]
            # The new agents register idle; past max_idle_agent_period they go, not the busy.
            agents += [(name, GPUS, 0) for name in others]
            rig.publish(snapshot(3, R4_POOL, [], agents, time=rig.clock.now()))
            rig.deliver()
            rig.goal = lambda rig=rig, busy=busy: (
                sorted(v["name"] for v in rig.live(R4_POOL)) == sorted(busy)
            )
            rig.clock.sleep(21 * 60)
            rig.sweep()
            rig.publish(snapshot(4, R4_POOL, [], agents, time=rig.clock.now()))
            rig.deliver()
            rig.read_dead_letters()
            live = {vm["name"] for vm in rig.live(R4_POOL)}
            figures.runs += 1
            figures.launches_expected += 5
            figures.launches_made += len(_ours(rig))
            figures.leaked += len(live - set(busy) - set(foreign))
            counted = max(0, 5 - len(_ours(rig)))  # launches held back by foreign VMs
            figures.touched += _foreign_touched(rig, foreign) + len(set(busy) - live) + counted
            figures.lost += rig.lost()
            figures.faults += len(foreign) + (len(busy) if mode.inject else 0)
            _note_converge(figures, rig)
            _note_escapes(figures, rig)
    return figures


def r5_preempted(clouds: Clouds, mode: Mode) -> Figures:
    """Spot VMs preempted (TERMINATED) under busy agents: the sweep deletes them, the
    master's next snapshot (their tasks pending again) launches replacements, and the
    surviving busy VM and a foreign TERMINATED VM are left alone."""
    figures = Figures("Spot preempted", "gcp")
    cfg = config(gcp_pool_document(R4_POOL, spot=True))
    for _ in range(3 if mode.long else 1):
        with Rig(clouds.compute(), clouds.pubsub(), cfg) as rig:
            foreign = _plant_foreign(rig, R4_POOL, 1, 0)
            for name in foreign:
                rig.compute.set_status(name, "TERMINATED")
            foreign = {name: rig.compute.instance(name) for name in foreign}
            tasks = [(f"task-{i}", GPUS) for i in range(3)]
            rig.publish(snapshot(1, R4_POOL, tasks, time=rig.clock.now()))
            rig.deliver()
            names = sorted(vm["name"] for vm in rig.live(R4_POOL))
            agents = [(name, GPUS, GPUS) for name in names]
            rig.publish(snapshot(2, R4_POOL, [], agents, time=rig.clock.now()))
            rig.deliver()
            preempted = names[:2] if mode.inject else []
            for name in preempted:
                rig.compute.set_status(name, "TERMINATED")
            rig.goal = lambda rig=rig: (
                len(rig.live(R4_POOL)) == 3
                and not any(
                    vm["status"] == "TERMINATED" and vm["name"].startswith("det-agent-")
                    for vm in rig.compute.instances()
                )
            )
            rig.clock.sleep(60)
            rig.sweep()
            # The master lost their agents: their tasks are pending again.
            survivors = [a for a in agents if a[0] not in preempted]
            rig.publish(
                snapshot(3, R4_POOL, tasks[: len(preempted)], survivors, time=rig.clock.now())
            )
            rig.deliver()
            rig.read_dead_letters()
            ours = [vm for vm in rig.compute.instances() if vm["name"].startswith("det-agent-")]
            live = {vm["name"] for vm in rig.live(R4_POOL)}
            figures.runs += 1
            figures.launches_expected += 3 + len(preempted)
            figures.launches_made += len(_ours(rig))
            figures.leaked += sum(1 for vm in ours if vm["name"] not in live) + max(
                0, len(live) - 3
            )
            kept = {a[0] for a in survivors}
            figures.touched += _foreign_touched(rig, foreign) + len(kept - live)
            figures.lost += rig.lost()
            figures.faults += len(preempted)
            _note_converge(figures, rig)
            _note_escapes(figures, rig)
    return figures


R6_POOL, R6_DEMAND = "p1", 4
# Calls per minute of virtual time, at most: a pending operation is polled once a second
# (60) and lists back off; well past 2 a second means a loop lost its sleep, and would
# eat the project's Compute API rate quota, shared with everything else in it.
R6_CALLS_PER_MINUTE = 120


def r6_cloud_faults(clouds: Clouds, mode: Mode) -> Figures:
    """429 on every 7th call and 503 on every 5th insert or operation wait, the first
    insert's operation pending for 3 polls then failing with a stockout, and capacity
    for only one more VM until the third minute. The master re-publishes its snapshot
    every minute and the sweep runs every minute: the demand (4 VMs) is met with no
    extra VM, no snapshot lost, and no hot loop."""
    figures = Figures("R6 cloud faults", "gcp", limits={"calls_per_minute": R6_CALLS_PER_MINUTE})
    cfg = config(gcp_pool_document(R6_POOL))
    worst = 0.0
    for _ in range(3 if mode.long else 1):
        with Rig(clouds.compute(), clouds.pubsub(), cfg) as rig:
            compute = rig.compute
            if mode.inject:
                compute.fail_calls(429, every=7)
                compute.fail_calls(
                    503, every=5, methods=["instances.insert", "zoneOperations.wait"]
                )
                compute.hold_operations(3)
                compute.fail_next_inserts(1, "ZONE_RESOURCE_POOL_EXHAUSTED")
                compute.limit_capacity("n1-standard-32", count=2)
            tasks = [(f"task-{i}", GPUS) for i in range(R6_DEMAND)]
            # RUNNING, not just alive: a VM whose insert will fail is PROVISIONING till then.
            rig.goal = lambda rig=rig: (
                sum(vm["status"] == "RUNNING" for vm in rig.live(R6_POOL)) >= R6_DEMAND
            )
            for minute in range(15):
                if minute == 3:
                    compute.clear_capacity_limits()
                    compute.hold_operations(0)
                rig.publish(snapshot(minute + 1, R6_POOL, tasks, time=rig.clock.now()))
                rig.deliver()
                rig.sweep()
                if rig.reached:
                    break
                rig.clock.sleep(60)
                # A minute on, the cloud has finished what it was doing, polled or not.
                compute.finish_operations()
            rig.read_dead_letters()
            figures.runs += 1
            figures.launches_expected += R6_DEMAND
            figures.launches_made += len(_ours(rig))
            figures.leaked += max(0, len(rig.live(R6_POOL)) - R6_DEMAND)
            figures.lost += rig.lost()
            refused = sum(
                str(extra.get("launch_error", "")).count("ZONE_RESOURCE_POOL_EXHAUSTED")
                for _, _, extra in rig.log.records
            )
            figures.faults += compute.faults_served() + refused
            calls = len(compute.call_names())
            worst = max(worst, per_minute(calls, rig.clock.elapsed))
            figures.extra["sweep errors"] = figures.extra.get("sweep errors", 0) + sum(
                1 for level, message, _ in rig.log.records if message == "pool pass failed"
            )
            _note_converge(figures, rig)
            _note_escapes(figures, rig)
    figures.calls_per_minute = worst
    return figures


# R8: upgrade day on a pool of four agents of the old agent image.
R8_POOL = "p1"
R8_OLD, R8_NEW = "determinedai/determined-agent:0.38.0", "determinedai/determined-agent:0.39.0"
# The minute each busy agent's task ends: a and b of the old image, d lost a GPU
# (registered 3 of its 4); c is idle, kept by min_instances.
R8_ENDS = {"a": 3, "b": 6, "d": 4}
R8_MINUTES = 10


def r8_drift_and_repair(clouds: Clouds, mode: Mode) -> Figures:
    """The pool moves to a new agent image while three of its four agents are busy (one
    of them lost a GPU) and the fourth idle is kept by min_instances. The bridge is
    played here: it drains the agents the functions' notices (on a Pub/Sub topic) name,
    and reports them retired. Faults: each snapshot's first ack lost (delivered again)
    and the snapshot re-published, and Compute answering 429 every 7th call. No busy
    agent goes, every old one does, and only the idle one's replacement is launched."""
    figures = Figures("R8 drift and repair", "gcp")
    fields = {"min_instances": 1, "max_instances": 6}
    for _ in range(2 if mode.long else 1):
        old = config(gcp_pool_document(R8_POOL, agent_docker_image=R8_OLD, **fields))
        with Rig(clouds.compute(), clouds.pubsub(), old) as rig:
            tasks = [(f"task-{i}", GPUS) for i in range(4)]
            rig.publish(snapshot(1, pool=R8_POOL, pending=tasks, time=rig.clock.now()))
            rig.deliver()
            a, b, c, d = sorted(vm["name"] for vm in rig.live(R8_POOL))
            new = config(gcp_pool_document(R8_POOL, agent_docker_image=R8_NEW, **fields))
            rig.functions.config = new.for_cloud("gcp")
            topic = rig.emulator.topic_path(f"drain-{rig.topic.rsplit('-', 1)[1]}")
            subscription = rig.emulator.subscription_path(f"bridge-{rig.topic.rsplit('-', 1)[1]}")
            rig.publisher.create_topic(name=topic)
            rig.subscriber.create_subscription(request={"name": subscription, "topic": topic})
            rig.functions.drain_notice_topic = topic
            reader = PubSubDrainNotices(rig.subscriber, subscription, rig.log)
            ends = {a: R8_ENDS["a"], b: R8_ENDS["b"], d: R8_ENDS["d"]}
            slots = {d: GPUS - 1}
            drained: set[str] = set()
            created = len(_ours(rig))
            if mode.inject:
                rig.compute.fail_calls(429, every=7)
            busy_killed, republished = 0, 0
            old_agents = {a, b, c, d}
            rig.goal = lambda rig=rig, old_agents=old_agents: (
                not old_agents & {v["name"] for v in rig.live(R8_POOL)}
            )
            for minute in range(1, R8_MINUTES + 1):
                rig.clock.sleep(60)
                live = {vm["name"] for vm in rig.live(R8_POOL)}
                busy = {name for name, end in ends.items() if minute < end}
                agents = [
                    Agent(
                        id=name,
                        slots=slots.get(name, GPUS),
                        used_slots=slots.get(name, GPUS) if name in busy else 0,
                        enabled=name not in drained,
                        draining=name in drained,
                        retired=name in drained,
                    )
                    for name in sorted(live)
                ]
                item = builders.snapshot(
                    pool_name=R8_POOL, seq=minute + 1, time=rig.clock.now(), agents=agents
                )
                rig.publish(item)
                if mode.inject:
                    rig.publish(item)
                    republished += 1
                rig.deliver(lose_first_ack=mode.inject)
                rig.sweep()
                drained.update(notice.agent_id for _, notice in reader.receive())
                busy_killed += len((live - {v["name"] for v in rig.live(R8_POOL)}) & busy)
            rig.subscriber.delete_subscription(subscription=subscription)
            rig.publisher.delete_topic(topic=topic)
            rig.read_dead_letters()
            left = {vm["name"] for vm in rig.live(R8_POOL)}
            figures.runs += 1
            figures.launches_expected += 1  # the idle min_instances agent's replacement
            figures.launches_made += len(_ours(rig)) - created
            figures.leaked += len(left & old_agents) + max(0, len(left) - 1)
            figures.touched += busy_killed
            figures.lost += rig.lost()
            redelivered = sum(m.deliveries - 1 for m in rig.messages.values())
            faults = rig.compute.faults_served() + redelivered + republished
            figures.faults += faults if mode.inject else 0
            figures.extra["drained"] = figures.extra.get("drained", 0) + len(drained)
            _note_converge(figures, rig)
            _note_escapes(figures, rig)
    return figures


def _note_converge(figures: Figures, rig: Rig) -> None:
    passes, seconds = rig.converge()
    figures.converge_passes = max(figures.converge_passes, passes)
    figures.converge_seconds = max(figures.converge_seconds, seconds)


def _note_escapes(figures: Figures, rig: Rig) -> None:
    """Exceptions out of the function: each one is a retry Pub/Sub must pay for."""
    escaped = sum(len(m.escaped) for m in rig.messages.values())
    figures.extra["escaped"] = figures.extra.get("escaped", 0) + escaped


SCENARIOS: dict[str, Scenario] = {
    "R1 duplicates": r1_duplicates,
    "R3 bad input": r3_bad_input,
    "R4 foreign and busy": r4_foreign_and_busy,
    "R6 cloud faults": r6_cloud_faults,
    "Spot preempted": r5_preempted,
    "R8 drift and repair": r8_drift_and_repair,
}
