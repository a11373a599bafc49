"""What the AWS scenarios share: a virtual clock, the queues, Lambda's event source, and
counts read back from the local AWS.

The functions run for real (``AwsFunctions`` with boto3 clients over HTTP); only time is
virtual. The clock is handed to the functions as their clock and sleep, and botocore's
retry backoff sleeps on it too (``virtual_backoff``), so a scenario spans minutes of
the functions' time in seconds of ours, and a loop that calls without sleeping shows as
calls per virtual minute.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.config import Config as BotoConfig
from botocore.retries import standard

from dynagent.aws.emf import EmfWriter
from dynagent.aws.functions import AwsFunctions, retry_delay
from dynagent.core.config import Config
from dynagent.core.snapshot import Snapshot
from dynagent.demo.rig import Discard
from dynagent.testing.aws.event_source import LambdaContext, queue_arn, sqs_event
from dynagent.testing.aws.local_aws import LocalAws
from tests import builders

REGION = "us-west-2"
TAG_KEY, TAG_VALUE = "managed-by", "dynagent-reliability"
# As dynagent.aws.clients builds the functions' clients in Lambda.
RETRIES = BotoConfig(retries={"mode": "standard", "max_attempts": 5})
# As template.yaml's snapshot queue: redriven to the dead-letter queue after 3 receives.
MAX_RECEIVE_COUNT = 3


class VirtualClock:
    """The functions' clock and sleep: sleeping moves the time on, at once."""

    def __init__(self, start: datetime | None = None) -> None:
        # moto stamps launch times from the real clock, so virtual time starts at it.
        self._now = start or datetime.now(UTC).replace(microsecond=0)
        self._lock = threading.Lock()
        self.started = self._now

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)

    def advance(self, **delta: float) -> None:
        self.sleep(timedelta(**delta).total_seconds())

    @property
    def elapsed(self) -> float:
        return (self.now() - self.started).total_seconds()


class Outcomes:
    """A logger for the functions that keeps each pass's report instead of printing it
    (a thousand bad records would flood the table's output)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def _log(self, level: str, message: str, extra: dict[str, Any] | None = None) -> None:
        with self._lock:
            self.records.append((level, message, extra or {}))

    def info(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._log("info", message, extra)

    def warning(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._log("warning", message, extra)

    def error(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._log("error", message, extra)

    def passes(self) -> list[dict[str, Any]]:
        """Reports of passes over a pool (reconciled, skipped or failed)."""
        return [extra for _, _, extra in self.records if "pool" in extra]


def virtual_backoff(client: Any, clock: VirtualClock) -> Any:
    """botocore's standard retries, sleeping on the virtual clock.

    botocore sleeps for real between attempts; here the same standard retry handler
    (same conditions, attempts, quota and backoff) decides, its delay moves the virtual
    clock, and botocore is told to retry after 0 s. Only the client changes, which the
    scenario hands to the functions like the network they run over.
    """
    name = client.meta.service_model.service_id.hyphenize()
    unique = f"retry-config-{name}"
    client.meta.events.unregister(f"needs-retry.{name}", unique_id=unique)
    attempts = client.meta.config.retries.get("total_max_attempts")
    handler = standard.register_retry_handler(client, attempts)
    client.meta.events.unregister(f"needs-retry.{name}", unique_id=unique)

    def needs_retry(**kwargs: Any) -> float | None:
        delay = handler.needs_retry(**kwargs)
        if delay is None:
            return None
        clock.sleep(delay)
        return 0.0

    client.meta.events.register(f"needs-retry.{name}", needs_retry, unique_id=unique)
    return client


# The rig's pools: its region and tag pair, an 8-GPU type, five machines at most.
RIG_POOL: dict[str, Any] = {
    "region": REGION,
    "instance_type": "p4d.24xlarge",
    "max_instances": 5,
    "tag_key": TAG_KEY,
    "tag_value": TAG_VALUE,
    "master_url": "http://10.0.0.5:8080",
}


def pool(name: str, image: str, **provider: Any) -> dict[str, Any]:
    return builders.pool_entry(name, **(RIG_POOL | {"image_id": image} | provider))


def pool_config(*pools: dict[str, Any]) -> Config:
    return builders.config(*pools)


def snapshot(
    pool: str,
    seq: int,
    time: datetime,
    pending: Iterable[tuple[str, int]] = (),
    agents: Iterable[tuple[str, int, int]] = (),
) -> Snapshot:
    return builders.snapshot(pool_name=pool, seq=seq, time=time, pending=pending, agents=agents)


@dataclass
class Delivery:
    """What the event source saw over a scenario."""

    batches: int = 0
    records: int = 0
    failed: int = 0
    # Exceptions that escaped the handler (Lambda then fails the whole batch).
    escaped: list[str] = field(default_factory=list)


class Rig:
    """One scenario's cloud: the local AWS (wiped), a FIFO snapshot queue that redrives to
    a FIFO dead-letter queue as template.yaml's does, and functions on a virtual clock."""

    def __init__(self, aws: LocalAws, config: Config, clock: VirtualClock | None = None) -> None:
        self.aws = aws
        self.config = config
        self.clock = clock or VirtualClock()
        self.image = aws.image_id()
        self.ec2 = self.client("ec2")
        self.sqs = self.client("sqs")
        fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}
        self.dead_letters = self.sqs.create_queue(QueueName="dead.fifo", Attributes=fifo)[
            "QueueUrl"
        ]
        redrive = {
            "deadLetterTargetArn": queue_arn(self.sqs, self.dead_letters),
            "maxReceiveCount": str(MAX_RECEIVE_COUNT),
        }
        self.queue = self.sqs.create_queue(
            QueueName="snapshots.fifo",
            Attributes={**fifo, "VisibilityTimeout": "1800", "RedrivePolicy": json.dumps(redrive)},
        )["QueueUrl"]
        self.arn = queue_arn(self.sqs, self.queue)
        self.logger = Outcomes()
        self.functions = self.new_functions()
        self.delivery = Delivery()
        self._dedup = 0
        # Batches a second invocation was handed at once too (R8's concurrency).
        self.twins = 0

    def client(self, service: str, clock: VirtualClock | None = None, **config: Any) -> Any:
        boto = RETRIES.merge(BotoConfig(**config)) if config else RETRIES
        return virtual_backoff(self.aws.client(service, config=boto), clock or self.clock)

    def new_functions(
        self, ec2: Any = None, sqs: Any = None, clock: VirtualClock | None = None
    ) -> AwsFunctions:
        clock = clock or self.clock
        ec2 = ec2 or self.ec2
        return AwsFunctions(
            self.config,
            ec2_for_region=lambda region: ec2,
            sqs=sqs or self.sqs,
            dead_letter_url=self.dead_letters,
            snapshot_queue_url=self.queue,
            clock=clock.now,
            sleep=clock.sleep,
            logger=self.logger,
            # The table is the suite's output: the functions' metric lines go nowhere.
            metrics=EmfWriter(Discard()),
        )

    # -- the queue and the event source ----------------------------------------------

    def send(self, body: str, group: str, dedup: str | None = None) -> str:
        """One message as a master (or anyone with access to the queue) would send it."""
        self._dedup += 1
        response = self.sqs.send_message(
            QueueUrl=self.queue,
            MessageBody=body,
            MessageGroupId=group,
            MessageDeduplicationId=dedup or f"m{self._dedup}",
        )
        return str(response["MessageId"])

    def send_all(self, messages: list[tuple[str, str]]) -> list[str]:
        """(body, group) messages in order, ten to a SendMessageBatch call while they fit
        in one request (256 KiB), as a busy sender would; their message ids."""
        ids: list[str] = []
        batch: list[tuple[str, str]] = []

        def flush() -> None:
            if not batch:
                return
            entries = []
            for n, (body, group) in enumerate(batch):
                self._dedup += 1
                entries.append(
                    {
                        "Id": str(n),
                        "MessageBody": body,
                        "MessageGroupId": group,
                        "MessageDeduplicationId": f"m{self._dedup}",
                    }
                )
            response = self.sqs.send_message_batch(QueueUrl=self.queue, Entries=entries)
            if response.get("Failed"):
                raise RuntimeError(f"the queue refused messages: {response['Failed']}")
            by_entry = {item["Id"]: item["MessageId"] for item in response["Successful"]}
            ids.extend(by_entry[str(n)] for n in range(len(batch)))
            batch.clear()

        for body, group in messages:
            size = len(body.encode()) + sum(len(b.encode()) for b, _ in batch)
            if len(batch) == 10 or size > 200_000:
                flush()
            batch.append((body, group))
        flush()
        return ids

    def publish(self, item: Snapshot, copy: int = 0) -> str:
        """A snapshot as SqsPublisher sends it; ``copy`` > 0 resends it after the queue's
        deduplication window (another deduplication id), as a restarted master may."""
        dedup = item.dedup_id if copy == 0 else f"{item.dedup_id}:copy{copy}"
        return self.send(item.to_json(), item.pool, dedup)

    def deliver(self, functions: Any = None) -> list[str]:
        """One batch of up to 10 (Lambda's batch size) to the reconcile function, as the
        event source does it: delete what succeeded; what failed comes back after the
        function's retry delay, which passes on the virtual clock. Returns the message ids
        delivered (none when the queue had nothing to give)."""
        handler = (functions or self.functions).reconcile_batch
        messages = self.sqs.receive_message(
            QueueUrl=self.queue,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            return []
        self.delivery.batches += 1
        self.delivery.records += len(messages)
        try:
            result = handler(sqs_event(messages, self.arn, REGION), LambdaContext())
            failed = {item["itemIdentifier"] for item in result.get("batchItemFailures", [])}
        except Exception as error:  # Lambda fails the whole batch
            self.delivery.escaped.append(f"{type(error).__name__}: {str(error)[:200]}")
            failed = {m["MessageId"] for m in messages}
        done = [m for m in messages if m["MessageId"] not in failed]
        again = [m for m in messages if m["MessageId"] in failed]
        if done:
            self._for_each(done, self.sqs.delete_message_batch, lambda m: {})
        if again:
            self.delivery.failed += len(again)
            count = max(int(m["Attributes"]["ApproximateReceiveCount"]) for m in again)
            self.clock.sleep(retry_delay(count))
            self._for_each(
                again, self.sqs.change_message_visibility_batch, lambda m: {"VisibilityTimeout": 0}
            )
        return [m["MessageId"] for m in messages]

    def _for_each(
        self,
        messages: list[dict[str, Any]],
        call: Callable[..., Any],
        extra: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> None:
        entries = [
            {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"], **extra(m)}
            for n, m in enumerate(messages)
        ]
        call(QueueUrl=self.queue, Entries=entries)

    def drain(self, between: float = 10.0, limit: int = 10_000) -> int:
        """Deliver until the queue is empty; ``between`` virtual seconds between batches."""
        batches = 0
        while batches < limit and self.deliver():
            batches += 1
            self.clock.sleep(between)
        return batches

    def dead_lettered(self) -> dict[str, str | None]:
        """Source message id -> the reason the function gave (None: redriven by SQS after
        MAX_RECEIVE_COUNT receives, with no reason). Empties the dead-letter queue."""
        found: dict[str, str | None] = {}
        while True:
            messages = self.sqs.receive_message(
                QueueUrl=self.dead_letters,
                MaxNumberOfMessages=10,
                MessageAttributeNames=["All"],
                VisibilityTimeout=600,
            ).get("Messages", [])
            if not messages:
                return found
            # Read once and deleted: a FIFO group with a message in flight gives no more.
            self.sqs.delete_message_batch(
                QueueUrl=self.dead_letters,
                Entries=[
                    {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                    for n, m in enumerate(messages)
                ],
            )
            for message in messages:
                attributes = message.get("MessageAttributes", {})
                source = attributes.get("source-message-id", {}).get("StringValue")
                reason = attributes.get("dynagent-reason", {}).get("StringValue")
                found[source or message["MessageId"]] = reason

    # -- what the cloud shows -----------------------------------------------------------

    def instances(self) -> list[dict[str, Any]]:
        """Every instance in the account, in any state."""
        pages = self.ec2.get_paginator("describe_instances").paginate()
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def spot_requests(self) -> list[dict[str, Any]]:
        return list(self.ec2.describe_spot_instance_requests()["SpotInstanceRequests"])

    def resources(self) -> set[str]:
        """Ids of every instance and spot request: what existed before the functions ran."""
        return {i["InstanceId"] for i in self.instances()} | {
            r["SpotInstanceRequestId"] for r in self.spot_requests()
        }

    def launches_since(self, before: set[str]) -> int:
        """Launches the functions made: new spot requests, and new instances not from one."""
        requests = [r for r in self.spot_requests() if r["SpotInstanceRequestId"] not in before]
        instances = [
            i
            for i in self.instances()
            if i["InstanceId"] not in before and not i.get("SpotInstanceRequestId")
        ]
        return len(requests) + len(instances)

    def live(self, pool_name: str | None = None) -> list[dict[str, Any]]:
        """Managed instances pending or running (of one pool, if named)."""
        return [
            i
            for i in self.instances()
            if i["State"]["Name"] in ("pending", "running")
            and (pool_name is None or tags_of(i).get("dynagent:pool") == pool_name)
        ]

    def calls_per_minute(self) -> float:
        minutes = max(self.clock.elapsed / 60, 1.0)
        return round(len(self.aws.calls()) / minutes, 1)


def tags_of(item: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in item.get("Tags", [])}


class Convergence:
    """Passes and virtual seconds until the fleet stopped changing: ``see`` after each."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.start = clock.now()
        self.passes = 0
        self.last: Any = None
        self.settled_passes = 0
        self.settled_seconds = 0.0

    def see(self, state: Any, passes: int = 1) -> None:
        self.passes += passes
        if state != self.last:
            self.last = state
            self.settled_passes = self.passes
            self.settled_seconds = (self.clock.now() - self.start).total_seconds()


def seeded(name: str) -> random.Random:
    """The scenario's random generator: the same run every time."""
    return random.Random(f"dynagent-reliability:{name}")
