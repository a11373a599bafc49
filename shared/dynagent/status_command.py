"""``dynagent status``: read each pool from its cloud and its last recorded snapshot.

Sources take their clients as arguments, so the tests run this very code against the
local clouds; ``run`` builds them from the environment the functions use too
(``AWS_ENDPOINT_URL``, ``DYNAGENT_COMPUTE_ENDPOINT``...).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

from dynagent.config import Config, Pool, load_config
from dynagent.fleet import Fleet
from dynagent.status import Summary, pool_status, render

QUEUE_ENV = "DYNAGENT_SNAPSHOT_QUEUE_URL"
TOPIC_ENV = "DYNAGENT_SNAPSHOT_TOPIC"
# ANSI: cursor home and clear screen, between --watch refreshes on a terminal.
_CLEAR = "\x1b[H\x1b[2J"


class Source(Protocol):
    """One cloud's pools: their fleets, and the summaries the functions recorded."""

    def refresh(self) -> None:
        """Read the recorded summaries again (one call for every pool of the cloud)."""
        ...

    def fleet(self, pool: Pool) -> Fleet: ...

    def summary(self, pool: Pool) -> Summary | None: ...


@dataclass
class AwsSource:
    config: Config
    ec2_for_region: Callable[[str], Any]
    sqs: Any = None
    queue_url: str | None = None
    _tags: dict[str, str] = field(default_factory=dict)

    def refresh(self) -> None:
        from dynagent.aws.status import QueueTagStore

        if self.sqs is not None and self.queue_url:
            self._tags = QueueTagStore(self.sqs, self.queue_url).read()

    def fleet(self, pool: Pool) -> Fleet:
        from dynagent.aws.ec2 import Ec2Provider

        region = pool.provider.region  # type: ignore[union-attr]
        return Ec2Provider(pool, self.ec2_for_region(region), self.config.settings).observe()

    def summary(self, pool: Pool) -> Summary | None:
        from dynagent.aws.status import summary_from_tags

        return summary_from_tags(pool.name, self._tags)


@dataclass
class GcpSource:
    config: Config
    instances: Any
    operations: Any
    topics: Any = None  # a Pub/Sub PublisherClient
    topic: str | None = None
    _labels: dict[str, str] = field(default_factory=dict)

    def refresh(self) -> None:
        from dynagent.gcp.status import TopicLabelStore

        if self.topics is not None and self.topic:
            self._labels = TopicLabelStore(self.topics, self.topic).read()

    def fleet(self, pool: Pool) -> Fleet:
        from dynagent.gcp.compute import GceProvider

        return GceProvider(pool, self.instances, self.operations, self.config.settings).observe()

    def summary(self, pool: Pool) -> Summary | None:
        from dynagent.gcp.status import summary_from_labels

        return summary_from_labels(pool.name, self._labels)


def statuses(
    config: Config, pools: Sequence[Pool], sources: dict[str, Source], now: datetime
) -> list[dict[str, Any]]:
    """Each pool's status, in order; each cloud's summaries read once."""
    for kind in {pool.provider.type for pool in pools}:
        sources[kind].refresh()
    views = []
    for pool in pools:
        source = sources[pool.provider.type]
        fleet = source.fleet(pool)
        views.append(pool_status(pool, fleet, source.summary(pool), now, config.settings))
    return views


def write(views: list[dict[str, Any]], as_json: bool, out: TextIO) -> None:
    if as_json:
        print(json.dumps(views, indent=2), file=out)
        return
    # A terminal gets boxes and colour (unless NO_COLOR is set); a pipe, plain text.
    styled = out.isatty() and not os.environ.get("NO_COLOR")
    for index, view in enumerate(views):
        if index:
            print(file=out)
        for line in render(view, styled):
            print(line, file=out)


# --- The command ------------------------------------------------------------------


def add_parser(commands: Any) -> None:
    status = commands.add_parser(
        "status", help="each pool: instances, pending demand, last snapshot, next plan"
    )
    status.add_argument("--config", required=True)
    status.add_argument("--pool", help="one pool (default: every pool of the config)")
    status.add_argument(
        "--queue",
        help=f"AWS: the snapshot queue's URL, whose tags hold the summaries (${QUEUE_ENV})",
    )
    status.add_argument(
        "--topic",
        help=f"GCP: the snapshot topic, projects/P/topics/T, whose labels hold them (${TOPIC_ENV})",
    )
    status.add_argument("--json", action="store_true", help="print JSON, for scripts")
    status.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    status.add_argument("--interval", type=float, default=5.0, help="seconds between refreshes")
    status.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    config = load_config(args.config)
    pools = [config.pool(args.pool)] if args.pool else list(config.pools.values())
    sources = sources_from_environment(
        config, {pool.provider.type for pool in pools}, args.queue, args.topic
    )
    try:
        while True:
            views = statuses(config, pools, sources, datetime.now(UTC))
            if args.watch and out.isatty() and not args.json:
                out.write(_CLEAR)
            write(views, args.json, out)
            if not args.watch:
                return 0
            out.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:  # how --watch ends
        return 0


def sources_from_environment(
    config: Config, kinds: set[str], queue: str | None, topic: str | None
) -> dict[str, Source]:
    sources: dict[str, Source] = {}
    if "aws" in kinds:
        from dynagent.aws.clients import ec2_client, sqs_client

        queue = queue or os.environ.get(QUEUE_ENV) or None
        region = _queue_region(queue)
        sqs = sqs_client(region) if queue else None
        sources["aws"] = AwsSource(config, ec2_client, sqs, queue)
    if "gcp" in kinds:
        from dynagent.gcp.clients import instances_client, zone_operations_client

        topic = topic or os.environ.get(TOPIC_ENV) or None
        topics = None
        if topic:
            from dynagent.gcp.status import topics_client

            topics = topics_client()
        sources["gcp"] = GcpSource(
            config, instances_client(), zone_operations_client(), topics, topic
        )
    return sources


def _queue_region(url: str | None) -> str | None:
    """``us-west-2`` from ``https://sqs.us-west-2.amazonaws.com/...``; else the default."""
    if url and url.startswith("https://sqs."):
        return url.removeprefix("https://sqs.").split(".", 1)[0]
    return None
