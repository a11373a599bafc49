"""What the Lambda functions run: an SQS batch of snapshots, the sweep, spot notices.

``functions/aws/app.py`` only wires these to Lambda; everything here takes its clients,
clock and logger as arguments, so tests drive it with real-shaped events.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    SqsFifoPartialProcessor,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from botocore.exceptions import ClientError

from dynagent.core.config import AwsProvider, Config, Pool
from dynagent.core.drain_notices import notice_message
from dynagent.core.fleet import Fleet
from dynagent.core.interruptions import plan_interruption
from dynagent.core.plan import Plan
from dynagent.core.snapshot import InvalidSnapshot, Snapshot, parse_snapshot
from dynagent.files.config import load_config
from dynagent.report.metrics import Point
from dynagent.report.pass_metrics import dead_letter_point, pass_points, write_safely
from dynagent.report.status import SummaryRecorder
from dynagent.run.launch_errors import LaunchErrorMemory
from dynagent.run.named_images import NamedImages
from dynagent.run.reconcile import (
    Outcome,
    Timer,
    act,
    apply_snapshot,
    log_outcome,
    newest_per_pool,
    sweep,
)

from .clients import ec2_client, sqs_client, ssm_client
from .ec2 import Ec2Provider
from .emf import EmfWriter
from .fleet_launch import WarmState
from .images import image_parameters
from .notices import NotANotice, owning_pool, parse_notice
from .sqs import DEFAULT_MAX_MESSAGE_BYTES, send_dead_letter
from .status import QueueTagStore, summary_from_tags

CONFIG_ENV = "DYNAGENT_CONFIG"
DEAD_LETTER_ENV = "DYNAGENT_DEAD_LETTER_QUEUE_URL"
SNAPSHOT_QUEUE_ENV = "DYNAGENT_SNAPSHOT_QUEUE_URL"
# The queue the bridge reads drain notices from (core.drain_notices).
DRAIN_NOTICE_QUEUE_ENV = "DYNAGENT_DRAIN_NOTICE_QUEUE_URL"
# A failed record is retried after this, doubling with each receive, up to the cap.
RETRY_DELAY_SECONDS = 10
RETRY_DELAY_CAP_SECONDS = 300


@dataclass
class AwsFunctions:
    """The reconcile and sweep functions over one config, with injected collaborators."""

    config: Config
    ec2_for_region: Callable[[str], Any] = ec2_client
    # Read only for pools whose image_id is resolve:ssm:NAME (aws.images).
    ssm_for_region: Callable[[str], Any] = ssm_client
    sqs: Any = None
    dead_letter_url: str | None = None
    snapshot_queue_url: str | None = None
    drain_notice_queue_url: str | None = None
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    sleep: Callable[[float], None] = time.sleep
    logger: Any = field(default_factory=lambda: logging.getLogger("dynagent"))
    # Where the metrics go (EMF on stdout), and what times a pass.
    metrics: EmfWriter = field(default_factory=EmfWriter)
    timer: Timer = time.monotonic
    # Shared by every pass of a warm function: each AMI's root device, launch templates,
    # offerings out of capacity, spot prices.
    warm: WarmState = field(default_factory=WarmState)
    # Each pool's refused launches, for launch_error_timeout/retries: kept warm only.
    launch_errors: LaunchErrorMemory = field(default_factory=LaunchErrorMemory)
    # What each image an SSM parameter names resolved to, read at most once a minute.
    images: NamedImages = field(init=False)
    # The dead-letter queue's MaximumMessageSize, read once by a warm function.
    _dead_letter_max: int | None = field(default=None, init=False, repr=False)
    # Records each pool's last applied snapshot on the snapshot queue, for `dynagent status`.
    _summaries: SummaryRecorder | None = field(default=None, init=False, repr=False)

    @classmethod
    def from_environment(cls, logger: Any) -> AwsFunctions:
        """Config from ``DYNAGENT_CONFIG``; the dead-letter queue from its variable."""
        path = os.environ.get(CONFIG_ENV)
        if not path:
            raise RuntimeError(f"set {CONFIG_ENV} to the path of the pool config file")
        return cls(
            config=load_config(path),
            sqs=sqs_client(),
            dead_letter_url=os.environ.get(DEAD_LETTER_ENV) or None,
            snapshot_queue_url=os.environ.get(SNAPSHOT_QUEUE_ENV) or None,
            drain_notice_queue_url=os.environ.get(DRAIN_NOTICE_QUEUE_ENV) or None,
            logger=logger,
        )

    def __post_init__(self) -> None:
        # GCP pools in a shared config belong to the GCP functions.
        self.config = self.config.for_cloud("aws")
        self.images = image_parameters(self.ssm_for_region)
        if self.sqs is not None and self.snapshot_queue_url:
            store = QueueTagStore(self.sqs, self.snapshot_queue_url)
            self._summaries = SummaryRecorder(store.write, self.logger)

    def config_now(self, now: datetime) -> Config:
        """The config a pass decides and launches with: each ``resolve:ssm:`` image
        replaced by the AMI its parameter holds (``aws.images``)."""
        return self.images.resolved(self.config, now, self.logger)

    def provider(self, pool: Pool) -> Ec2Provider:
        assert isinstance(pool.provider, AwsProvider)  # for_cloud kept only these
        return Ec2Provider(
            pool,
            self.ec2_for_region(pool.provider.region),
            self.config.settings,
            clock=self.clock,
            sleep=self.sleep,
            warm=self.warm,
        )

    # The reconcile function

    def reconcile_batch(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Apply a batch of SQS FIFO records; report the failed ones for redelivery.

        Within a batch only each pool's newest snapshot is applied: it is the whole
        truth, the older ones are superseded. A failed record fails the rest of its
        pool's group in the batch (order), never other pools'.
        """
        records = [SQSRecord(raw) for raw in event.get("Records", [])]
        parsed = {record.message_id: _parse(record.body) for record in records}
        newest = newest_per_pool(s for s in parsed.values() if isinstance(s, Snapshot))

        def handle(record: SQSRecord) -> None:
            self._handle_record(record, parsed[record.message_id], newest)

        response = process_partial_response(
            event=event, record_handler=handle, processor=_FifoProcessor(), context=context
        )
        self._retry_soon(records, response)
        return dict(response)

    def _retry_soon(self, records: list[SQSRecord], response: Mapping[str, Any]) -> None:
        """Bring failed records back after a short backoff.

        Left alone, a failed record stays invisible for the queue's whole visibility
        timeout, and in a FIFO queue it holds back every later snapshot of its pool.
        """
        failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
        if not failed or self.sqs is None or not self.snapshot_queue_url:
            return
        entries = [
            {
                "Id": str(index),
                "ReceiptHandle": record.receipt_handle,
                "VisibilityTimeout": retry_delay(
                    int(record.attributes.approximate_receive_count or 1)
                ),
            }
            for index, record in enumerate(records)
            if record.message_id in failed
        ]
        try:
            self.sqs.change_message_visibility_batch(
                QueueUrl=self.snapshot_queue_url, Entries=entries
            )
        except ClientError as error:  # the records still come back, only later
            self.logger.warning("could not shorten the retry delay", extra={"error": str(error)})

    def _handle_record(
        self, record: SQSRecord, parsed: Snapshot | InvalidSnapshot, newest: dict[str, int]
    ) -> None:
        if isinstance(parsed, InvalidSnapshot):
            self._set_aside(record, str(parsed), "unknown")
            return
        if parsed.seq < newest[parsed.pool]:
            log_outcome(
                self.logger,
                Outcome(parsed.pool, seq=parsed.seq, skipped="a newer snapshot is in the batch"),
            )
            return
        now = self.clock()
        try:
            outcome = apply_snapshot(
                self.config_now(now), parsed, self.provider, now, self.timer, self.launch_errors
            )
        except InvalidSnapshot as error:  # a pool this config does not manage, or skew
            pool = parsed.pool if parsed.pool in self.config.pools else "unknown"
            self._set_aside(record, str(error), pool)
            return
        log_outcome(self.logger, outcome)
        self._measure(outcome, now)
        if outcome.plan is not None and outcome.plan.drain_notices:
            self._tell_bridge(outcome.plan, now)
        if self._summaries is not None and outcome.plan is not None:
            refused = outcome.launch.error if outcome.launch is not None else None
            self._summaries.record(
                parsed,
                refused,
                now,
                outcome.launches_paused_until,
                outcome.plan.replacing_counts,
            )

    def _tell_bridge(self, plan: Plan, now: datetime) -> None:
        """Send the plan's drain notices to the bridge's queue. A send that fails is
        logged, not retried: the next pass sends them again."""
        if not self.drain_notice_queue_url or self.sqs is None:
            self.logger.warning(
                f"no {DRAIN_NOTICE_QUEUE_ENV} set: the bridge is not told to drain "
                f"{len(plan.drain_notices)} agents (the first: {plan.drain_notices[0].reason})",
                extra={"pool": plan.pool},
            )
            return
        body = notice_message(plan.pool, plan.drain_notices, now)
        try:
            self.sqs.send_message(QueueUrl=self.drain_notice_queue_url, MessageBody=body)
        except ClientError as error:
            self.logger.warning(
                "could not send drain notices; the next pass sends them again",
                extra={"pool": plan.pool, "error": str(error)},
            )

    def _measure(self, outcome: Outcome, now: datetime) -> None:
        self._emit(lambda: pass_points(outcome, self.config.pools.get(outcome.pool), now), now)

    def _emit(self, points: Callable[[], Iterable[Point]], now: datetime) -> None:
        write_safely(self.metrics, points, now, self.logger)

    def _set_aside(self, record: SQSRecord, reason: str, pool: str) -> None:
        """Bad messages go to the dead-letter queue at once: retrying cannot fix them."""
        group = record.attributes.message_group_id
        self.logger.error(
            "message is not a snapshot we can apply; sent to the dead-letter queue",
            extra={"message_id": record.message_id, "group": group, "reason": reason},
        )
        if self.dead_letter_url and self.sqs is not None:
            send_dead_letter(
                self.sqs,
                self.dead_letter_url,
                record.body,
                reason,
                record.message_id,
                group,
                max_bytes=self._dead_letter_size_limit(),
            )
        else:
            self.logger.error(
                f"no {DEAD_LETTER_ENV} set: the message is dropped",
                extra={"message_id": record.message_id, "body": record.body},
            )
        # Counted once set aside: a send that failed raises, and the record comes back.
        self._emit(lambda: [dead_letter_point(pool)], self.clock())

    def _dead_letter_size_limit(self) -> int:
        if self._dead_letter_max is None:
            try:
                attributes = self.sqs.get_queue_attributes(
                    QueueUrl=self.dead_letter_url, AttributeNames=["MaximumMessageSize"]
                )["Attributes"]
                self._dead_letter_max = int(attributes["MaximumMessageSize"])
            except (ClientError, KeyError, ValueError) as error:
                self.logger.warning(
                    "could not read the dead-letter queue's size limit; assuming "
                    f"{DEFAULT_MAX_MESSAGE_BYTES} bytes",
                    extra={"error": str(error)},
                )
                self._dead_letter_max = DEFAULT_MAX_MESSAGE_BYTES
        return self._dead_letter_max

    # The sweep function

    def sweep(self) -> list[Outcome]:
        now = self.clock()
        outcomes = sweep(self.config_now(now), self.provider, now, self.timer, self.launch_errors)
        for outcome in outcomes:
            log_outcome(self.logger, outcome)
            self._measure(outcome, now)
        return outcomes

    # The spot notice function

    def handle_notice(self, event: dict[str, Any]) -> Outcome | None:
        """An EventBridge spot notice: mark the instance, launch its replacement if its
        pool needs one (``dynagent.core.interruptions``), re-packed at once onto the next
        cheapest cover when its machines have no capacity anywhere, with launches paused
        and refusals recorded as the reconcile's are (``reconcile.act``). None when the
        instance is no pool's
        or the event is not a notice: nothing is read of it beyond the lookup, nothing
        is written."""
        now = self.clock()
        try:
            notice, region = parse_notice(event, now)
        except NotANotice as error:
            self.logger.warning("event is not a spot notice; ignored", extra={"reason": str(error)})
            return None
        pools = [
            pool
            for pool in self.config_now(now).pools.values()
            if isinstance(pool.provider, AwsProvider) and pool.provider.region == region
        ]
        pool = (
            owning_pool(self.ec2_for_region(region), pools, notice.instance_id) if pools else None
        )
        if pool is None:
            self.logger.info(
                "spot notice for an instance no pool manages; nothing done",
                extra={"instance": notice.instance_id, "kind": notice.kind, "region": region},
            )
            return None
        provider = self.provider(pool)
        fleet = provider.observe()
        pending = self._pending_slots(pool.name, now)

        def decision(seen: Fleet) -> Plan:
            return plan_interruption(pool, seen, notice, now, pending)

        outcome = act(pool, provider, fleet, decision, now, self.launch_errors)
        log_outcome(self.logger, outcome)
        self._measure(outcome, now)
        if outcome.plan is not None and outcome.plan.drain_notices:
            self._tell_bridge(outcome.plan, now)
        return outcome

    def _pending_slots(self, pool: str, now: datetime) -> int:
        """The demand the pool's last applied snapshot left waiting, from its summary in
        the snapshot queue's tags; 0 when unknown or older than max_snapshot_age."""
        if self.sqs is None or not self.snapshot_queue_url:
            return 0
        try:
            tags = QueueTagStore(self.sqs, self.snapshot_queue_url).read()
        except ClientError as error:  # without it, only busy agents are replaced
            self.logger.warning("could not read the pools' summaries", extra={"error": str(error)})
            return 0
        summary = summary_from_tags(pool, tags)
        if summary is None or now - summary.time > self.config.settings.max_snapshot_age:
            return 0
        return summary.pending_slots


class _FifoProcessor(SqsFifoPartialProcessor):
    """A failed record fails the rest of its pool's group in the batch, never other pools'.

    A batch in which every record failed is reported like any other: Powertools' default
    raises instead, and then no record comes back after the short retry delay, and the
    pool's group waits out the queue's whole visibility timeout.
    """

    def __init__(self) -> None:
        super().__init__(skip_group_on_error=True)
        self.raise_on_entire_batch_failure = False


def retry_delay(receive_count: int) -> int:
    """Seconds before a failed record's next try: 10, 20, 40, ... at most 300."""
    exponent = min(max(0, receive_count - 1), 10)
    delay: int = RETRY_DELAY_SECONDS << exponent
    return min(delay, RETRY_DELAY_CAP_SECONDS)


def _parse(body: str | None) -> Snapshot | InvalidSnapshot:
    """Parsing runs before the batch processor: nothing may escape it, or the whole
    batch, every pool's records, would fail with no reason given."""
    try:
        return parse_snapshot(body or "")
    except InvalidSnapshot as error:
        return error
    except Exception as error:  # a body the parser cannot take at all
        return InvalidSnapshot(f"unreadable: {type(error).__name__}: {error}"[:500])
