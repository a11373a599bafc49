"""The AWS checks: each pool's machines, network, quotas and launches, then spot, the
Lambda concurrency the stack reserves, and the deployed stack. Read-only: the only
launches are dry runs."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from dynagent.cli.doctor.findings import Finding, Status, unknown
from dynagent.core.config import Config, Pool

from . import concurrency, launch, machines, network, quotas, reservations, shape, spot, stack
from .view import Ec2View

__all__ = ["AwsClients", "check"]

# Errors that mean "you may not look": the check is unknown, not failed.
_NOT_ALLOWED = ("AccessDenied", "UnauthorizedOperation", "AccessDeniedException")


class AwsClients:
    """boto3 clients by service and region, each made once."""

    def __init__(self, make: Callable[[str, str], Any]) -> None:
        self._make = make
        self._made: dict[tuple[str, str], Any] = {}

    def __call__(self, service: str, region: str) -> Any:
        if (service, region) not in self._made:
            self._made[service, region] = self._make(service, region)
        return self._made[service, region]


def check(
    config: Config,
    pools: Sequence[Pool],
    clients: AwsClients,
    stack_name: str | None,
    stack_region: str,
) -> list[Finding]:
    views: dict[str, Ec2View] = {}
    findings: list[Finding] = []
    for pool in pools:
        region = shape.provider(pool).region
        view = views.setdefault(region, Ec2View(clients("ec2", region), region))
        findings += _pool(config, pool, view, clients)
    if any(shape.buys_spot(p) for p in pools):
        what = f"spot service-linked role {spot.SPOT_ROLE}"
        findings += guarded(
            "aws.spot_role", what, lambda: [spot.service_linked_role(clients("iam", stack_region))]
        )
    # The stack's resources, read once for the two checks that need them (an error is not
    # cached: each check then says it could not be checked).
    deployed: Callable[[], stack.Stack | Finding] | None = None
    if stack_name is not None:
        name = stack_name
        deployed = functools.cache(
            lambda: stack.find(clients("cloudformation", stack_region), name, stack_region)
        )
    what = f"Lambda concurrency in {stack_region}"
    findings += guarded(
        "aws.lambda_concurrency", what, lambda: [_concurrency(clients, deployed, stack_region)]
    )
    findings += _stack(pools, clients, stack_name, deployed, stack_region)
    return findings


def _concurrency(
    clients: AwsClients, deployed: Callable[[], stack.Stack | Finding] | None, region: str
) -> Finding:
    """The functions run in the stack's region; a deployed stack's may hold theirs."""
    lambda_client = clients("lambda", region)
    holding = 0
    if deployed is not None:
        found = deployed()
        if not isinstance(found, Finding):  # a missing stack is the stack check's to say
            holding = concurrency.held(lambda_client, found.resources)
    return concurrency.concurrency(lambda_client, region, holding)


def _pool(config: Config, pool: Pool, view: Ec2View, clients: AwsClients) -> list[Finding]:
    label = shape.label(pool)
    read = quotas.quota_reader(clients("service-quotas", view.region))
    named: list[Finding] = []
    if shape.provider(pool).image_parameter is not None:
        resolved: list[Pool] = []

        def parameter() -> list[Finding]:
            finding, with_ami = machines.image_parameter(pool, clients("ssm", view.region))
            resolved.extend([with_ami] if with_ami is not None else [])
            return [finding]

        named = guarded("aws.image_parameter", f"{label}: SSM parameter", parameter)
        if not resolved:
            return named  # without its AMI, nothing of the machines can be checked
        pool = resolved[0]
    image = guarded("aws.image", f"{label}: AMI", lambda: [machines.image(pool, view)])
    image_failed = any(f.status is Status.FAIL for f in image)
    found = [
        *named,
        *image,
        *guarded("aws.offered", f"{label}: instance types", lambda: machines.offered(pool, view)),
        *guarded("aws.network", f"{label}: network", lambda: [network.network(pool, view)]),
        *guarded(
            "aws.quota", f"{label}: vCPU quotas", lambda: quotas.vcpu_quotas(pool, view, read)
        ),
        *guarded(
            "aws.dry_run",
            f"{label}: dry runs",
            lambda: launch.dry_runs(pool, view.ec2, config.settings, image_failed),
        ),
    ]
    if shape.provider(pool).reservations:
        what = f"{label}: reservations"
        found += guarded("aws.reservation", what, lambda: reservations.reservations(pool, view))
    if shape.buys_spot(pool):
        what = f"{label}: spot placement scores"
        found += guarded("aws.spot_score", what, lambda: [spot.placement_scores(pool, view)])
    return found


def _stack(
    pools: Sequence[Pool],
    clients: AwsClients,
    name: str | None,
    deployed: Callable[[], stack.Stack | Finding] | None,
    region: str,
) -> list[Finding]:
    if name is None or deployed is None:
        return [
            unknown(
                "aws.stack",
                "stack: the functions' roles and queues",
                "not checked",
                "give the deployed stack's name: --stack NAME",
            )
        ]

    def run() -> list[Finding]:
        found = deployed()
        if isinstance(found, Finding):
            return [found]
        iam = clients("iam", region)
        findings, arns = stack.queues(found, clients("sqs", region))
        return findings + stack.roles(found, iam, pools, arns, agent_roles(iam, pools))

    return guarded("aws.stack", f"stack {name} in {region}", run)


def agent_roles(iam: Any, pools: Sequence[Pool]) -> list[str]:
    """The ARNs of the roles in the pools' instance profiles (the functions pass them)."""
    arns = []
    for pool in pools:
        profile = shape.provider(pool).iam_instance_profile_arn
        if not profile:
            continue
        try:
            found = iam.get_instance_profile(InstanceProfileName=profile.rsplit("/", 1)[-1])
        except ClientError:
            continue  # the dry run names a profile that does not exist
        arns += [str(role["Arn"]) for role in found["InstanceProfile"]["Roles"]]
    return arns


def guarded(check: str, what: str, run: Callable[[], list[Finding]]) -> list[Finding]:
    """The check's findings, or one unknown finding when AWS would not answer it."""
    try:
        return run()
    except ClientError as error:
        details = error.response.get("Error", {})
        code = str(details.get("Code", ""))
        why = f"{error.operation_name}: {code}: {details.get('Message', '')}"
        fix = f"allow {error.operation_name} to whoever runs doctor" if code in _NOT_ALLOWED else ""
        return [unknown(check, what, why, fix)]
    except BotoCoreError:
        raise  # no credentials, no endpoint: nothing else can be checked either
    except Exception as error:  # a bug of ours: one line, never a traceback
        return [unknown(check, what, f"doctor could not check this: {error!r}", "report it")]
