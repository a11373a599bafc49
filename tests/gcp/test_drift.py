"""Upgrade day on the local Compute, through the reconcile function as Cloud Functions
runs it, with drain notices on a real Pub/Sub emulator topic: an idle min_instances
agent of the old agent image is replaced, the new VM first; a busy one is never
deleted, gets a drain notice on the drain-notice topic on every pass, and goes on the
first pass after the bridge reports it drained and empty. The GCP twin of
tests/aws/test_drift.py."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest

from dynagent.bridge.drain_notices import PubSubDrainNotices
from dynagent.core.boot.drift import read_boot_tag
from dynagent.core.drain_notices import parse_notice
from dynagent.core.snapshot import Agent
from dynagent.gcp import labels as gce_labels
from dynagent.gcp.functions import GcpFunctions
from dynagent.gcp.logs import StructuredLogger
from dynagent.testing.gcp.compute import LocalCompute
from dynagent.testing.gcp.pubsub import PubSubEmulator
from dynagent.testing.gcp.pubsub_events import message_event

from ..builders import snapshot as any_snapshot
from .helpers import config, gcp_pool_document, managed, now

OLD_AGENT = "determinedai/determined-agent:0.38.0"
NEW_AGENT = "determinedai/determined-agent:0.39.0"


class Cluster:
    """The reconcile function over the pool t4 as an admin's config says it, the config
    changed between passes as on upgrade day; snapshots in seq order. Its drain notices
    go to a topic of the emulator, with a subscription that keeps them for the test."""

    def __init__(
        self,
        compute: LocalCompute,
        emulator: PubSubEmulator,
        publisher: Any,
        subscriber: Any,
        names: Callable[[str], str],
        **provider: Any,
    ) -> None:
        self.compute, self.publisher, self.subscriber = compute, publisher, subscriber
        self.topic = emulator.topic_path(names("drain-notices"))
        self.subscription = emulator.subscription_path(names("bridge"))
        publisher.create_topic(name=self.topic)
        subscriber.create_subscription(request={"name": self.subscription, "topic": self.topic})
        self.instances = compute.instances_client()
        self.operations = compute.zone_operations_client()
        self.provider: dict[str, Any] = {}
        self.log = io.StringIO()  # the functions' structured log lines
        self.seq = 0
        self.event: Any = None
        self.functions = self.configured(**provider)

    def configured(self, **provider: Any) -> GcpFunctions:
        self.provider |= provider
        self.functions = GcpFunctions(
            config(gcp_pool_document(**self.provider)),
            instances=lambda: self.instances,
            operations=lambda: self.operations,
            publisher=self.publisher,
            drain_notice_topic=self.topic,
            sleep=lambda _: None,
            logger=StructuredLogger(self.log),
        )
        return self.functions

    def warnings(self) -> list[dict[str, Any]]:
        entries = [json.loads(line) for line in self.log.getvalue().splitlines()]
        return [entry for entry in entries if entry["severity"] == "WARNING"]

    def send(self, *agents: Agent | tuple[str, int, int], pending: Any = ()) -> None:
        """One snapshot through the function; ``again`` delivers it a second time."""
        self.seq += 1
        shot = any_snapshot(
            pool_name="t4", seq=self.seq, time=now(), agents=agents, pending=pending
        )
        self.event = message_event(
            shot.to_json().encode(), "projects/p/topics/snapshots", "projects/p/subscriptions/s"
        )
        self.again()

    def again(self) -> None:
        outcome = self.functions.reconcile_event(self.event)
        assert outcome is not None and outcome.skipped is None, outcome

    def drain_notices(self) -> list[list[str]]:
        """The agents of each message the functions published since the last call."""
        messages: list[list[str]] = []
        while True:
            received = self.subscriber.pull(
                request={"subscription": self.subscription, "max_messages": 100}, timeout=5
            ).received_messages
            if not received:
                return messages
            for item in received:
                pool, notices = parse_notice(item.message.data.decode())
                assert pool == "t4"
                messages.append([n.agent_id for n in notices])
            self.subscriber.acknowledge(
                request={"subscription": self.subscription, "ack_ids": [r.ack_id for r in received]}
            )


@pytest.fixture
def make_cluster(
    compute: LocalCompute,
    pubsub_emulator: PubSubEmulator,
    publisher: Any,
    subscriber: Any,
    names: Callable[[str], str],
) -> Callable[..., Cluster]:
    """A Cluster of the old agent image, with the provider fields given."""

    def make(**provider: Any) -> Cluster:
        fields = {"agent_docker_image": OLD_AGENT} | provider
        return Cluster(compute, pubsub_emulator, publisher, subscriber, names, **fields)

    return make


def names_of(compute: LocalCompute) -> set[str]:
    return {str(vm["name"]) for vm in managed(compute)}


def boot_tag(compute: LocalCompute, name: str) -> tuple[str, str]:
    return read_boot_tag(compute.instance(name)["labels"][gce_labels.BOOT_CONFIG_LABEL])


def test_an_idle_min_instances_agent_of_the_old_image_is_replaced_new_vm_first(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster(min_instances=1)
    cluster.send()
    (first,) = names_of(cluster.compute)
    cluster.send((first, 4, 0))
    # Upgrade day: the pool's agent image moves to the master's new version.
    cluster.configured(agent_docker_image=NEW_AGENT)
    cluster.send((first, 4, 0))
    (second,) = names_of(cluster.compute) - {first}
    assert first in names_of(cluster.compute)  # min_instances holds: the old one stays until then
    cluster.again()  # a duplicate delivery launches nothing more
    assert names_of(cluster.compute) == {first, second}
    old, new = boot_tag(cluster.compute, first), boot_tag(cluster.compute, second)
    assert old[0] != new[0]
    cluster.send((first, 4, 0))  # the new VM still boots: nothing yet
    assert names_of(cluster.compute) == {first, second}
    cluster.send((first, 4, 0), (second, 4, 0))
    assert names_of(cluster.compute) == {second}
    cluster.functions.sweep()
    assert names_of(cluster.compute) == {second}
    assert cluster.drain_notices() == []  # idle, nothing waiting: no drain was needed


def test_a_busy_agent_of_the_old_image_is_drained_and_goes_once_empty(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster(max_idle_agent_period="1h")
    cluster.send(pending=[("exp-1.trial-1", 4)])
    (agent,) = names_of(cluster.compute)
    cluster.send((agent, 4, 4))
    assert cluster.drain_notices() == []  # of the pool's config: nothing to say
    cluster.configured(agent_docker_image=NEW_AGENT)
    cluster.send((agent, 4, 4))
    assert names_of(cluster.compute) == {agent}
    assert cluster.drain_notices() == [[agent]]  # one message for the pass
    # The bridge drained it; its trial runs on, and the notice comes again each pass.
    drained = Agent(id=agent, slots=4, used_slots=4, enabled=False, draining=True, retired=True)
    cluster.send(drained)
    assert names_of(cluster.compute) == {agent} and cluster.drain_notices() == [[agent]]
    # Its trial ended: deleted on this pass, an hour before its idle period would.
    cluster.send(Agent(id=agent, slots=4, used_slots=0, enabled=False, draining=True, retired=True))
    assert names_of(cluster.compute) == set()
    assert cluster.drain_notices() == []  # gone: nothing more to drain


def upgraded_with_a_busy_agent(cluster: Cluster) -> str:
    """A pool whose one agent is busy and of the old agent image, the config new."""
    cluster.send(pending=[("exp-1.trial-1", 4)])
    (agent,) = names_of(cluster.compute)
    cluster.send((agent, 4, 4))
    cluster.configured(agent_docker_image=NEW_AGENT)
    return agent


def test_the_bridges_reader_reads_what_the_functions_published(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster()
    agent = upgraded_with_a_busy_agent(cluster)
    cluster.send((agent, 4, 4))
    reader = PubSubDrainNotices(cluster.subscriber, cluster.subscription, logging.getLogger("test"))

    [(pool, notice)] = reader.receive()

    assert (pool, notice.agent_id) == ("t4", agent)
    assert notice.reason.startswith("drifted: ") and "replaced once its tasks end" in notice.reason
    assert notice.at <= now()  # drain at once: it is to be replaced
    assert reader.receive() == []


def test_without_a_topic_the_functions_warn_that_the_bridge_is_not_told(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster()
    agent = upgraded_with_a_busy_agent(cluster)
    cluster.functions.drain_notice_topic = None

    cluster.send((agent, 4, 4))

    [warning] = cluster.warnings()
    assert warning["message"].startswith(
        "no DYNAGENT_DRAIN_NOTICE_TOPIC set: the bridge is not told to drain 1 agents"
    )
    assert warning["pool"] == "t4"
    assert names_of(cluster.compute) == {agent}  # busy: never deleted for it
    assert cluster.drain_notices() == []


def test_a_publish_that_fails_is_a_warning_and_the_pass_goes_on(
    make_cluster: Callable[..., Cluster],
    pubsub_emulator: PubSubEmulator,
    names: Callable[[str], str],
) -> None:
    cluster = make_cluster()
    agent = upgraded_with_a_busy_agent(cluster)
    missing = pubsub_emulator.topic_path(names("deleted-topic"))
    cluster.functions.drain_notice_topic = missing

    # Pending work the drained agent cannot take: the pass still launches for it.
    cluster.send((agent, 4, 4), pending=[("exp-2.trial-1", 4)])

    [warning] = cluster.warnings()
    assert warning["message"] == "could not send drain notices; the next pass sends them again"
    assert warning["topic"] == missing and "not found" in warning["error"].lower()
    assert len(names_of(cluster.compute)) == 2

    # The topic back (the next pass): the notice is sent.
    cluster.functions.drain_notice_topic = cluster.topic
    cluster.send((agent, 4, 4), pending=[("exp-2.trial-1", 4)])
    assert cluster.drain_notices() == [[agent]]
