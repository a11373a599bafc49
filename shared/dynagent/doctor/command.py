"""``dynagent doctor``: check each pool's cloud account before the first launch.

It reads only (an EC2 dry run launches nothing) and asks each cloud only about its own
pools, with that cloud's credentials, from the same environment the functions read
(``AWS_*``, ``AWS_ENDPOINT_URL``; Google's application default credentials).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from dynagent.config import Config, Pool, load_config
from dynagent.doctor import CannotCheck

from . import report
from .findings import Finding

EXIT_CANNOT_CHECK = 2


def add_parser(commands: Any) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check the cloud accounts for these pools before the first launch (read-only)",
        description="Check, without launching anything, what the functions will need: "
        "images, machine types in each zone, quotas, networks, a dry run of every launch, "
        "and the deployed functions' permissions and queues or topics. One line per check; "
        "exits 1 if any failed.",
    )
    doctor.add_argument("--config", required=True, help="dynagent's pool config (YAML)")
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
    config = load_config(args.config)
    pools = [config.pool(args.pool)] if args.pool else list(config.pools.values())
    try:
        findings = examine(config, pools, args.stack, args.project, args.name)
    except CannotCheck as error:
        print(f"dynagent doctor: {error}", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    if args.json:
        print(report.as_json(findings), file=out)
    else:
        for finding in findings:
            print(report.line(finding), file=out)
        print(report.summary(findings), file=out)
    return report.exit_code(findings)


def examine(
    config: Config,
    pools: Sequence[Pool],
    stack: str | None,
    project: str | None,
    name: str,
) -> list[Finding]:
    """Each cloud's findings for its pools; a cloud without pools is not asked."""
    findings: list[Finding] = []
    aws = [pool for pool in pools if pool.provider.type == "aws"]
    if aws:
        from .aws_environment import check_aws

        findings += check_aws(config, aws, stack)
    gcp = [pool for pool in pools if pool.provider.type == "gcp"]
    if gcp:
        from .gcp_environment import check_gcp

        findings += check_gcp(gcp, project, name)
    return findings
