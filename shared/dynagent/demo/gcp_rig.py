"""The demo on a local GCP: the Compute fake and the Pub/Sub emulator, the functions' code.

Snapshots go through the real Pub/Sub emulator with the pool as ordering key; each is
handed to the reconcile function as the CloudEvent Eventarc would deliver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from dynagent.core.config import Config
from dynagent.core.fleet import Mark
from dynagent.core.snapshot import Snapshot
from dynagent.demo.pools import demo_config
from dynagent.demo.rig import Discard, FleetRow
from dynagent.gcp.functions import GcpFunctions
from dynagent.gcp.labels import LAUNCH_KEY_LABEL, MARK_LABELS, POOL_LABEL, parse_time
from dynagent.gcp.logs import MetricLog
from dynagent.gcp.pubsub import REASON_ATTRIBUTE, PubSubPublisher
from dynagent.testing.gcp.compute import LocalCompute
from dynagent.testing.gcp.pubsub import PubSubEmulator
from dynagent.testing.gcp.pubsub_events import deliver_pulled
from dynagent.testing.gcp.pubsub_topics import LocalPubSubTopics

TOPIC, DEAD_LETTER_TOPIC = "dynagent-snapshots", "dynagent-dead-letters"


@contextmanager
def gcp_rig(clock: Callable[[], datetime], logger: Any) -> Iterator[GcpRig]:
    """Start the Compute fake and the Pub/Sub emulator; stop both however the demo ends."""
    with LocalCompute() as compute, PubSubEmulator() as pubsub, LocalPubSubTopics() as topics:
        config = demo_config("gcp", PROJECT=compute.project)
        yield GcpRig(compute, pubsub, config, clock, logger, topics)


class GcpRig:
    def __init__(
        self,
        compute: LocalCompute,
        pubsub: PubSubEmulator,
        config: Config,
        clock: Callable[[], datetime],
        logger: Any,
        topics: LocalPubSubTopics | None = None,
    ) -> None:
        from google.cloud import pubsub_v1  # type: ignore[attr-defined]

        self.compute = compute
        self.description = (
            f"local Compute Engine on {compute.endpoint}, Pub/Sub emulator on {pubsub.host}"
        )
        self.pool = next(iter(config.pools.values()))
        ordered = pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
        self.client = pubsub.publisher(publisher_options=ordered)
        self.subscriber = pubsub.subscriber()
        self.topic = pubsub.topic_path(TOPIC)
        self.subscription = pubsub.subscription_path("dynagent-reconcile")
        self.dead_letters_subscription = pubsub.subscription_path("dynagent-dead-letters")
        self._topics(pubsub)
        self.publisher = PubSubPublisher(self.topic, self.client)
        # Messages sent and not yet delivered: a pull on an empty subscription waits
        # for its whole timeout, so the rig pulls only as many as it knows are there.
        self.outstanding = 0
        instances, operations = compute.instances_client(), compute.zone_operations_client()
        # The snapshot topic's labels (the status summaries) are served by a local
        # topics API: the emulator does not take labels in UpdateTopic.
        self.topics = topics.client() if topics is not None else None
        self.topics_endpoint = topics.endpoint if topics is not None else ""
        if self.topics is not None:
            self.topics.create_topic(name=self.topic)
        self.functions = GcpFunctions(
            config,
            instances=lambda: instances,
            operations=lambda: operations,
            publisher=self.client,
            dead_letter_topic=pubsub.topic_path(DEAD_LETTER_TOPIC),
            snapshot_topic=self.topic if self.topics is not None else None,
            topics=self.topics,
            clock=clock,
            sleep=lambda seconds: None,
            logger=logger,
            metrics=MetricLog(Discard()),
        )

    def _topics(self, pubsub: PubSubEmulator) -> None:
        for topic, subscription in (
            (self.topic, self.subscription),
            (pubsub.topic_path(DEAD_LETTER_TOPIC), self.dead_letters_subscription),
        ):
            self.client.create_topic(name=topic)
            self.subscriber.create_subscription(
                request={"name": subscription, "topic": topic, "enable_message_ordering": True}
            )

    def publish(self, snapshot: Snapshot) -> None:
        self.publisher.publish(snapshot)
        self.outstanding += 1

    def publish_corrupt(self, body: bytes) -> None:
        self.client.publish(self.topic, body, ordering_key=self.pool.name).result(timeout=30)
        self.outstanding += 1

    def deliver(self) -> None:
        reconcile = self.functions.reconcile_event
        while self.outstanding > 0:
            self.outstanding -= deliver_pulled(
                self.subscriber, self.subscription, self.topic, reconcile
            )

    def sweep(self) -> None:
        self.functions.sweep()

    def fleet(self) -> list[FleetRow]:
        rows = []
        for vm in self.compute.instances():
            labels = vm.get("labels", {})
            if labels.get(POOL_LABEL) != self.pool.name:
                continue
            rows.append(
                FleetRow(
                    id=vm["name"],
                    state=vm["status"],
                    alive=vm["status"] in ("PROVISIONING", "STAGING", "RUNNING"),
                    launch_key=labels.get(LAUNCH_KEY_LABEL, "-"),
                    registered=_when(labels.get(MARK_LABELS[Mark.REGISTERED])),
                    idle_since=_when(labels.get(MARK_LABELS[Mark.IDLE_SINCE])),
                )
            )
        return rows

    def set_launch_time(self, instance_id: str, when: datetime) -> None:
        self.compute.set_creation_time(instance_id, when)

    def dead_letters(self) -> list[str]:
        response = self.subscriber.pull(
            subscription=self.dead_letters_subscription, max_messages=10, timeout=10
        )
        return [r.message.attributes[REASON_ATTRIBUTE] for r in response.received_messages]


def _when(label: str | None) -> str:
    """Labels hold epoch seconds; the table shows them as times."""
    when = parse_time(label) if label else None
    return f"{when:%Y-%m-%dT%H:%M:%SZ}" if when else "-"
