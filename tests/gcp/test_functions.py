"""The Cloud Functions: ``functions/gcp/main.py`` under functions-framework, fed by the real
Pub/Sub emulator, acting on the local Compute; and the same code with CloudEvents in-process
for the rules that need an aged fleet."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynagent.gcp.functions import GcpFunctions
from dynagent.gcp.pubsub import PubSubPublisher
from dynagent.testing.gcp.compute import LocalCompute
from dynagent.testing.gcp.functions_server import FunctionServer
from dynagent.testing.gcp.pubsub import PubSubEmulator
from dynagent.testing.gcp.pubsub_events import message_event

from . import emulators
from .helpers import config, gcp_pool_document, managed, now, snapshot

ROOT = Path(__file__).resolve().parents[2]
MAIN = ROOT / "functions" / "gcp" / "main.py"
DELIVERY_TIMEOUT = 30.0


@pytest.fixture
def topics(
    pubsub_emulator: PubSubEmulator, publisher: Any, subscriber: Any, names: Any
) -> dict[str, str]:
    """A snapshot topic, and a dead-letter topic with a subscription that keeps them."""
    made = {
        "snapshots": pubsub_emulator.topic_path(names("snapshots")),
        "dead_letters": pubsub_emulator.topic_path(names("dead-letters")),
        "kept": pubsub_emulator.subscription_path(names("kept")),
    }
    publisher.create_topic(name=made["snapshots"])
    publisher.create_topic(name=made["dead_letters"])
    subscriber.create_subscription(request={"name": made["kept"], "topic": made["dead_letters"]})
    return made


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "dynagent.yaml"
    path.write_text(yaml.safe_dump({"resource_pools": [gcp_pool_document()]}))
    return path


def until(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DELIVERY_TIMEOUT
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def dead_letter_reasons(subscriber: Any, subscription: str, count: int) -> list[str]:
    """Pull until ``count`` dead letters arrived (bounded); their reasons."""
    reasons: list[str] = []
    deadline = time.monotonic() + DELIVERY_TIMEOUT
    while len(reasons) < count and time.monotonic() < deadline:
        response = subscriber.pull(subscription=subscription, max_messages=10, timeout=10)
        received = response.received_messages
        if received:
            ack_ids = [r.ack_id for r in received]
            subscriber.acknowledge(subscription=subscription, ack_ids=ack_ids)
        reasons += [r.message.attributes["dynagent-reason"] for r in received]
    return reasons


@pytest.fixture
def reconcile_server(
    compute: LocalCompute,
    pubsub_emulator: PubSubEmulator,
    subscriber: Any,
    topics: dict[str, str],
    config_file: Path,
    names: Any,
) -> Iterator[FunctionServer]:
    """main.reconcile under functions-framework, pushed to by a subscription on the topic."""
    env = {
        **pubsub_emulator.env(),
        "DYNAGENT_CONFIG": str(config_file),
        "DYNAGENT_DEAD_LETTER_TOPIC": topics["dead_letters"],
        "DYNAGENT_COMPUTE_ENDPOINT": compute.endpoint,
    }
    with FunctionServer(MAIN, "reconcile", env) as server:
        endpoint = server.push_endpoint(topics["snapshots"])
        emulators.push_subscription(
            pubsub_emulator, subscriber, topics["snapshots"], endpoint, names("push")
        )
        yield server


def test_a_published_snapshot_reaches_the_fleet(
    reconcile_server: FunctionServer, compute: LocalCompute, publisher: Any, topics: Any
) -> None:
    PubSubPublisher(topics["snapshots"], publisher).publish(
        snapshot(1042, pool="t4", pending=[("trial-17.0", 4), ("cmd-3", 1)])
    )
    vms = until(lambda: len(managed(compute)) == 2 and managed(compute), "two VMs")
    assert sorted(vm["name"] for vm in vms) == ["det-agent-t4-1042-0", "det-agent-t4-1042-1"]
    assert all(vm["labels"]["dynagent-launch-key"] == "t4-1042" for vm in vms)


def test_bad_messages_are_set_aside_and_later_snapshots_still_apply(
    reconcile_server: FunctionServer,
    compute: LocalCompute,
    publisher: Any,
    subscriber: Any,
    topics: Any,
) -> None:
    for body in (b"{not json", b'{"type": "pool.snapshot", "version": 2}', b"\xff\xfe"):
        publisher.publish(topics["snapshots"], body, ordering_key="t4").result(timeout=10)
    PubSubPublisher(topics["snapshots"], publisher).publish(snapshot(3, pool="t4"))
    PubSubPublisher(topics["snapshots"], publisher).publish(
        snapshot(4, pool="t4", pending=[("x", 4)])
    )
    until(lambda: managed(compute), "the good snapshot's VM")
    reasons = dead_letter_reasons(subscriber, topics["kept"], 3)
    assert len(reasons) == 3
    assert any("not JSON" in r for r in reasons)
    assert any("version 2" in r for r in reasons)


# The same code in-process, with CloudEvents of Eventarc's shape, on an aged fleet.


@pytest.fixture
def functions(compute: LocalCompute) -> GcpFunctions:
    instances, operations = compute.instances_client(), compute.zone_operations_client()
    return GcpFunctions(
        config(gcp_pool_document(max_disconnected_period="5m")),
        instances=lambda: instances,
        operations=lambda: operations,
        sleep=lambda _: None,
    )


def event(body: bytes) -> Any:
    return message_event(body, "projects/p/topics/snapshots", "projects/p/subscriptions/s")


def test_a_stale_snapshot_is_ignored(functions: GcpFunctions, compute: LocalCompute) -> None:
    old = snapshot(1, pool="t4", pending=[("x", 4)], time=now() - timedelta(minutes=11))
    outcome = functions.reconcile_event(event(old.to_json().encode()))
    assert outcome is not None and outcome.skipped and "max_snapshot_age" in outcome.skipped
    assert managed(compute) == []


def test_a_gang_gets_its_vms_and_one_spare_once(
    functions: GcpFunctions, compute: LocalCompute
) -> None:
    # A 12-slot trial on 4-GPU VMs: three for it and a spare (gang_spares); the event
    # delivered again, and the next snapshot with the trial still waiting, add none.
    first = event(snapshot(7, pool="t4", pending=[("trial-9.0", 12)]).to_json().encode())
    functions.reconcile_event(first)
    functions.reconcile_event(first)
    names = sorted(vm["name"] for vm in managed(compute))
    assert names == [f"det-agent-t4-7-{k}" for k in range(4)]

    later = snapshot(8, pool="t4", pending=[("trial-9.0", 12)])
    functions.reconcile_event(event(later.to_json().encode()))
    assert len(managed(compute)) == 4


def test_registration_idleness_and_the_sweep(
    functions: GcpFunctions, compute: LocalCompute
) -> None:
    functions.reconcile_event(event(snapshot(1, pool="t4", pending=[("x", 4)]).to_json().encode()))
    (vm,) = managed(compute)
    name = vm["name"]
    functions.reconcile_event(
        event(snapshot(2, pool="t4", agents=[(name, 4, 0)]).to_json().encode())
    )
    labels = compute.instance(name)["labels"]
    assert "dynagent-registered" in labels and "dynagent-idle-since" in labels

    later = now() + timedelta(minutes=21)  # the idle period has passed: only the sweep runs
    functions.clock = lambda: later
    (outcome,) = functions.sweep()
    assert outcome.plan is not None
    assert [t.instance_id for t in outcome.plan.terminations] == [name]
    assert "idle for" in outcome.plan.terminations[0].reason
    assert managed(compute) == []


def test_the_sweep_deletes_preempted_and_never_registered_vms(
    functions: GcpFunctions, compute: LocalCompute
) -> None:
    functions.reconcile_event(
        event(snapshot(1, pool="t4", pending=[("a", 4), ("b", 4)]).to_json().encode())
    )
    first, second = (vm["name"] for vm in managed(compute))
    compute.set_status(first, "TERMINATED")  # stopped (not preempt(): no lastStopTimestamp)
    compute.set_creation_time(second, now() - timedelta(minutes=25))
    (outcome,) = functions.sweep()
    assert outcome.plan is not None
    reasons = {t.instance_id: t.reason for t in outcome.plan.terminations}
    assert reasons[first] == "instance is stopped"
    assert "never registered" in reasons[second]
    assert [vm for vm in compute.instances() if vm["status"] != "STOPPING"] == []


def test_a_bad_message_near_the_size_limit_is_still_set_aside_with_its_reason(
    compute: LocalCompute, publisher: Any, subscriber: Any, topics: Any
) -> None:
    """Found by the reliability suite (R3): a body within bytes of Pub/Sub's 10 MB limit
    left no room for the dead letter's attributes; the publish failed, the exception left
    the function, and after 5 deliveries Pub/Sub forwarded it without its reason."""
    body = b"{" + b"x" * 9_999_898  # as large as the snapshot topic takes
    message_id = publisher.publish(topics["snapshots"], body, ordering_key="t4").result(timeout=60)
    functions = GcpFunctions(
        config(gcp_pool_document()),
        publisher=publisher,
        dead_letter_topic=topics["dead_letters"],
        sleep=lambda _: None,
    )
    event = message_event(body, topics["snapshots"], "s", message_id=message_id)

    assert functions.reconcile_event(event) is None
    (received,) = subscriber.pull(
        subscription=topics["kept"], max_messages=1, timeout=30
    ).received_messages
    attributes = received.message.attributes
    assert attributes["dynagent-reason"].startswith("not JSON")
    assert attributes["source-message-id"] == message_id
    assert attributes["dynagent-body-bytes"] == str(len(body))
    assert attributes["dynagent-body-sha256"] == hashlib.sha256(body).hexdigest()
    assert body.startswith(received.message.data)
