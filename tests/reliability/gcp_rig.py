"""What the GCP scenarios run on: the real functions' code, the local Compute over HTTP,
snapshots through the real Pub/Sub emulator, and a virtual clock.

Eventarc is played by ``Delivery``: it pulls from the emulator, hands each message to
``GcpFunctions.reconcile_event`` as the CloudEvent Eventarc builds, acks it when the
function returns and nacks it when the function raises. A nacked message comes back
after the trigger's retry backoff (Eventarc's Pub/Sub subscriptions retry from 10 s,
doubling, up to 300 s as deployed), which moves the virtual clock instead of sleeping.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from dynagent.core.config import Config
from dynagent.core.snapshot import Snapshot
from dynagent.demo.rig import Discard
from dynagent.gcp.functions import GcpFunctions
from dynagent.gcp.labels import POOL_LABEL
from dynagent.gcp.logs import MetricLog
from dynagent.gcp.pubsub import REASON_ATTRIBUTE, PubSubPublisher
from dynagent.run.reconcile import Outcome
from dynagent.testing.gcp.compute import LocalCompute
from dynagent.testing.gcp.pubsub import PubSubEmulator
from dynagent.testing.gcp.pubsub_events import cloud_event, message_event
from tests.gcp.helpers import config, gcp_pool_document, snapshot

__all__ = ["config", "gcp_pool_document", "snapshot"]

LABEL_KEY, LABEL_VALUE = "managed-by", "dynagent-test"  # gcp_pool_document's pair
# The reconcile trigger's subscription as infra/gcp/deploy.sh sets it: retried after 10 s
# doubling up to 300 s, and after 5 deliveries forwarded by Pub/Sub to the dead-letter
# topic, with no reason attached (so such a message counts as lost).
RETRY_MIN, RETRY_MAX = 10.0, 300.0
MAX_DELIVERIES = 5
# A pull on an empty subscription waits this long: pulls happen only while messages are out.
PULL_TIMEOUT = 10.0


class VirtualClock:
    """The functions' clock and sleep: sleeping moves the time, nothing waits for real.

    It starts at the real time, because the local Compute stamps VMs with it."""

    def __init__(self) -> None:
        self.start = datetime.now(UTC).replace(microsecond=0)
        self.at = self.start

    def now(self) -> datetime:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)

    @property
    def elapsed(self) -> float:
        return (self.at - self.start).total_seconds()


class Log:
    """The functions' logger: keeps the records, prints nothing."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, dict[str, Any]]] = []

    def _keep(self, level: str, message: str, extra: dict[str, Any] | None = None) -> None:
        self.records.append((level, message, extra or {}))

    def info(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._keep("info", message, extra)

    def warning(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._keep("warning", message, extra)

    def error(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._keep("error", message, extra)


_CLIENTS: dict[int, tuple[Any, Any, Any]] = {}


def _pubsub_clients(emulator: PubSubEmulator) -> tuple[Any, Any]:
    """One ordered publisher and one subscriber per emulator: the emulator closes them."""
    if id(emulator) not in _CLIENTS:
        from google.cloud import pubsub_v1  # type: ignore[attr-defined]

        ordered = pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
        # Sent at once rather than batched for 10 ms: the function waits on each dead
        # letter, and hundreds of them would add seconds of wall time.
        prompt = pubsub_v1.types.BatchSettings(max_latency=0.0005)
        _CLIENTS[id(emulator)] = (
            emulator,
            emulator.publisher(publisher_options=ordered, batch_settings=prompt),
            emulator.subscriber(),
        )
    _, publisher, subscriber = _CLIENTS[id(emulator)]
    return publisher, subscriber


@dataclass
class Message:
    """What became of one published message."""

    body: bytes
    expect: str = "apply"  # "apply", "skip" (on purpose, with a reason) or "dead"
    deliveries: int = 0
    verdict: str | None = None  # "apply", "skip" or "dead", once acked
    reason: str | None = None  # the dead letter's reason, once read back
    escaped: list[str] = field(default_factory=list)  # exceptions out of the function


class Rig:
    """One scenario run: fresh topics on the emulator, a reset Compute, the functions."""

    def __init__(self, compute: LocalCompute, emulator: PubSubEmulator, cfg: Config) -> None:
        self.compute = compute
        compute.clear_calls()
        self.emulator = emulator
        self.publisher, self.subscriber = _pubsub_clients(emulator)
        suffix = uuid.uuid4().hex[:8]
        self.topic = emulator.topic_path(f"snapshots-{suffix}")
        self.subscription = emulator.subscription_path(f"reconcile-{suffix}")
        self.dead_topic = emulator.topic_path(f"dead-letters-{suffix}")
        self.dead_subscription = emulator.subscription_path(f"dead-letters-{suffix}")
        for topic, subscription in (
            (self.topic, self.subscription),
            (self.dead_topic, self.dead_subscription),
        ):
            self.publisher.create_topic(name=topic)
            self.subscriber.create_subscription(
                request={"name": subscription, "topic": topic, "enable_message_ordering": True}
            )
        self.clock = VirtualClock()
        self.log = Log()
        instances, operations = compute.instances_client(), compute.zone_operations_client()
        self._clients = (instances, operations)
        self.functions = GcpFunctions(
            cfg,
            instances=lambda: instances,
            operations=lambda: operations,
            publisher=self.publisher,
            dead_letter_topic=self.dead_topic,
            clock=self.clock.now,
            sleep=self.clock.sleep,
            logger=self.log,
            # The table is the suite's output: the functions' metric lines go nowhere.
            metrics=MetricLog(Discard()),
        )
        self.messages: dict[str, Message] = {}
        self.passes = 0
        # When the fleet is right, and the passes and virtual seconds it first took.
        self.goal: Callable[[], bool] = lambda: False
        self.reached: tuple[int, float] | None = None

    def close(self) -> None:
        for subscription in (self.subscription, self.dead_subscription):
            self.subscriber.delete_subscription(subscription=subscription)
        for topic in (self.topic, self.dead_topic):
            self.publisher.delete_topic(topic=topic)
        for client in self._clients:
            client.transport.close()

    def __enter__(self) -> Rig:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # Publishing

    def publish_many(self, bodies: Iterable[tuple[bytes, str]], key: str) -> None:
        """Publish raw bodies on one ordering key, in order, waiting once for them all."""
        sent = [
            (self.publisher.publish(self.topic, body, ordering_key=key), body, expect)
            for body, expect in bodies
        ]
        for future, body, expect in sent:
            self.messages[str(future.result(timeout=60))] = Message(body, expect)

    def publish(self, item: Snapshot | bytes, expect: str = "apply", key: str = "") -> str:
        """Publish a snapshot (as the master's publisher does) or raw bytes on ``key``."""
        if isinstance(item, Snapshot):
            message_id = PubSubPublisher(self.topic, self.publisher).publish(item)
            body = item.to_json().encode()
        else:
            future = self.publisher.publish(self.topic, item, ordering_key=key)
            message_id, body = str(future.result(timeout=60)), item
        self.messages[message_id] = Message(body, expect)
        return message_id

    @property
    def outstanding(self) -> int:
        return sum(1 for m in self.messages.values() if m.verdict is None)

    # Delivery, as Eventarc does it

    def deliver(self, lose_first_ack: bool = False) -> None:
        """Deliver until every published message is acked (or given up on).

        ``lose_first_ack``: the first delivery of each message is processed but its ack
        is lost, so Pub/Sub delivers the same message id again.
        """
        backoff: dict[str, float] = {}
        while self.outstanding:
            response = self.subscriber.pull(
                subscription=self.subscription, max_messages=10, timeout=PULL_TIMEOUT
            )
            acks, nacks = [], []
            for received in response.received_messages:
                message_id = received.message.message_id
                message = self.messages[message_id]
                message.deliveries += 1
                event = cloud_event(received, self.topic, self.subscription)
                self.passes += 1
                try:
                    outcome = self.functions.reconcile_event(event)
                except Exception as error:  # Eventarc nacks it: redelivered after backoff
                    message.escaped.append(f"{type(error).__name__}: {error}"[:300])
                    if message.deliveries >= MAX_DELIVERIES:
                        message.verdict = "forwarded"  # by Pub/Sub, without a reason
                        acks.append(received.ack_id)
                    else:
                        nacks.append(received.ack_id)
                        wait = backoff.get(message_id, RETRY_MIN / 2) * 2
                        backoff[message_id] = min(wait, RETRY_MAX)
                        self.clock.sleep(backoff[message_id])
                    continue
                self._check_goal()
                if lose_first_ack and message.deliveries == 1:
                    nacks.append(received.ack_id)
                    continue
                message.verdict = _verdict(outcome)
                acks.append(received.ack_id)
            if acks:
                self.subscriber.acknowledge(subscription=self.subscription, ack_ids=acks)
            if nacks:
                self.subscriber.modify_ack_deadline(
                    subscription=self.subscription, ack_ids=nacks, ack_deadline_seconds=0
                )

    def deliver_raw(self, data_field: str, expect: str = "dead") -> str:
        """Hand the function an event whose ``message.data`` is this text as it arrives
        (bad base64 cannot be sent through Pub/Sub, which encodes for us)."""
        message_id = f"raw-{len(self.messages)}"
        event = message_event(b"", self.topic, self.subscription, message_id=message_id)
        event.data["message"]["data"] = data_field
        message = self.messages[message_id] = Message(data_field.encode(), expect)
        message.deliveries += 1
        self.passes += 1
        try:
            message.verdict = _verdict(self.functions.reconcile_event(event))
        except Exception as error:
            message.escaped.append(f"{type(error).__name__}: {error}"[:300])
        return message_id

    def read_dead_letters(self) -> None:
        """Match each dead letter to its message by the id it carries."""
        expected = sum(1 for m in self.messages.values() if m.verdict == "dead")
        # Distinct sources: with ordering, a nack redelivers the key's later messages,
        # acked ones too (as Pub/Sub does), so some are set aside twice.
        found: set[str] = set()
        while len(found) < expected:
            response = self.subscriber.pull(
                subscription=self.dead_subscription, max_messages=100, timeout=PULL_TIMEOUT
            )
            if not response.received_messages:
                break
            for received in response.received_messages:
                source = received.message.attributes.get("source-message-id", "")
                if source in self.messages:
                    self.messages[source].reason = received.message.attributes.get(REASON_ATTRIBUTE)
                    found.add(source)
            self.subscriber.acknowledge(
                subscription=self.dead_subscription,
                ack_ids=[r.ack_id for r in response.received_messages],
            )

    def lost(self) -> int:
        """Messages neither applied (or skipped on purpose) nor dead-lettered with a reason."""
        return sum(
            1
            for m in self.messages.values()
            if m.verdict not in ("apply", "skip") and not (m.verdict == "dead" and m.reason)
        )

    def misjudged(self) -> int:
        """Messages handled otherwise than they should be: a bad one applied, a good one
        dead-lettered."""
        return sum(1 for m in self.messages.values() if m.verdict and m.verdict != m.expect)

    def sweep(self) -> list[Outcome]:
        self.passes += 1
        outcomes = self.functions.sweep()
        self._check_goal()
        return outcomes

    def _check_goal(self) -> None:
        if self.reached is None and self.goal():
            self.reached = (self.passes, self.clock.elapsed)

    def converge(self) -> tuple[int, float]:
        """Passes and virtual seconds until the goal held; all of the run if it never did."""
        return self.reached or (self.passes, self.clock.elapsed)

    # What the cloud shows

    def live(self, pool: str) -> list[dict[str, Any]]:
        """The pool's VMs that are ours and alive (not stopped, not on their way out)."""
        return [
            vm
            for vm in self.compute.instances()
            if vm.get("labels", {}).get(LABEL_KEY) == LABEL_VALUE
            and vm.get("labels", {}).get(POOL_LABEL) == pool
            and vm["status"] in ("PROVISIONING", "STAGING", "RUNNING")
        ]

    def calls(self) -> Counter[str]:
        return Counter(self.compute.call_names())


def _verdict(outcome: Outcome | None) -> str:
    if outcome is None:
        return "dead"
    return "skip" if outcome.skipped else "apply"


def per_minute(calls: int, seconds: float) -> float:
    """Calls per minute of virtual time; a run shorter than a minute counts as one."""
    return calls / max(seconds / 60.0, 1.0)


def shuffled(rng: Any, items: Iterable[Any]) -> list[Any]:
    found = list(items)
    rng.shuffle(found)
    return found
