"""``dynagent plan``: what a reconcile of one pool would do now, changing nothing.

It reads the pool's instances from the pool's own cloud (EC2 or Compute Engine), with
that cloud's credentials only, and decides as the functions do. A snapshot the functions
would refuse or skip (``reconcile.check_snapshot``, their own rules) is planned with all
the same, after a warning that says why.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from dynagent.cli.errors import CommandError
from dynagent.core.config import Config, Pool
from dynagent.core.snapshot import InvalidSnapshot, Snapshot
from dynagent.files.config import load_config
from dynagent.files.config_argument import add_config, chosen_config
from dynagent.files.snapshot import load_snapshot
from dynagent.run.reconcile import check_snapshot


def add_parser(commands: Any) -> None:
    plan = commands.add_parser(
        "plan",
        help="what a reconcile would do now, changing nothing",
        description="Read one pool's instances from its cloud (EC2 or Compute Engine, with "
        "that cloud's credentials) and print what a reconcile would do now with the "
        "snapshot given, or with none (as the sweep). Nothing is changed. A snapshot the "
        "functions would refuse or skip gets a warning saying why.",
    )
    add_config(plan, "the pool config the functions use")
    plan.add_argument("--pool", help="pool name (default: the snapshot's, or the only pool)")
    plan.add_argument("--snapshot", help="a snapshot JSON file to decide on (default: none)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from dynagent.cli.status_command import aws_source, gcp_source
    from dynagent.core.decide import decide

    out = out or sys.stdout
    config = load_config(chosen_config(args))
    snapshot = load_snapshot(args.snapshot) if args.snapshot else None
    pool = chosen_pool(config, args.pool, snapshot)
    now = datetime.now(UTC)
    warnings = snapshot_warnings(config, pool, snapshot, args.snapshot, now) if snapshot else []
    for warning in warnings:
        print(f"dynagent: warning: {warning}", file=sys.stderr)
    source = aws_source if pool.provider.type == "aws" else gcp_source
    try:
        fleet = source(config, None).fleet(pool)
    except CommandError as error:
        raise CommandError(f"pool {pool.name}: {error}") from None
    plan = decide(pool, fleet, snapshot, now, config.settings)
    if args.json:
        document = {"pool": pool.name, "actions": plan.describe(), "warnings": warnings}
        print(json.dumps(document, indent=2), file=out)
    else:
        print(f"pool {pool.name}: {len(fleet.instances)} instances observed", file=out)
        for line in plan.describe() or ["nothing to do"]:
            print(f"  {line}", file=out)
    return 0


def chosen_pool(config: Config, name: str | None, snapshot: Snapshot | None) -> Pool:
    """``--pool``; else the snapshot's pool, when the config has it; else the only pool."""
    if name is not None:
        return config.pool(name)
    if snapshot is not None:
        if snapshot.pool in config.pools:
            return config.pools[snapshot.pool]
        raise ValueError(
            f"the snapshot's pool {snapshot.pool!r} is not configured (configured: "
            f"{', '.join(config.pools)}): give --pool to decide for one of those on it anyway"
        )
    if len(config.pools) != 1:
        raise ValueError(f"--pool is required: the config has {', '.join(config.pools)}")
    return next(iter(config.pools.values()))


def snapshot_warnings(
    config: Config, pool: Pool, snapshot: Snapshot, source: str, now: datetime
) -> list[str]:
    """Why the functions would not apply ``snapshot`` to ``pool`` now: each a sentence."""
    # The functions of the pool's cloud hold that cloud's pools alone.
    deployed = config.for_cloud(pool.provider.type)
    try:
        _, skipped = check_snapshot(deployed, snapshot, now)
    except InvalidSnapshot as error:
        return [f"the functions would refuse {source} as a dead letter: {error}", _ANYWAY]
    found = []
    if snapshot.pool != pool.name:
        found.append(
            f"{source} is for pool {snapshot.pool!r}, not {pool.name!r}: the functions "
            f"would apply it to {snapshot.pool!r}, never to {pool.name!r}"
        )
    if skipped is not None:
        found.append(f"the functions would skip {source}: {skipped}")
    return [*found, _ANYWAY] if found else []


_ANYWAY = "the plan below decides on it all the same"
