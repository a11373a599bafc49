"""The bridge reading drain notices from a Pub/Sub subscription (``PubSubDrainNotices``),
on the real emulator: each notice once, a bad message dropped with an error line,
everything acknowledged, more than one pull's worth in one pass; the reader the bridge
command builds for ``--drain-notices projects/P/subscriptions/S``; and the functions
telling it of a GCP reservation's end (drifted agents: test_drift.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynagent.bridge.command import drain_notices_from
from dynagent.bridge.drain_notices import MAX_PULLED, PubSubDrainNotices
from dynagent.core.drain_notices import notice_message
from dynagent.core.plan import DrainNotice
from dynagent.gcp.functions import GcpFunctions
from dynagent.testing.gcp.compute import LocalCompute
from dynagent.testing.gcp.pubsub import PubSubEmulator
from dynagent.testing.gcp.pubsub_events import message_event

from .helpers import ZONE, config, gcp_pool_document, now, snapshot

LOGGER = "dynagent.bridge"


@pytest.fixture
def subscription(
    pubsub_emulator: PubSubEmulator, publisher: Any, subscriber: Any, names: Callable[[str], str]
) -> tuple[str, str]:
    """A drain-notice topic and the bridge's subscription on it, as deploy.sh makes them."""
    topic = pubsub_emulator.topic_path(names("drain-notices"))
    path = pubsub_emulator.subscription_path(names("drain-notices"))
    publisher.create_topic(name=topic)
    subscriber.create_subscription(request={"name": path, "topic": topic})
    return topic, path


def notice(agent: str, minutes: int = 10) -> DrainNotice:
    return DrainNotice(agent, now() + timedelta(minutes=minutes), f"{agent} must go")


def publish(publisher: Any, topic: str, *bodies: str | bytes) -> None:
    futures = [
        publisher.publish(topic, body if isinstance(body, bytes) else body.encode())
        for body in bodies
    ]
    for future in futures:
        future.result(timeout=30)


def test_notices_are_read_once_and_a_bad_message_is_dropped_with_an_error(
    publisher: Any,
    subscriber: Any,
    subscription: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, path = subscription
    first, second, third = notice("det-agent-t4-1-0"), notice("det-agent-t4-1-1"), notice("x", 5)
    publish(
        publisher,
        topic,
        notice_message("t4", [first, second], now()),
        '{"type": "pool.snapshot", "version": 1}',
        notice_message("a100", [third], now()),
    )
    notices = PubSubDrainNotices(subscriber, path, logging.getLogger(LOGGER))

    with caplog.at_level(logging.ERROR, logger=LOGGER):
        received = notices.receive()

    assert sorted(received, key=lambda pair: pair[1].agent_id) == [
        ("t4", first),
        ("t4", second),
        ("a100", third),
    ]
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert error.getMessage() == "not a drain notice, dropped: type is not 'pool.drain'"
    # Everything read was acknowledged, the bad message too: nothing comes back.
    assert notices.receive() == []


def test_a_pass_reads_more_than_one_pulls_worth(
    publisher: Any, subscriber: Any, subscription: tuple[str, str]
) -> None:
    topic, path = subscription
    agents = [f"det-agent-t4-{k}" for k in range(MAX_PULLED + 20)]
    publish(publisher, topic, *(notice_message("t4", [notice(a)], now()) for a in agents))

    received = PubSubDrainNotices(subscriber, path, logging.getLogger(LOGGER)).receive()

    assert sorted(n.agent_id for _, n in received) == sorted(agents)


def test_a_message_that_is_not_text_is_dropped_too(
    publisher: Any,
    subscriber: Any,
    subscription: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, path = subscription
    publish(publisher, topic, b"\xff\xfe")
    notices = PubSubDrainNotices(subscriber, path, logging.getLogger(LOGGER))

    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert notices.receive() == []

    [error] = [r.getMessage() for r in caplog.records]
    assert error.startswith("not a drain notice, dropped: not JSON")
    assert notices.receive() == []


def test_the_bridge_command_reads_a_subscription_through_the_emulator_host(
    pubsub_emulator: PubSubEmulator,
    publisher: Any,
    subscription: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What ``dynagent bridge --drain-notices projects/P/subscriptions/S`` reads with: a
    SubscriberClient of its own, pointed at the emulator by PUBSUB_EMULATOR_HOST."""
    topic, path = subscription
    for name, value in pubsub_emulator.env().items():
        monkeypatch.setenv(name, value)
    reader = drain_notices_from(path, None)
    assert isinstance(reader, PubSubDrainNotices)
    try:
        publish(publisher, topic, notice_message("t4", [notice("det-agent-t4-7-0")], now()))
        assert [(pool, n.agent_id) for pool, n in reader.receive()] == [("t4", "det-agent-t4-7-0")]
    finally:
        reader.subscriber.close()


def test_the_functions_tell_the_bridge_of_a_reservations_end(
    compute: LocalCompute,
    publisher: Any,
    subscriber: Any,
    subscription: tuple[str, str],
) -> None:
    # Deleted in 45 minutes: its VMs count as going from 40 minutes before, and the
    # bridge is told from 10 minutes before that.
    ends = datetime.now(UTC) + timedelta(minutes=45)
    t4 = [("nvidia-tesla-t4", 4)]
    compute.create_reservation("t4-reserved", ZONE, "n1-standard-32", 2, accelerators=t4, end=ends)
    topic, path = subscription
    functions = GcpFunctions(
        config(gcp_pool_document(reservations=["t4-reserved"])),
        instances=compute.instances_client,
        operations=compute.zone_operations_client,
        reservations=compute.reservations_client,
        publisher=publisher,
        drain_notice_topic=topic,
        sleep=lambda _: None,
    )

    def deliver(body: bytes) -> None:
        functions.reconcile_event(message_event(body, "projects/p/topics/s", "s"))

    deliver(snapshot(1, pool="t4", pending=[("x", 4)]).to_json().encode())
    (vm,) = [v for v in compute.instances() if v["status"] != "TERMINATED"]
    deliver(snapshot(2, pool="t4", agents=[(vm["name"], 4, 4)]).to_json().encode())

    [(pool, notice)] = PubSubDrainNotices(subscriber, path, logging.getLogger(LOGGER)).receive()
    assert (pool, notice.agent_id) == ("t4", vm["name"])
    assert "t4-reserved" in notice.reason
    # Drained 40 minutes before the reservation ends, when its VMs count as going.
    assert abs(notice.at - (ends - timedelta(minutes=40))) < timedelta(minutes=1)


def test_the_functions_take_the_topic_deploy_sh_names_in_their_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "dynagent.yaml"
    path.write_text(yaml.safe_dump({"resource_pools": [gcp_pool_document()]}))
    topic = "projects/my-gpu-project/topics/dynagent-drain-notices"
    monkeypatch.setenv("DYNAGENT_CONFIG", str(path))
    monkeypatch.setenv("DYNAGENT_DRAIN_NOTICE_TOPIC", topic)
    assert GcpFunctions.from_environment().drain_notice_topic == topic
    monkeypatch.setenv("DYNAGENT_DRAIN_NOTICE_TOPIC", "")
    assert GcpFunctions.from_environment().drain_notice_topic is None
