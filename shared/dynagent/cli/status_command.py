"""``dynagent status``: read each pool from its cloud and its last recorded snapshot.

Sources take their clients as arguments, so the tests run this very code against the
local clouds; ``run`` builds them from the environment the functions use too
(``AWS_ENDPOINT_URL``, ``DYNAGENT_COMPUTE_ENDPOINT``...). A pool whose cloud cannot be
read (no credentials, an endpoint out of reach, a queue that does not exist) is named
with why and skipped; the others are shown, and no cloud is asked about another's pools.
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

from dynagent.cli.errors import EXIT_FAILURE, CommandError, reaching
from dynagent.core.config import Config, Pool
from dynagent.core.fleet import Fleet
from dynagent.files.config import load_config
from dynagent.files.config_argument import add_config, chosen_config
from dynagent.report.status import Summary, pool_status, render

QUEUE_ENV = "DYNAGENT_SNAPSHOT_QUEUE_URL"
TOPIC_ENV = "DYNAGENT_SNAPSHOT_TOPIC"
# ANSI: cursor home and clear screen, between --watch refreshes on a terminal.
_CLEAR = "\x1b[H\x1b[2J"


class Source(Protocol):
    """One cloud's pools: their fleets, and the summaries the functions recorded.

    Its methods raise CommandError naming what they could not read.
    """

    @property
    def unread(self) -> str | None:
        """Why the summaries are not read at all, with what to give; None when they are."""
        ...

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

    @property
    def unread(self) -> str | None:
        if self.sqs is not None and self.queue_url:
            return None
        return f"give --queue (the stack's SnapshotQueueUrl output) or set {QUEUE_ENV}"

    def refresh(self) -> None:
        from dynagent.aws.status import QueueTagStore

        if self.sqs is not None and self.queue_url:
            with reaching(f"queue {self.queue_url}"):
                self._tags = QueueTagStore(self.sqs, self.queue_url).read()

    def fleet(self, pool: Pool) -> Fleet:
        from dynagent.aws.ec2 import Ec2Provider

        region = pool.provider.region  # type: ignore[union-attr]
        with reaching(f"EC2 in {region}"):
            ec2 = self.ec2_for_region(region)
            return Ec2Provider(pool, ec2, self.config.settings).observe()

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

    @property
    def unread(self) -> str | None:
        if self.topics is not None and self.topic:
            return None
        return f"give --topic (projects/PROJECT/topics/NAME-snapshots) or set {TOPIC_ENV}"

    def refresh(self) -> None:
        from dynagent.gcp.status import TopicLabelStore

        if self.topics is not None and self.topic:
            with reaching(f"topic {self.topic}"):
                self._labels = TopicLabelStore(self.topics, self.topic).read()

    def fleet(self, pool: Pool) -> Fleet:
        from dynagent.gcp.compute import GceProvider

        where = f"{pool.provider.project}/{pool.provider.zone}"  # type: ignore[union-attr]
        with reaching(f"Compute Engine in {where}"):
            provider = GceProvider(pool, self.instances, self.operations, self.config.settings)
            return provider.observe()

    def summary(self, pool: Pool) -> Summary | None:
        from dynagent.gcp.status import summary_from_labels

        return summary_from_labels(pool.name, self._labels)


def statuses(
    config: Config,
    pools: Sequence[Pool],
    sources: dict[str, Source],
    now: datetime,
    unavailable: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Each pool's status, in order; each cloud's summaries read once. A pool that could
    not be read is ``{"pool", "cloud", "skipped": why}``, as is every pool of a cloud in
    ``unavailable`` (cloud -> why no source could be made for it)."""
    failed = dict(unavailable or {})
    for kind in sorted({pool.provider.type for pool in pools} - set(failed)):
        try:
            sources[kind].refresh()
        except CommandError as error:
            failed[kind] = str(error)
    views = []
    for pool in pools:
        kind = pool.provider.type
        if kind in failed:
            views.append(skipped(pool, failed[kind]))
            continue
        source = sources[kind]
        try:
            fleet = source.fleet(pool)
        except CommandError as error:
            views.append(skipped(pool, str(error)))
            continue
        summary = source.summary(pool)
        views.append(pool_status(pool, fleet, summary, now, config.settings, source.unread))
    return views


def skipped(pool: Pool, why: str) -> dict[str, Any]:
    return {"pool": pool.name, "cloud": pool.provider.type, "skipped": why}


def write(views: list[dict[str, Any]], as_json: bool, out: TextIO) -> None:
    """The views as JSON, or as text; skipped pools are for ``skipped_lines``, in text."""
    if as_json:
        print(json.dumps(views, indent=2), file=out)
        return
    # A terminal gets boxes and colour (unless NO_COLOR is set); a pipe, plain text.
    styled = out.isatty() and not os.environ.get("NO_COLOR")
    shown = [view for view in views if "skipped" not in view]
    for index, view in enumerate(shown):
        if index:
            print(file=out)
        for line in render(view, styled):
            print(line, file=out)


def skipped_lines(views: list[dict[str, Any]]) -> list[str]:
    """One line per reason: a cloud out of reach skips all its pools for one reason."""
    pools: dict[tuple[str, str], list[str]] = {}
    for view in views:
        if "skipped" in view:
            pools.setdefault((view["cloud"], view["skipped"]), []).append(view["pool"])
    return [
        f"{'pools' if len(names) > 1 else 'pool'} {', '.join(names)} ({cloud}) skipped: {why}"
        for (cloud, why), names in pools.items()
    ]


# --- The command ------------------------------------------------------------------


def add_parser(commands: Any) -> None:
    status = commands.add_parser(
        "status",
        help="each pool: instances, pending demand, last snapshot, next plan",
        description="Show each pool as its cloud shows it (EC2 or Compute Engine), the last "
        "snapshot the functions applied to it (read from the snapshot queue's tags or "
        "topic's labels), and what the next sweep would do. It reads each cloud with that "
        "cloud's credentials only; a pool whose cloud cannot be read is named, with why, "
        "and skipped (the exit status is then 1).",
    )
    add_config(status, "the pool config the functions use")
    which = status.add_mutually_exclusive_group()
    which.add_argument("--pool", help="one pool (default: every pool of the config)")
    which.add_argument(
        "--cloud", choices=("aws", "gcp"), help="the pools of one cloud (default: both)"
    )
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
    config = load_config(chosen_config(args))
    pools = [config.pool(args.pool)] if args.pool else list(config.pools.values())
    if args.cloud:
        pools = [pool for pool in pools if pool.provider.type == args.cloud]
        if not pools:
            raise ValueError(f"{chosen_config(args)}: no {args.cloud} pool")
    sources, unavailable = sources_from_environment(
        config, {pool.provider.type for pool in pools}, args.queue, args.topic
    )
    try:
        while True:
            views = statuses(config, pools, sources, datetime.now(UTC), unavailable)
            if args.watch and out.isatty() and not args.json:
                out.write(_CLEAR)
            write(views, args.json, out)
            for line in skipped_lines(views):
                print(f"dynagent: {line}", file=sys.stderr)
            if not args.watch:
                return EXIT_FAILURE if any("skipped" in view for view in views) else 0
            out.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:  # how --watch ends
        return 0


def sources_from_environment(
    config: Config, kinds: set[str], queue: str | None = None, topic: str | None = None
) -> tuple[dict[str, Source], dict[str, str]]:
    """A source per cloud, with clients the environment configures; and for each cloud
    none could be made for (no credentials), why."""
    makers: dict[str, Callable[[], Source]] = {
        "aws": lambda: aws_source(config, queue or os.environ.get(QUEUE_ENV) or None),
        "gcp": lambda: gcp_source(config, topic or os.environ.get(TOPIC_ENV) or None),
    }
    sources: dict[str, Source] = {}
    unavailable: dict[str, str] = {}
    for kind in sorted(kinds):
        try:
            sources[kind] = makers[kind]()
        except CommandError as error:
            unavailable[kind] = str(error)
    return sources, unavailable


def aws_source(config: Config, queue: str | None) -> AwsSource:
    from dynagent.aws.clients import ec2_client, sqs_client

    with reaching(f"queue {queue}"):
        sqs = sqs_client(_queue_region(queue)) if queue else None
    return AwsSource(config, ec2_client, sqs, queue)


def gcp_source(config: Config, topic: str | None) -> GcpSource:
    from dynagent.gcp.clients import instances_client, zone_operations_client

    with reaching("Compute Engine"):
        instances, operations = instances_client(), zone_operations_client()
    topics = None
    if topic:
        from dynagent.gcp.status import topics_client

        with reaching(f"topic {topic}"):
            topics = topics_client()
    return GcpSource(config, instances, operations, topics, topic)


def _queue_region(url: str | None) -> str | None:
    """``us-west-2`` from ``https://sqs.us-west-2.amazonaws.com/...``; else the default."""
    if url and url.startswith("https://sqs."):
        return url.removeprefix("https://sqs.").split(".", 1)[0]
    return None
