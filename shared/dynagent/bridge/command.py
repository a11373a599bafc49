"""``dynagent bridge``: its command line, credentials and output."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from dynagent.core.boot.master import master_address
from dynagent.core.config import Config
from dynagent.core.snapshot import Snapshot
from dynagent.files.config import load_config
from dynagent.files.config_argument import add_config, chosen_config

from .client import Credentials, MasterClient


def add_parser(commands: Any) -> None:
    bridge = commands.add_parser(
        "bridge",
        help="publish snapshots of a Determined master's pools (runs next to the master)",
        description="Read a stock Determined master's REST API and publish one snapshot per "
        "managed pool on every change and at least every 30 s. Credentials: DET_USER and "
        "DET_PASS, or --token-file.",
    )
    add_master_options(bridge)
    add_config(bridge, "the pool config the functions use")
    target = bridge.add_mutually_exclusive_group(required=True)
    target.add_argument("--to", metavar="DESTINATION", help="SQS FIFO queue URL or Pub/Sub topic")
    target.add_argument("--print", action="store_true", help="snapshots as JSON lines on stdout")
    bridge.add_argument("--region", help="the queue's region, if its URL does not say")
    bridge.add_argument("--once", action="store_true", help="one pass, then exit")
    bridge.add_argument(
        "--drain-notices",
        metavar="QUEUE_URL|SUBSCRIPTION",
        help="the functions' drain notices: their SQS queue (the stack's "
        "DrainNoticeQueueUrl) or the Pub/Sub subscription on their topic "
        "(projects/PROJECT/subscriptions/NAME-drain-notices, made by deploy.sh). The agents "
        "named are drained for good: those a reservation's end takes back, ahead of it, "
        "and those the functions replace (of a drifted config, or broken)",
    )
    bridge.add_argument(
        "--master-host",
        choices=("ec2", "gce"),
        help="the cloud the master's host runs in: its metadata gives the master's own "
        "addresses, which master_url aliases (local-ipv4, internal-ip...) or an empty "
        "master_url name; published in every snapshot",
    )
    bridge.set_defaults(run=run)


class _Printer:
    def publish(self, snapshot: Snapshot) -> str:
        print(snapshot.to_json(), flush=True)
        return snapshot.dedup_id


def add_master_options(parser: argparse.ArgumentParser) -> None:
    """How a command reaches the master and logs in, as det does: --master (DET_MASTER),
    --token-file or DET_USER and DET_PASS, and --cert; ``master_client`` reads them."""
    parser.add_argument(
        "--master",
        default=os.environ.get("DET_MASTER"),
        help="the master's URL (default: the DET_MASTER environment variable, as det reads it)",
    )
    parser.add_argument("--token-file", help="a file holding an access token (det token create)")
    parser.add_argument("--cert", help="a CA bundle for the master's TLS certificate")


def master_client(args: argparse.Namespace) -> MasterClient:
    """The client of ``add_master_options``' flags; ValueError naming what is missing."""
    if not args.master:
        raise ValueError("--master is required (or set DET_MASTER)")
    return MasterClient(args.master, credentials(args.token_file, os.environ), ca_file=args.cert)


def credentials(token_file: str | None, env: dict[str, str] | os._Environ[str]) -> Credentials:
    if token_file:
        token = Path(token_file).read_text().strip()
        if not token:
            raise ValueError(f"--token-file {token_file}: the file is empty")
        return Credentials(token=token)
    user = env.get("DET_USER", "")
    if not user:
        raise ValueError("no credentials: set DET_USER and DET_PASS, or give --token-file")
    return Credentials(user=user, password=env.get("DET_PASS", ""))


def _alias_pools(config: Config) -> list[str]:
    """Managed pools whose master_url only the master's host can resolve."""
    return sorted(
        name
        for name, pool in config.pools.items()
        if master_address(pool.provider.master_url).needs_resolving
    )


def unreadable(url: str, error: str | None) -> str:
    """Why ``--once`` published nothing, and what to check, in one line."""
    return (
        f"the master at {url} could not be read ({error}): nothing published; check that "
        "--master (or DET_MASTER) is the master's URL and that it answers there, and that "
        "DET_USER and DET_PASS, or --token-file, may log in to it"
    )


SUBSCRIPTION = re.compile(r"projects/[^/\s]+/subscriptions/[^/\s]+")


def is_notice_source(value: str) -> bool:
    """An SQS queue URL, or a Pub/Sub subscription's full name."""
    return value.startswith(("https://", "http://")) or SUBSCRIPTION.fullmatch(value) is not None


def drain_notices_from(source: str, region: str | None) -> Any:
    """The reader of ``is_notice_source``'s queue or subscription."""
    logger = logging.getLogger("dynagent.bridge")
    if SUBSCRIPTION.fullmatch(source):
        from google.cloud import pubsub_v1  # type: ignore[attr-defined]

        from .drain_notices import PubSubDrainNotices

        # It honours PUBSUB_EMULATOR_HOST, as the snapshot publisher does.
        return PubSubDrainNotices(pubsub_v1.SubscriberClient(), source, logger)
    from dynagent.aws.clients import sqs_client
    from dynagent.bridge.publish import region_of

    from .drain_notices import SqsDrainNotices

    return SqsDrainNotices(sqs_client(region or region_of(source)), source, logger)


def run(args: argparse.Namespace) -> int:
    from dynagent.bridge.publish import publisher_for

    from .client import MasterUnavailable
    from .loop import Bridge, BridgeRefused

    if args.drain_notices and not is_notice_source(args.drain_notices):
        print(
            f"dynagent bridge: --drain-notices {args.drain_notices!r} is neither an SQS "
            "queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME) nor a Pub/Sub "
            "subscription (projects/PROJECT/subscriptions/NAME)",
            file=sys.stderr,
        )
        return 2
    master = master_client(args)
    config = load_config(chosen_config(args))
    sink = _Printer() if args.print else publisher_for(args.to, args.region)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
    )
    bridge = Bridge(config, master, sink, config_file=chosen_config(args))
    if args.drain_notices:
        bridge.drain_notices = drain_notices_from(args.drain_notices, args.region)
    unresolved = _alias_pools(config) if not args.master_host else []
    if unresolved:
        print(
            f"dynagent bridge: master_url of pool(s) {', '.join(unresolved)} names the master's "
            "own address (an alias, or no host): start the bridge with --master-host ec2 or "
            "gce on the master's host, or write the address agents reach the master at",
            file=sys.stderr,
        )
        return 1
    if args.master_host:
        from .host_addresses import MetadataUnavailable, master_host_addresses

        try:
            bridge.master_addresses = master_host_addresses(args.master_host)
        except MetadataUnavailable as error:
            print(f"dynagent bridge: --master-host {args.master_host}: {error}", file=sys.stderr)
            return 1
    try:
        if args.once:
            bridge.run_once()
            if bridge.outage_since is not None:
                raise MasterUnavailable(unreadable(master.url, bridge.outage_error))
            return 0
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        bridge.sleep = stop.wait  # a SIGTERM ends the wait at once
        bridge.run_forever(stop.is_set)
    except (BridgeRefused, MasterUnavailable) as error:
        print(f"dynagent bridge: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
