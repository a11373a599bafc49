"""The deployed stack: its queues exist, and its functions' roles may do what the functions
do for these pools, and nothing to instances without the managed tag."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from dynagent.aws.ec2 import error_code
from dynagent.cli.doctor.findings import Finding, fail, ok
from dynagent.core.config import Pool

from . import shape
from .permissions import Probe, Where, needed, queue_probes, refused

QUEUES = {"SnapshotQueue": "snapshot queue", "DeadLetterQueue": "dead-letter queue"}
ROLES = {
    "ReconcileRole": "reconcile function",
    "SweepRole": "sweep function",
    "InterruptionRole": "interruption function",
}


@dataclass(frozen=True)
class Stack:
    name: str
    region: str
    resources: dict[str, str]  # logical id -> physical id


def find(cloudformation: Any, name: str, region: str) -> Stack | Finding:
    """The stack's resources, or a failed finding when there is no such stack."""
    try:
        listed = cloudformation.describe_stack_resources(StackName=name)["StackResources"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ValidationError":
            raise
        return fail(
            "aws.stack",
            f"stack {name} in {region}",
            "no such stack",
            "deploy it (infra/aws/README.md), or give the name and region it was deployed "
            "with (--stack, AWS_REGION)",
        )
    return Stack(name, region, {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in listed})


def queues(stack: Stack, sqs: Any) -> tuple[list[Finding], dict[str, str]]:
    """A finding per queue, and the ARNs of those that exist, by logical id."""
    findings, arns = [], {}
    for logical, said in QUEUES.items():
        what = f"stack {stack.name}: {said}"
        url = stack.resources.get(logical)
        arn = _queue_arn(sqs, url) if url else None
        if url is None or arn is None:
            why = f"the stack has no {logical} (or it was deleted)"
            findings.append(fail("aws.queue", what, why, "deploy the stack again (sam deploy)"))
            continue
        arns[logical] = arn
        findings.append(ok("aws.queue", what, url))
    return findings, arns


def _queue_arn(sqs: Any, url: str) -> str | None:
    try:
        answer = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    except ClientError as error:
        code = error_code(error)
        if "NonExistentQueue" in code or code == "QueueDoesNotExist":
            return None
        raise
    return str(answer["Attributes"]["QueueArn"])


def roles(
    stack: Stack,
    iam: Any,
    pools: Sequence[Pool],
    queue_arns: dict[str, str],
    agent_roles: list[str],
) -> list[Finding]:
    """Two findings per function role: what it may do, and what it must not."""
    findings = []
    for logical, function in ROLES.items():
        name = stack.resources.get(logical)
        what = f"stack {stack.name}: role {logical}"
        if name is None:
            fix = "deploy the stack again from this version's template.yaml"
            findings.append(fail("aws.role", what, "the stack has no such role", fix))
            continue
        arn = str(iam.get_role(RoleName=name)["Role"]["Arn"])
        probes = queue_probes(logical, queue_arns)
        refusals: list[Probe] = []
        for where, served in _wheres(arn, pools).items():
            probes += needed(where, served, agent_roles)
            refusals += refused(where)
        findings.append(_may(iam, arn, f"{what} may do what the {function} does", probes))
        untagged = f"{what} touches nothing without the managed tag"
        findings.append(_must_not(iam, arn, untagged, refusals))
    return findings


def _wheres(role_arn: str, pools: Sequence[Pool]) -> dict[Where, list[Pool]]:
    """The pools by where their requests go: region and managed tag pair."""
    account = role_arn.split(":")[4]
    found: dict[Where, list[Pool]] = {}
    for pool in pools:
        p = shape.provider(pool)
        found.setdefault(Where(account, p.region, p.tag_key, p.tag_value), []).append(pool)
    return found


def _denied(iam: Any, arn: str, probe: Probe) -> list[str]:
    """The probe's actions the role's policies do not allow."""
    entries = [
        {"ContextKeyName": key, "ContextKeyValues": values, "ContextKeyType": "stringList"}
        for key, values in probe.context.items()
    ]
    results = iam.simulate_principal_policy(
        PolicySourceArn=arn,
        ActionNames=list(probe.actions),
        ResourceArns=[probe.resource],
        ContextEntries=entries,
    )["EvaluationResults"]
    return [r["EvalActionName"] for r in results if r["EvalDecision"] != "allowed"]


def _may(iam: Any, arn: str, what: str, probes: list[Probe]) -> Finding:
    missing = []
    for probe in probes:
        denied = _denied(iam, arn, probe)
        if denied:
            missing.append(f"{probe.doing} ({', '.join(denied)} on {probe.resource})")
    if not missing:
        return ok("aws.role", what, f"all {len(probes)} requests it makes are allowed")
    return fail("aws.role", what, "denied: " + "; ".join(missing), _fix(missing))


def _fix(missing: list[str]) -> str:
    if any("iam:PassRole" in line for line in missing):
        return (
            "deploy the stack with AgentInstanceProfileRoleArn set to the role in the pools' "
            "iam_instance_profile_arn (sam deploy --parameter-overrides)"
        )
    return (
        "deploy the stack with ManagedTagKey and ManagedTagValue equal to the pools' tag_key "
        "and tag_value, from this version's template.yaml"
    )


def _must_not(iam: Any, arn: str, what: str, probes: list[Probe]) -> Finding:
    allowed = [
        probe.named() for probe in probes if len(_denied(iam, arn, probe)) < len(probe.actions)
    ]
    if not allowed:
        return ok("aws.role", what, f"all {len(probes)} requests on untagged resources are refused")
    return fail(
        "aws.role",
        what,
        "allowed: " + "; ".join(allowed),
        "restore template.yaml's tag conditions on the role's policies (FleetPolicy)",
    )
