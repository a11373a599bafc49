"""The requests the functions make, and the ones their roles must refuse, as IAM sees them.

Each probe is one request as ``iam:SimulatePrincipalPolicy`` evaluates it: actions, a
resource ARN, and the condition keys EC2 would supply (the tags a launch writes, the tags
an instance carries, the tag keys a call changes). The functions' roles must allow every
probe the pools need, and refuse every request on an instance without the managed tag
(template.yaml's FleetPolicy: ``aws:RequestTag``/``aws:ResourceTag`` conditions).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from dynagent.aws import tags
from dynagent.core.config import Pool
from dynagent.core.fleet import Mark

from . import shape

DESCRIBES = (
    "ec2:DescribeInstances",
    "ec2:DescribeSpotInstanceRequests",
    "ec2:DescribeImages",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeSubnets",
)
# What each function's role does with the queues, by the template's logical ids.
QUEUE_ACTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "ReconcileRole": {
        "SnapshotQueue": (
            "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes",
            "sqs:ChangeMessageVisibility", "sqs:TagQueue",
        ),
        "DeadLetterQueue": ("sqs:SendMessage", "sqs:GetQueueAttributes"),
    },
    "InterruptionRole": {"SnapshotQueue": ("sqs:ListQueueTags",)},
    "SweepRole": {},
}  # fmt: skip
# An instance of nobody's: what a probe of an untagged resource names.
_SOMEONE_ELSES = "someone-else"


@dataclass(frozen=True)
class Probe:
    doing: str  # in words, for the finding
    actions: tuple[str, ...]
    resource: str
    context: dict[str, list[str]] = field(default_factory=dict)

    def named(self) -> str:
        return f"{self.doing} ({', '.join(self.actions)})"


@dataclass(frozen=True)
class Where:
    """The account, region and managed tag pair the probes are made for."""

    account: str
    region: str
    key: str
    value: str

    def arn(self, kind: str, name: str = "*", account: str | None = None) -> str:
        owner = self.account if account is None else account
        return f"arn:aws:ec2:{self.region}:{owner}:{kind}/{name}"

    @property
    def request_tag(self) -> dict[str, list[str]]:
        return {f"aws:RequestTag/{self.key}": [self.value]}

    @property
    def resource_tag(self) -> dict[str, list[str]]:
        return {f"aws:ResourceTag/{self.key}": [self.value]}


def needed(where: Where, pools: Iterable[Pool], agent_roles: Iterable[str]) -> list[Probe]:
    """Every EC2 and IAM request the functions make for these pools."""
    pools = list(pools)
    probes = [Probe("read the fleet", DESCRIBES, "*"), *_managing(where)]
    if any(shape.provider(p).offerings is None and not shape.provider(p).spot for p in pools):
        probes += _launching(where, "RunInstances", ("ec2:RunInstances",), pools)
    if any(shape.provider(p).offerings is None and shape.provider(p).spot for p in pools):
        probes += _spot_requests(where, pools)
    if any(shape.provider(p).offerings is not None for p in pools):
        probes += _fleets(where, pools)
    probes += [
        Probe(f"read the image parameter {name}", ("ssm:GetParameter",), arn)
        for name, arn in sorted({_parameter_arn(where, p) for p in pools} - {("", "")})
    ]
    probes += [
        Probe(
            "pass the agents' role to EC2",
            ("iam:PassRole",),
            role,
            {"iam:PassedToService": ["ec2.amazonaws.com"]},
        )
        for role in sorted(set(agent_roles))
    ]
    return probes


def _managing(where: Where) -> list[Probe]:
    instance = where.arn("instance", "i-0d0c70d0c70d0c70d")
    marks = {"aws:TagKeys": [tags.MARK_TAGS[Mark.IDLE_SINCE]]}
    return [
        Probe(
            "terminate managed instances", ("ec2:TerminateInstances",), instance, where.resource_tag
        ),
        Probe(
            "stop and start managed instances (warm pools)",
            ("ec2:StopInstances", "ec2:StartInstances"),
            instance,
            where.resource_tag,
        ),
        Probe(
            "mark managed instances",
            ("ec2:CreateTags", "ec2:DeleteTags"),
            instance,
            {**where.resource_tag, **marks},
        ),
    ]


def _launching(where: Where, call: str, actions: tuple[str, ...], pools: list[Pool]) -> list[Probe]:
    """A launch call: what it creates (tagged in the request), tags written at launch,
    and what it uses (each pool's image, subnets and security group)."""
    created = [
        Probe(f"{call} with the managed tag", actions, where.arn(kind), where.request_tag)
        for kind in ("instance", "volume")
    ]
    tagging = Probe(
        f"tag what {call} creates",
        ("ec2:CreateTags",),
        where.arn("instance"),
        {"ec2:CreateAction": [call], **where.request_tag},
    )
    used = [
        Probe(f"{call} from {arn.rsplit(':', 1)[1]}", actions, arn) for arn in _inputs(where, pools)
    ]
    return [*created, tagging, *used]


def _parameter_arn(where: Where, pool: Pool) -> tuple[str, str]:
    """(name, ARN) of the SSM parameter the pool's image_id names; ("", "") for an AMI.
    AWS's public parameters (/aws/service/...) have no account in their ARN."""
    name = shape.provider(pool).image_parameter
    if name is None:
        return "", ""
    name = name.split(":", 1)[0]  # a version or label is no part of the ARN
    account = "" if name.startswith("/aws/") else where.account
    return name, f"arn:aws:ssm:{where.region}:{account}:parameter/{name.lstrip('/')}"


def _inputs(where: Where, pools: list[Pool]) -> list[str]:
    # An image an SSM parameter names is checked as its parameter: its AMI may change.
    arns = {
        where.arn("image", shape.provider(p).image_id, account="")
        for p in pools
        if shape.provider(p).image_parameter is None
    }
    for pool in pools:
        arns.update(where.arn("subnet", s) for s in shape.subnet_ids(pool))
        group = shape.provider(pool).network_interface.security_group_id
        if group:
            arns.add(where.arn("security-group", group))
    return sorted(arns)


def _spot_requests(where: Where, pools: list[Pool]) -> list[Probe]:
    request = where.arn("spot-instances-request", "sir-d0c70d0c")
    instance = where.arn("instance", "i-0d0c70d0c70d0c70d")
    return [
        *_launching(where, "RequestSpotInstances", ("ec2:RequestSpotInstances",), pools),
        Probe(
            "RequestSpotInstances with the managed tag",
            ("ec2:RequestSpotInstances",),
            where.arn("spot-instances-request"),
            where.request_tag,
        ),
        Probe(
            "cancel managed spot requests",
            ("ec2:CancelSpotInstanceRequests",),
            request,
            where.resource_tag,
        ),
        Probe(
            "adopt the instance of a managed spot request",
            ("ec2:CreateTags",),
            instance,
            {"ec2:InstanceMarketType": ["spot"], **where.request_tag},
        ),
        Probe(
            "set the metadata options of managed instances",
            ("ec2:ModifyInstanceMetadataOptions",),
            instance,
            where.resource_tag,
        ),
    ]


def _fleets(where: Where, pools: list[Pool]) -> list[Probe]:
    template = where.arn("launch-template", "lt-0d0c70d0c70d0c70d")
    return [
        *_launching(where, "CreateFleet", ("ec2:CreateFleet", "ec2:RunInstances"), pools),
        Probe(
            "CreateFleet with the managed tag",
            ("ec2:CreateFleet",),
            where.arn("fleet"),
            where.request_tag,
        ),
        Probe(
            "create the pool's launch template",
            ("ec2:CreateLaunchTemplate",),
            where.arn("launch-template"),
            where.request_tag,
        ),
        Probe(
            "tag the launch template it creates",
            ("ec2:CreateTags",),
            where.arn("launch-template"),
            {"ec2:CreateAction": ["CreateLaunchTemplate"], **where.request_tag},
        ),
        Probe(
            "launch from and version the managed launch template",
            ("ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateLaunchTemplateVersion"),
            template,
            where.resource_tag,
        ),
    ]


def refused(where: Where) -> list[Probe]:
    """Requests on resources without the managed tag: every one must be denied."""
    instance = where.arn("instance", "i-0fe11a0fe11a0fe11")
    foreign = {f"aws:ResourceTag/{where.key}": [_SOMEONE_ELSES]}
    marks = {"aws:TagKeys": [tags.MARK_TAGS[Mark.IDLE_SINCE]]}
    return [
        Probe("terminate an untagged instance", ("ec2:TerminateInstances",), instance),
        Probe("terminate someone else's instance", ("ec2:TerminateInstances",), instance, foreign),
        Probe(
            "stop or start an untagged instance",
            ("ec2:StopInstances", "ec2:StartInstances"),
            instance,
        ),
        Probe("retag an untagged instance", ("ec2:CreateTags", "ec2:DeleteTags"), instance, marks),
        Probe(
            "change an untagged instance's metadata options",
            ("ec2:ModifyInstanceMetadataOptions",),
            instance,
        ),
        Probe(
            "launch an instance without the managed tag",
            ("ec2:RunInstances", "ec2:CreateFleet", "ec2:RequestSpotInstances"),
            where.arn("instance"),
        ),
        Probe(
            "cancel an untagged spot request",
            ("ec2:CancelSpotInstanceRequests",),
            where.arn("spot-instances-request", "sir-0fe11a0f"),
        ),
        Probe(
            "version someone else's launch template",
            ("ec2:CreateLaunchTemplateVersion",),
            where.arn("launch-template", "lt-0fe11a0fe11a0fe11"),
            foreign,
        ),
    ]


def queue_probes(role: str, queue_arns: dict[str, str]) -> list[Probe]:
    """What the function of ``role`` (a template logical id) does with the queues."""
    return [
        Probe(f"use {name}", actions, queue_arns[name])
        for name, actions in QUEUE_ACTIONS.get(role, {}).items()
        if name in queue_arns
    ]
