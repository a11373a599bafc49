"""What the two Cloud Functions run: a snapshot from Pub/Sub, and the sweep.

``functions/gcp/main.py`` only wires these to functions-framework. Clients, clock and
logger are arguments, so tests drive this code with real CloudEvents. The Compute
client is imported on first use: a message set aside never pays for it.
"""

from __future__ import annotations

import base64
import binascii
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from dynagent.core.config import Config, GcpProvider, Pool
from dynagent.core.drain_notices import notice_message
from dynagent.core.plan import Plan
from dynagent.core.snapshot import InvalidSnapshot, Snapshot, parse_snapshot
from dynagent.files.config import load_config
from dynagent.report.metrics import Point
from dynagent.report.pass_metrics import dead_letter_point, pass_points, write_safely
from dynagent.report.status import Summary, SummaryRecorder
from dynagent.run.fallback import CapacityMemory
from dynagent.run.launch_errors import LaunchErrorMemory
from dynagent.run.named_images import NamedImages
from dynagent.run.reconcile import Outcome, Timer, apply_snapshot, log_outcome, sweep

from .clients import images_client, instances_client, reservations_client, zone_operations_client
from .images import image_families
from .logs import MetricLog, StructuredLogger

if TYPE_CHECKING:
    from .compute import GceProvider
    from .reservations import ReservationCache

CONFIG_ENV = "DYNAGENT_CONFIG"
DEAD_LETTER_ENV = "DYNAGENT_DEAD_LETTER_TOPIC"
SNAPSHOT_TOPIC_ENV = "DYNAGENT_SNAPSHOT_TOPIC"
# The topic the bridge reads drain notices from, through its subscription (core.drain_notices).
DRAIN_NOTICE_TOPIC_ENV = "DYNAGENT_DRAIN_NOTICE_TOPIC"
# How long a publish may take before it counts as failed (the next pass sends again).
PUBLISH_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class PubSubMessage:
    """The Pub/Sub message inside an Eventarc CloudEvent (``data.message``)."""

    id: str
    data: bytes
    attributes: dict[str, str]
    ordering_key: str

    @classmethod
    def from_cloud_event(cls, cloud_event: Any) -> PubSubMessage:
        data = cloud_event.data if isinstance(cloud_event.data, dict) else {}
        message = data.get("message") or {}
        try:
            body = base64.b64decode(message.get("data") or "", validate=True)
        except (binascii.Error, ValueError):
            body = b""
        return cls(
            id=str(message.get("messageId") or message.get("message_id") or cloud_event["id"]),
            data=body,
            attributes=dict(message.get("attributes") or {}),
            ordering_key=str(message.get("orderingKey") or ""),
        )


@dataclass
class GcpFunctions:
    """The reconcile and sweep functions over one config, with injected collaborators."""

    config: Config
    instances: Callable[[], Any] = instances_client
    operations: Callable[[], Any] = zone_operations_client
    # Read only for pools that name reservations.
    reservations: Callable[[], Any] = reservations_client
    # Read only for pools whose boot image is a family (gcp.images).
    images: Callable[[], Any] = images_client
    publisher: Any = None  # a Pub/Sub PublisherClient, for dead letters and drain notices
    dead_letter_topic: str | None = None
    drain_notice_topic: str | None = None
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    sleep: Callable[[float], None] = time.sleep
    logger: Any = None
    # Per pool, the offerings recently out of capacity: kept by a warm function only.
    capacity: dict[str, CapacityMemory] = field(default_factory=dict)
    # Per pool, its reservations as last read: kept by a warm function only.
    reservation_caches: dict[str, ReservationCache] = field(default_factory=dict)
    # Each pool's refused launches, for launch_error_timeout/retries: kept warm only.
    launch_errors: LaunchErrorMemory = field(default_factory=LaunchErrorMemory)
    # What each image family resolved to, read at most once a minute: kept warm only.
    families: NamedImages = field(init=False)
    # Where the metrics go (structured entries on stdout), and what times a pass.
    metrics: MetricLog = field(default_factory=MetricLog)
    timer: Timer = time.monotonic
    # Where each pool's last applied snapshot is summarised, for `dynagent status`: the
    # snapshot topic's labels, through a Pub/Sub PublisherClient (built on first write).
    snapshot_topic: str | None = None
    topics: Any = None
    _summaries: SummaryRecorder | None = field(default=None, init=False, repr=False)
    _label_store: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        # AWS pools in a shared config belong to the AWS functions.
        self.config = self.config.for_cloud("gcp")
        self.families = image_families(self.images)
        self.logger = self.logger or StructuredLogger()
        if self.snapshot_topic:
            self._summaries = SummaryRecorder(self._write_summary, self.logger)

    def _write_summary(self, pool: str, summary: Summary, new_error: bool = False) -> None:
        if self._label_store is None:
            from .status import TopicLabelStore, topics_client

            self.topics = self.topics or topics_client()
            self._label_store = TopicLabelStore(self.topics, str(self.snapshot_topic))
        self._label_store.write(pool, summary, new_error)

    @classmethod
    def from_environment(cls, logger: Any = None) -> GcpFunctions:
        path = os.environ.get(CONFIG_ENV)
        if not path:
            raise RuntimeError(f"set {CONFIG_ENV} to the path of the pool config file")
        return cls(
            config=load_config(path),
            dead_letter_topic=os.environ.get(DEAD_LETTER_ENV) or None,
            snapshot_topic=os.environ.get(SNAPSHOT_TOPIC_ENV) or None,
            drain_notice_topic=os.environ.get(DRAIN_NOTICE_TOPIC_ENV) or None,
            logger=logger,
        )

    def config_now(self, now: datetime) -> Config:
        """The config a pass decides and creates VMs with: each image family replaced by
        its newest image (``gcp.images``)."""
        return self.families.resolved(self.config, now, self.logger)

    def provider(self, pool: Pool) -> GceProvider:
        from .compute import GceProvider
        from .reservations import ReservationCache

        assert isinstance(pool.provider, GcpProvider)  # for_cloud kept only these
        return GceProvider(
            pool,
            self.instances(),
            self.operations(),
            self.config.settings,
            clock=self.clock,
            sleep=self.sleep,
            memory=self.capacity.setdefault(pool.name, CapacityMemory()),
            reservations=self.reservations() if pool.provider.reservations else None,
            reservation_cache=self.reservation_caches.setdefault(pool.name, ReservationCache()),
        )

    # The reconcile function

    def reconcile_event(self, cloud_event: Any) -> Outcome | None:
        """Apply the snapshot in one Pub/Sub message; None when it was set aside.

        Errors worth retrying propagate, so Pub/Sub delivers the message again.
        """
        message = PubSubMessage.from_cloud_event(cloud_event)
        snapshot: Snapshot | None = None
        now = self.clock()
        try:
            snapshot = parse_snapshot(message.data)
            outcome = apply_snapshot(
                self.config_now(now), snapshot, self.provider, now, self.timer, self.launch_errors
            )
        except InvalidSnapshot as error:
            pool = snapshot.pool if snapshot is not None else "unknown"
            self._set_aside(message, str(error), pool if pool in self.config.pools else "unknown")
            return None
        log_outcome(self.logger, outcome)
        self._measure(outcome, now)
        if outcome.plan is not None and outcome.plan.drain_notices:
            self._tell_bridge(outcome.plan, now)
        if self._summaries is not None and outcome.plan is not None and snapshot is not None:
            refused = outcome.launch.error if outcome.launch is not None else None
            self._summaries.record(
                snapshot,
                refused,
                now,
                outcome.launches_paused_until,
                outcome.plan.replacing_counts,
            )
        return outcome

    def _tell_bridge(self, plan: Plan, now: datetime) -> None:
        """Publish the plan's drain notices to the bridge's topic. A publish that fails
        is logged, not retried: the next pass sends them again."""
        if not self.drain_notice_topic:
            self.logger.warning(
                f"no {DRAIN_NOTICE_TOPIC_ENV} set: the bridge is not told to drain "
                f"{len(plan.drain_notices)} agents (the first: {plan.drain_notices[0].reason})",
                extra={"pool": plan.pool},
            )
            return
        from google.api_core.exceptions import GoogleAPIError
        from google.auth.exceptions import GoogleAuthError

        from .pubsub import publisher_client

        body = notice_message(plan.pool, plan.drain_notices, now).encode()
        try:
            self.publisher = self.publisher or publisher_client()
            future = self.publisher.publish(self.drain_notice_topic, body)
            future.result(timeout=PUBLISH_TIMEOUT_SECONDS)
        except (GoogleAPIError, GoogleAuthError, TimeoutError) as error:
            self.logger.warning(
                "could not send drain notices; the next pass sends them again",
                extra={"pool": plan.pool, "topic": self.drain_notice_topic, "error": str(error)},
            )

    def _measure(self, outcome: Outcome, now: datetime) -> None:
        self._emit(lambda: pass_points(outcome, self.config.pools.get(outcome.pool), now), now)

    def _emit(self, points: Callable[[], Iterable[Point]], now: datetime) -> None:
        write_safely(self.metrics, points, now, self.logger)

    def _set_aside(self, message: PubSubMessage, reason: str, pool: str) -> None:
        """Bad messages are acknowledged (retrying cannot fix them) and kept aside."""
        self.logger.error(
            "message is not a snapshot we can apply; sent to the dead-letter topic",
            extra={
                "message_id": message.id,
                "ordering_key": message.ordering_key,
                "reason": reason,
            },
        )
        if not self.dead_letter_topic:
            self.logger.error(
                f"no {DEAD_LETTER_ENV} set: the message is dropped",
                extra={"message_id": message.id, "body": message.data.decode(errors="replace")},
            )
        else:
            from .pubsub import publisher_client, send_dead_letter

            self.publisher = self.publisher or publisher_client()
            send_dead_letter(
                self.publisher, self.dead_letter_topic, message.data, reason, message.id
            )
        # Counted once set aside: a send that failed raises, and the message comes back.
        self._emit(lambda: [dead_letter_point(pool)], self.clock())

    # The sweep function

    def sweep(self) -> list[Outcome]:
        now = self.clock()
        outcomes = sweep(self.config_now(now), self.provider, now, self.timer, self.launch_errors)
        for outcome in outcomes:
            log_outcome(self.logger, outcome)
            self._measure(outcome, now)
        return outcomes
