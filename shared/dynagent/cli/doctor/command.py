"""``dynagent doctor``: check each pool's cloud account before the first launch.

It reads only (an EC2 dry run launches nothing) and asks each cloud only about its own
pools, with that cloud's credentials, from the same environment the functions read
(``AWS_*``, ``AWS_ENDPOINT_URL``; Google's application default credentials). A cloud
that cannot be asked at all (no credentials, out of reach) is named in one line, and
the other cloud's pools are checked all the same.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from dynagent.cli.errors import EXIT_FAILURE, CommandError, reaching
from dynagent.core.config import Config, Pool
from dynagent.files.config import load_config
from dynagent.files.config_argument import add_config, chosen_config

from . import report
from .findings import Finding


def add_parser(commands: Any) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check the cloud accounts for these pools before the first launch (read-only)",
        description="Check, without launching anything, what the functions will need: "
        "images, machine types in each zone, quotas, networks, a dry run of every launch, "
        "and the deployed functions' permissions and queues or topics. One line per check; "
        "exits 1 if any failed.",
    )
    add_config(doctor, "dynagent's pool config (YAML)")
    doctor.add_argument("--pool", help="check one pool (default: every pool)")
    doctor.add_argument(
        "--stack", help="AWS: the deployed stack's name, to check its roles and queues"
    )
    doctor.add_argument(
        "--project",
        help="GCP: the project of the deployed functions, topics and service account "
        "(deploy.sh --project)",
    )
    doctor.add_argument(
        "--name",
        default="dynagent",
        help="GCP: the deployment's name (deploy.sh --name), which its topics and "
        "service account start with (default: %(default)s)",
    )
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")
    doctor.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    config = load_config(chosen_config(args))
    pools = [config.pool(args.pool)] if args.pool else list(config.pools.values())
    findings, skipped = examine(config, pools, args.stack, args.project, args.name)
    if args.json:
        print(report.as_json(findings, skipped), file=out)
    else:
        for finding in findings:
            print(report.line(finding), file=out)
        if findings:
            print(report.summary(findings), file=out)
    for message in skipped:
        print(f"dynagent: {message}", file=sys.stderr)
    return EXIT_FAILURE if skipped else report.exit_code(findings)


def examine(
    config: Config,
    pools: Sequence[Pool],
    stack: str | None,
    project: str | None,
    name: str,
) -> tuple[list[Finding], list[str]]:
    """Each cloud's findings for its pools, and why a cloud could not be asked at all."""
    checks: dict[str, Callable[[list[Pool]], list[Finding]]] = {
        "aws": lambda mine: _aws(config, mine, stack),
        "gcp": lambda mine: _gcp(mine, project, name),
    }
    findings: list[Finding] = []
    skipped: list[str] = []
    for cloud, check in checks.items():
        mine = [pool for pool in pools if pool.provider.type == cloud]
        if not mine:
            continue
        names = ", ".join(pool.name for pool in mine)
        try:
            with reaching(f"pool{'s' if len(mine) > 1 else ''} {names} ({cloud}) not checked"):
                findings += check(mine)
        except CommandError as error:
            skipped.append(str(error))
    return findings, skipped


def _aws(config: Config, pools: list[Pool], stack: str | None) -> list[Finding]:
    from .aws_environment import check_aws

    return check_aws(config, pools, stack)


def _gcp(pools: list[Pool], project: str | None, name: str) -> list[Finding]:
    from .gcp_environment import check_gcp

    return check_gcp(pools, project, name)
