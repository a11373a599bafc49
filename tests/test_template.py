"""The SAM template's safety properties: least-privilege IAM, the FIFO queue, the wiring.

The checks are functions returning what is wrong, run on template.yaml (nothing may be
wrong) and on broken copies of it (the check must notice), so a regression fails here.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynagent.files.config import load_config

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"
INFRA = ROOT / "infra" / "aws"

Template = dict[str, Any]
Statement = dict[str, Any]

MANAGED = {"${ManagedTagKey}": "${ManagedTagValue}"}
DESCRIBES = {
    "ec2:DescribeInstances",
    "ec2:DescribeSpotInstanceRequests",
    "ec2:DescribeImages",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:DescribeSpotPriceHistory",
    # The reservations a pool names, and its subnets' zones to launch into them.
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeSubnets",
}
# X-Ray's writes name no resource: the only other actions allowed on "*".
TRACE_WRITES = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
LAUNCHES = {
    "ec2:RunInstances",
    "ec2:RequestSpotInstances",
    "ec2:CreateFleet",
    "ec2:CreateLaunchTemplate",
}
# Created by a launch: the request must carry the managed tag for these.
LAUNCHED_TYPES = {"instance", "volume", "spot-instances-request", "fleet", "launch-template"}
# Used by a launch but not created with tags; allowed without a tag condition.
LAUNCH_INPUT_TYPES = {
    "image",
    "snapshot",
    "subnet",
    "security-group",
    "network-interface",
    "key-pair",
    # A launch into a reservation the pool names.
    "capacity-reservation",
}
NEEDS_MANAGED_RESOURCE = {
    "ec2:CreateLaunchTemplateVersion",
    # An adopted spot instance gets the hop limit RequestSpotInstances cannot ask for.
    "ec2:ModifyInstanceMetadataOptions",
    "ec2:TerminateInstances",
    # The warm pool stops idle agents and starts them for new work.
    "ec2:StopInstances",
    "ec2:StartInstances",
    "ec2:CancelSpotInstanceRequests",
    "ec2:DeleteTags",
}
CREATE_ACTIONS = {"RunInstances", "RequestSpotInstances", "CreateFleet", "CreateLaunchTemplate"}
EC2_ACTIONS = DESCRIBES | LAUNCHES | NEEDS_MANAGED_RESOURCE | {"ec2:CreateTags"}


# --- Loading --------------------------------------------------------------------------


class CfnLoader(yaml.SafeLoader):
    """PyYAML's safe loader, plus CloudFormation's short forms (!Ref, !Sub, ...)."""


def _intrinsic(loader: CfnLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    else:
        raise yaml.constructor.ConstructorError(
            None, None, f"cannot read !{suffix}", node.start_mark
        )
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


CfnLoader.add_multi_constructor("!", _intrinsic)


def load_template() -> Template:
    document = yaml.load(TEMPLATE.read_text(), Loader=CfnLoader)
    assert isinstance(document, dict)
    return document


@pytest.fixture
def template() -> Template:
    return load_template()


def resources(template: Template, kind: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in template["Resources"].items() if r["Type"] == kind}


def functions(template: Template) -> dict[str, dict[str, Any]]:
    return resources(template, "AWS::Serverless::Function")


def function_by_handler(template: Template, handler: str) -> dict[str, Any]:
    found = [f for f in functions(template).values() if f["Properties"]["Handler"] == handler]
    assert len(found) == 1, f"expected one function with handler {handler}"
    return found[0]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def policy_document(document: Any) -> dict[str, Any]:
    """A policy given as YAML, or as a JSON string in !Sub (to put parameters in keys)."""
    if isinstance(document, dict) and "Fn::Sub" in document:
        text = document["Fn::Sub"]
        assert isinstance(text, str), "a policy in !Sub is one JSON string"
        parsed = json.loads(text)
        assert isinstance(parsed, dict)
        return parsed
    assert isinstance(document, dict)
    return document


def documents(template: Template) -> Iterator[tuple[str, Any]]:
    """Every identity policy document in the template, by where it is."""
    for name, resource in template["Resources"].items():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::IAM::Role":
            for policy in properties.get("Policies", []):
                yield f"{name}/{policy['PolicyName']}", policy["PolicyDocument"]
        elif resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            yield name, properties["PolicyDocument"]


def statements(template: Template) -> Iterator[tuple[str, Statement]]:
    for where, document in documents(template):
        for index, statement in enumerate(as_list(policy_document(document)["Statement"])):
            yield f"{where}[{statement.get('Sid', index)}]", statement


def resource_type(arn: Any) -> str | None:
    """The EC2 resource type an ARN names (``instance`` ...), or None if it is not one."""
    if not isinstance(arn, str):
        return None
    plain = re.sub(r"\$\{[^}]*\}", "x", arn)  # ${AWS::Partition} has colons
    match = re.fullmatch(r"arn:[^:]+:ec2:[^:]*:[^:]*:([a-z-]+)/.*", plain)
    return match.group(1) if match else None


def conditions(statement: Statement, operator: str) -> dict[str, Any]:
    block = statement.get("Condition", {}).get(operator, {})
    assert isinstance(block, dict)
    return block


def has_tag_condition(statement: Statement, kind: str) -> bool:
    """Whether the statement requires the managed pair on the resource or in the request."""
    equals = conditions(statement, "StringEquals")
    prefixes = (
        ("aws:ResourceTag/", "ec2:ResourceTag/") if kind == "resource" else ("aws:RequestTag/",)
    )
    return any(
        equals.get(prefix + key) in (value, [value])
        for prefix in prefixes
        for key, value in MANAGED.items()
    )


# --- The checks ---------------------------------------------------------------------------


def iam_problems(template: Template) -> list[str]:
    """What in the IAM policies breaks least privilege on the managed tag pair."""
    problems = []
    launch_tagged: set[str] = set()
    for where, statement in statements(template):
        if statement.get("Effect") != "Allow":
            continue
        actions = set(as_list(statement.get("Action", [])))
        targets = as_list(statement.get("Resource", []))
        types = {resource_type(arn) for arn in targets}
        if "NotAction" in statement or "NotResource" in statement:
            problems.append(f"{where}: NotAction/NotResource")
        for action in actions:
            if "*" in action:
                problems.append(f"{where}: wildcard action {action}")
        if "*" in targets and not (actions <= DESCRIBES or actions <= TRACE_WRITES):
            problems.append(f"{where}: {sorted(actions - DESCRIBES)} on '*'")
        if "*" in targets and "Condition" in statement:
            problems.append(f"{where}: describes on '*' are plain reads, with no conditions")
        for action in sorted(a for a in actions if a.startswith("ec2:")):
            if action not in EC2_ACTIONS:
                problems.append(f"{where}: {action} is not one this policy was reviewed for")
            elif action in NEEDS_MANAGED_RESOURCE and not has_tag_condition(statement, "resource"):
                problems.append(f"{where}: {action} without the managed aws:ResourceTag")
            elif action == "ec2:CreateTags" and not _create_tags_allowed(statement, types):
                problems.append(
                    f"{where}: ec2:CreateTags neither on managed resources, at launch, nor adoption"
                )
            elif action in LAUNCHES:
                if has_tag_condition(statement, "request"):
                    launch_tagged |= {t for t in types if t} & LAUNCHED_TYPES
                # Inputs: untagged ones (images, subnets) or our own tagged templates.
                elif not types <= LAUNCH_INPUT_TYPES and not has_tag_condition(
                    statement, "resource"
                ):
                    unsafe = sorted(map(str, types - LAUNCH_INPUT_TYPES))
                    problems.append(f"{where}: {action} on {unsafe} without aws:RequestTag")
            # Changing the managed pair of a running instance would orphan it.
            tag_write = action in ("ec2:CreateTags", "ec2:DeleteTags")
            if tag_write and not _launch_or_adoption(statement) and not _marks_only(statement):
                problems.append(f"{where}: {action} on managed resources beyond dynagent:*")
        if "iam:PassRole" in actions:
            if "*" in targets:
                problems.append(f"{where}: iam:PassRole on '*'")
            if (
                conditions(statement, "StringEquals").get("iam:PassedToService")
                != "ec2.amazonaws.com"
            ):
                problems.append(f"{where}: iam:PassRole not limited to ec2.amazonaws.com")
    if launch_tagged != LAUNCHED_TYPES:
        problems.append(f"launches can create only {sorted(launch_tagged)} with the managed tag")
    return problems


def _create_tags_allowed(statement: Statement, types: set[str | None]) -> bool:
    if has_tag_condition(statement, "resource"):
        return True
    equals = conditions(statement, "StringEquals")
    created_by = as_list(equals.get("ec2:CreateAction", []))
    if created_by and set(created_by) <= CREATE_ACTIONS:
        return True
    # Adoption: a spot instance arrives untagged; tag it only with the managed pair.
    return _is_adoption(statement) and types == {"instance"}


def _is_adoption(statement: Statement) -> bool:
    equals = conditions(statement, "StringEquals")
    return equals.get("ec2:InstanceMarketType") == "spot" and has_tag_condition(
        statement, "request"
    )


def _launch_or_adoption(statement: Statement) -> bool:
    return "ec2:CreateAction" in conditions(statement, "StringEquals") or _is_adoption(statement)


def _marks_only(statement: Statement) -> bool:
    """Tag writes limited to dynagent:* keys; a DeleteTags without keys is refused."""
    keys = as_list(conditions(statement, "ForAllValues:StringLike").get("aws:TagKeys", []))
    present = conditions(statement, "Null").get("aws:TagKeys") == "false"
    return bool(keys) and present and all(key.startswith("dynagent:") for key in keys)


def interruption_problems(template: Template) -> list[str]:
    """EC2's spot notices reach the interruption function, and it may act on the fleet
    exactly as the others do: through the shared fleet policy, nothing more."""
    from dynagent.aws.notices import DETAIL_TYPES

    problems = []
    function = function_by_handler(template, "app.interruption")["Properties"]
    rules = [e for e in function.get("Events", {}).values() if e["Type"] == "EventBridgeRule"]
    if len(rules) != 1:
        return [f"the interruption function has {len(rules)} EventBridge rules, not 1"]
    pattern = rules[0]["Properties"].get("Pattern", {})
    if pattern.get("source") != ["aws.ec2"]:
        problems.append(f"the rule's source is {pattern.get('source')!r}, not ['aws.ec2']")
    if sorted(pattern.get("detail-type", [])) != sorted(DETAIL_TYPES):
        problems.append(f"the rule matches {pattern.get('detail-type')!r}, not the notices")
    if set(pattern) - {"source", "detail-type"}:
        problems.append(
            f"the rule narrows the notices by {sorted(set(pattern) - {'source', 'detail-type'})}"
        )
    if function.get("ReservedConcurrentExecutions") != 1:
        problems.append("notices are not handled one at a time")
    role = function["Role"]["Fn::GetAtt"][0]
    for policy in ("FleetPolicy", "PassAgentRolePolicy"):
        if {"Ref": role} not in template["Resources"][policy]["Properties"]["Roles"]:
            problems.append(f"{policy} is not attached to {role}")
    inline = template["Resources"][role]["Properties"].get("Policies", [])
    if [p["PolicyName"] for p in inline] != ["logs", "status"]:
        problems.append(f"{role} has inline policies beyond its logs and the status read")
    return problems


def queue_problems(template: Template) -> list[str]:
    """The snapshot queue: FIFO, a FIFO dead-letter queue, finite redrive, long visibility."""
    problems = []
    reconcile = function_by_handler(template, "app.reconcile")
    events = [e for e in reconcile["Properties"].get("Events", {}).values() if e["Type"] == "SQS"]
    if len(events) != 1:
        return [f"reconcile has {len(events)} SQS event sources, not 1"]
    event = events[0]["Properties"]
    if "ReportBatchItemFailures" not in event.get("FunctionResponseTypes", []):
        problems.append("the SQS event source does not report batch item failures")
    queue_name = event["Queue"]["Fn::GetAtt"][0]
    queue = template["Resources"][queue_name]["Properties"]
    if queue.get("FifoQueue") is not True:
        problems.append(f"{queue_name} is not FIFO")
    if queue.get("ContentBasedDeduplication") is not False:
        problems.append(f"{queue_name}: content-based deduplication is on")
    timeout = reconcile["Properties"].get("Timeout") or template["Globals"]["Function"]["Timeout"]
    if queue.get("VisibilityTimeout", 30) < 6 * timeout:
        problems.append(f"{queue_name}: visibility timeout below 6 x {timeout} s")
    redrive = queue.get("RedrivePolicy", {})
    receives = redrive.get("maxReceiveCount")
    if not isinstance(receives, int) or not 1 <= receives <= 10:
        problems.append(f"{queue_name}: maxReceiveCount {receives!r} is not a small number")
    target = redrive.get("deadLetterTargetArn", {}).get("Fn::GetAtt", [None])[0]
    dead = template["Resources"].get(target, {})
    if dead.get("Type") != "AWS::SQS::Queue" or dead["Properties"].get("FifoQueue") is not True:
        problems.append(f"{queue_name}: no FIFO dead-letter queue")
    variables = reconcile["Properties"].get("Environment", {}).get("Variables", {})
    if variables.get("DYNAGENT_DEAD_LETTER_QUEUE_URL") != {"Ref": target}:
        problems.append("reconcile is not given the dead-letter queue's URL")
    return problems


# --- The template as it is ------------------------------------------------------------


def test_iam_is_least_privilege_on_the_managed_tag(template: Template) -> None:
    assert iam_problems(template) == []


def test_queue_is_fifo_with_a_dead_letter_queue(template: Template) -> None:
    assert queue_problems(template) == []


def test_spot_notices_reach_the_interruption_function(template: Template) -> None:
    assert interruption_problems(template) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("Pattern", "source"), ["aws.events"]),
        (("Pattern", "detail-type"), ["EC2 Spot Instance Interruption Warning"]),
        (("Pattern", "detail"), {"instance-action": ["terminate"]}),
    ],
)
def test_interruption_check_notices_a_wrong_rule(
    template: Template, path: tuple[str, str], value: Any
) -> None:
    broken = copy.deepcopy(template)
    events = broken["Resources"]["InterruptionFunction"]["Properties"]["Events"]
    events["SpotNotices"]["Properties"][path[0]][path[1]] = value
    assert interruption_problems(broken)


@pytest.mark.parametrize("policy", ["FleetPolicy", "PassAgentRolePolicy"])
def test_interruption_check_notices_a_missing_policy(template: Template, policy: str) -> None:
    broken = copy.deepcopy(template)
    roles = broken["Resources"][policy]["Properties"]["Roles"]
    roles.remove({"Ref": "InterruptionRole"})
    assert interruption_problems(broken)


def test_interruption_check_notices_an_extra_inline_policy(template: Template) -> None:
    broken = copy.deepcopy(template)
    policies = broken["Resources"]["InterruptionRole"]["Properties"]["Policies"]
    policies.append({"PolicyName": "queues", "PolicyDocument": {"Statement": []}})
    assert interruption_problems(broken)


def test_the_ec2_policy_names_exactly_the_reviewed_actions(template: Template) -> None:
    actions = {
        action
        for _, statement in statements(template)
        for action in as_list(statement["Action"])
        if action.startswith("ec2:")
    }
    assert actions == EC2_ACTIONS


def test_only_the_reconcile_function_touches_the_dead_letter_queue(template: Template) -> None:
    senders = [
        where
        for where, statement in statements(template)
        if "sqs:SendMessage" in as_list(statement["Action"])
        and statement["Resource"] == {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}
    ]
    assert senders == ["ReconcileRole/queues[2]"]


def sqs_grants(template: Template) -> set[tuple[str, str, str]]:
    """(where, action, resource) of every SQS action any policy allows."""
    return {
        (where.split("[")[0], action, json.dumps(statement["Resource"], sort_keys=True))
        for where, statement in statements(template)
        for action in as_list(statement["Action"])
        if action.startswith("sqs:")
    }


def test_queue_tags_hold_the_status_written_by_reconcile_read_by_the_reader(
    template: Template,
) -> None:
    queue = json.dumps(SNAPSHOT_QUEUE_ARN, sort_keys=True)
    dead = json.dumps({"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}, sort_keys=True)
    notices = json.dumps(DRAIN_NOTICE_QUEUE_ARN, sort_keys=True)
    assert sqs_grants(template) == {
        ("ReconcileRole/queues", "sqs:ReceiveMessage", queue),
        ("ReconcileRole/queues", "sqs:DeleteMessage", queue),
        ("ReconcileRole/queues", "sqs:GetQueueAttributes", queue),
        ("ReconcileRole/queues", "sqs:ChangeMessageVisibility", queue),
        # The pool's summary after an applied snapshot (dynagent.aws.status).
        ("ReconcileRole/queues", "sqs:TagQueue", queue),
        ("ReconcileRole/queues", "sqs:SendMessage", dead),
        # Drain notices to the bridge (core.drain_notices), read by the publisher.
        ("ReconcileRole/queues", "sqs:SendMessage", notices),
        ("PublisherPolicy", "sqs:ReceiveMessage", notices),
        ("PublisherPolicy", "sqs:DeleteMessage", notices),
        ("ReconcileRole/queues", "sqs:GetQueueAttributes", dead),
        ("PublisherPolicy", "sqs:SendMessage", queue),
        ("StatusReaderPolicy", "sqs:ListQueueTags", queue),
        # A spot notice reads the pool's pending demand from the same summary.
        ("InterruptionRole/status", "sqs:ListQueueTags", queue),
    }
    reader = {
        action
        for where, statement in statements(template)
        if where.startswith("StatusReaderPolicy")
        for action in as_list(statement["Action"])
    }
    assert reader == {
        "ec2:DescribeInstances",
        "ec2:DescribeSpotInstanceRequests",
        "ec2:DescribeSpotPriceHistory",
        "sqs:ListQueueTags",
    }
    assert template["Outputs"]["StatusReaderPolicyArn"]["Value"] == {"Ref": "StatusReaderPolicy"}


# What the snapshot publisher (dynagent bridge, dynagent publish) calls: SqsPublisher sends
# to the queue URL it is given and looks nothing up. tests/infra runs the bridge against
# the local AWS and holds its calls to this set.
PUBLISHER_ACTIONS = {"sqs:SendMessage"}
SNAPSHOT_QUEUE_ARN = {"Fn::GetAtt": ["SnapshotQueue", "Arn"]}
# And with --drain-notices, what SqsDrainNotices calls on the functions' notice queue.
DRAIN_NOTICE_ACTIONS = {"sqs:ReceiveMessage", "sqs:DeleteMessage"}
DRAIN_NOTICE_QUEUE_ARN = {"Fn::GetAtt": ["DrainNoticeQueue", "Arn"]}


def publisher_expected() -> set[tuple[str, str]]:
    queue = json.dumps(SNAPSHOT_QUEUE_ARN, sort_keys=True)
    notices = json.dumps(DRAIN_NOTICE_QUEUE_ARN, sort_keys=True)
    return {(action, queue) for action in PUBLISHER_ACTIONS} | {
        (action, notices) for action in DRAIN_NOTICE_ACTIONS
    }


def publisher_grants(template: Template) -> set[tuple[str, str]]:
    """(action, resource) pairs PublisherPolicy allows; anything but an unconditional
    Allow of named actions on named resources shows up as a pair to fail on."""
    policy = template["Resources"]["PublisherPolicy"]
    assert policy["Type"] == "AWS::IAM::ManagedPolicy"
    grants = set()
    for statement in as_list(policy["Properties"]["PolicyDocument"]["Statement"]):
        if statement.get("Effect") != "Allow" or set(statement) - {"Effect", "Action", "Resource"}:
            grants.add(("unexpected statement", json.dumps(statement, sort_keys=True)))
            continue
        for action in as_list(statement["Action"]):
            for resource in as_list(statement["Resource"]):
                grants.add((action, json.dumps(resource, sort_keys=True)))
    return grants


def test_the_publisher_policy_allows_exactly_what_the_publisher_calls(template: Template) -> None:
    assert publisher_grants(template) == publisher_expected()
    output = template["Outputs"]["PublisherPolicyArn"]
    assert output["Value"] == {"Ref": "PublisherPolicy"}


@pytest.mark.parametrize(
    "statement",
    [
        {"Effect": "Allow", "Action": "sqs:GetQueueUrl", "Resource": SNAPSHOT_QUEUE_ARN},
        {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "*"},
        {
            "Effect": "Allow",
            "Action": "sqs:SendMessage",
            "Resource": {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]},
        },
        {"Effect": "Allow", "Action": "sqs:*", "Resource": SNAPSHOT_QUEUE_ARN},
    ],
)
def test_the_publisher_check_notices_more(template: Template, statement: Statement) -> None:
    broken = copy.deepcopy(template)
    document = broken["Resources"]["PublisherPolicy"]["Properties"]["PolicyDocument"]
    document["Statement"] = [*as_list(document["Statement"]), statement]
    assert publisher_grants(broken) != publisher_expected()


def test_functions_get_no_policies_from_sam(template: Template) -> None:
    # With a Role of their own, SAM adds nothing (its managed policies are on "*").
    for name, function in functions(template).items():
        assert "Role" in function["Properties"], name
        assert "Policies" not in function["Properties"], name
    assert "Policies" not in template["Globals"]["Function"]


def test_pass_role_is_optional_and_only_for_the_agent_role(template: Template) -> None:
    policy = template["Resources"]["PassAgentRolePolicy"]
    assert policy["Condition"] == "HasAgentRole"
    assert template["Conditions"]["HasAgentRole"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AgentInstanceProfileRoleArn"}, ""]}]
    }
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Resource"] == {"Ref": "AgentInstanceProfileRoleArn"}


def test_policy_placeholders_are_parameters_or_pseudo_parameters(template: Template) -> None:
    text = template["Resources"]["FleetPolicy"]["Properties"]["PolicyDocument"]["Fn::Sub"]
    names = set(re.findall(r"\$\{([^}]+)\}", text))
    assert names <= set(template["Parameters"]) | {"AWS::Partition", "AWS::AccountId"}
    assert {"ManagedTagKey", "ManagedTagValue"} <= names


def test_handlers_exist_in_the_entry_module(template: Template) -> None:
    handlers = {f["Properties"]["Handler"] for f in functions(template).values()}
    assert handlers == {"app.reconcile", "app.sweep", "app.interruption"}
    for function in functions(template).values():
        assert function["Properties"]["CodeUri"].rstrip("/") == "functions/aws"
    module = ast.parse((ROOT / "functions" / "aws" / "app.py").read_text())
    defined = {node.name for node in module.body if isinstance(node, ast.FunctionDef)}
    assert {"reconcile", "sweep", "interruption"} <= defined


def test_sweep_runs_every_minute_one_at_a_time(template: Template) -> None:
    sweep = function_by_handler(template, "app.sweep")["Properties"]
    (event,) = sweep["Events"].values()
    assert event["Type"] == "Schedule"
    assert event["Properties"]["Schedule"] == "rate(1 minute)"
    assert sweep["ReservedConcurrentExecutions"] == 1


def test_environment_matches_what_the_functions_read(template: Template) -> None:
    from dynagent.aws.functions import CONFIG_ENV, DEAD_LETTER_ENV, SNAPSHOT_QUEUE_ENV

    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    assert variables[CONFIG_ENV] == "/var/task/dynagent.yaml"
    assert {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_LOG_LEVEL"} <= set(variables)
    reconcile = function_by_handler(template, "app.reconcile")["Properties"]
    assert DEAD_LETTER_ENV in reconcile["Environment"]["Variables"]
    assert SNAPSHOT_QUEUE_ENV in reconcile["Environment"]["Variables"]


def test_outputs_give_the_publisher_what_it_needs(template: Template) -> None:
    outputs = template["Outputs"]
    assert outputs["SnapshotQueueUrl"]["Value"] == {"Ref": "SnapshotQueue"}
    assert outputs["SnapshotQueueArn"]["Value"] == {"Fn::GetAtt": ["SnapshotQueue", "Arn"]}
    assert outputs["DeadLetterQueueUrl"]["Value"] == {"Ref": "DeadLetterQueue"}


# --- The build inputs agree with the template ---------------------------------------


def test_every_makefile_build_has_a_target(template: Template) -> None:
    makefile = (INFRA / "Makefile").read_text()
    built = [
        n for n, r in template["Resources"].items() if r.get("Metadata", {}).get("BuildMethod")
    ]
    assert built
    for name in built:
        assert template["Resources"][name]["Metadata"]["BuildMethod"] == "makefile"
        assert re.search(rf"^(.* )?build-{name}( .*)?:", makefile, re.MULTILINE), name


def test_layer_wheels_are_built_for_the_runtime(template: Template) -> None:
    runtime = template["Globals"]["Function"]["Runtime"]
    layer = template["Resources"]["DependenciesLayer"]["Properties"]
    assert layer["CompatibleRuntimes"] == [runtime]
    assert layer["CompatibleArchitectures"] == template["Globals"]["Function"]["Architectures"]
    makefile = (INFRA / "Makefile").read_text()
    version = re.search(r"^LAMBDA_PYTHON := (\S+)$", makefile, re.MULTILINE)
    assert version and runtime == f"python{version.group(1)}"
    platforms = re.search(r"^LAMBDA_PLATFORMS := (.+)$", makefile, re.MULTILINE)
    assert platforms
    arch = layer["CompatibleArchitectures"][0]
    assert all(p.endswith(arch) for p in platforms.group(1).split())


def test_layer_requirements_mirror_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["aws"]]
    lines = (INFRA / "requirements.txt").read_text().splitlines()
    listed = [line.strip() for line in lines if line.strip() and not line.startswith("#")]

    def normal(requirement: str) -> str:
        return requirement.replace(" ", "").lower()

    # boto3 comes with the Lambda runtime.
    assert sorted(map(normal, listed)) == sorted(
        normal(r) for r in wanted if not r.lower().startswith("boto3")
    )


def test_example_config_loads_and_matches_the_default_tag_pair(template: Template) -> None:
    config = load_config(INFRA / "dynagent.example.yaml")
    parameters = template["Parameters"]
    assert config.pools
    for pool in config.pools.values():
        assert pool.provider.tag_key == parameters["ManagedTagKey"]["Default"]
        assert pool.provider.tag_value == parameters["ManagedTagValue"]["Default"]


# --- The checks notice a regression ---------------------------------------------------


def edit_fleet_policy(template: Template, edit: Callable[[dict[str, Statement]], None]) -> Template:
    """A copy of the template whose fleet policy statements (by Sid) went through edit."""
    broken = copy.deepcopy(template)
    document = broken["Resources"]["FleetPolicy"]["Properties"]["PolicyDocument"]
    policy = json.loads(document["Fn::Sub"])
    by_sid = {statement["Sid"]: statement for statement in policy["Statement"]}
    edit(by_sid)
    policy["Statement"] = list(by_sid.values())
    document["Fn::Sub"] = json.dumps(policy)
    return broken


def _drop_condition(sid: str) -> Callable[[dict[str, Statement]], None]:
    return lambda by_sid: by_sid[sid].pop("Condition")


def _drop_market_type(by_sid: dict[str, Statement]) -> None:
    del by_sid["AdoptSpotInstances"]["Condition"]["StringEquals"]["ec2:InstanceMarketType"]


def _terminate_anything(by_sid: dict[str, Statement]) -> None:
    by_sid["ReadFleet"]["Action"].append("ec2:TerminateInstances")


def _launch_untagged_volumes(by_sid: dict[str, Statement]) -> None:
    by_sid["LaunchFrom"]["Resource"].append("arn:aws:ec2:*:*:volume/*")


def _tag_at_any_action(by_sid: dict[str, Statement]) -> None:
    by_sid["TagAtLaunch"]["Condition"]["StringEquals"]["ec2:CreateAction"].append("CreateVolume")


def _other_tag_key(by_sid: dict[str, Statement]) -> None:
    by_sid["TerminateManaged"]["Condition"]["StringEquals"] = {
        "aws:ResourceTag/Name": "${ManagedTagValue}"
    }


def _ec2_star(by_sid: dict[str, Statement]) -> None:
    by_sid["ReadFleet"]["Action"] = "ec2:*"


def _any_tag_key(by_sid: dict[str, Statement]) -> None:
    del by_sid["MarkManaged"]["Condition"]["ForAllValues:StringLike"]


def _delete_all_tags(by_sid: dict[str, Statement]) -> None:
    del by_sid["MarkManaged"]["Condition"]["Null"]


@pytest.mark.parametrize(
    "edit",
    [
        _drop_condition("TerminateManaged"),
        _drop_condition("CancelManaged"),
        _drop_condition("MarkManaged"),
        _drop_condition("LaunchTagged"),
        _drop_condition("TagAtLaunch"),
        _drop_condition("AdoptSpotInstances"),
        _drop_market_type,
        _terminate_anything,
        _launch_untagged_volumes,
        _tag_at_any_action,
        _other_tag_key,
        _ec2_star,
        _any_tag_key,
        _delete_all_tags,
    ],
)
def test_iam_check_notices(
    template: Template, edit: Callable[[dict[str, Statement]], None]
) -> None:
    assert iam_problems(edit_fleet_policy(template, edit))


def test_iam_check_notices_sqs_on_star(template: Template) -> None:
    broken = copy.deepcopy(template)
    policies = broken["Resources"]["ReconcileRole"]["Properties"]["Policies"]
    queues = next(p for p in policies if p["PolicyName"] == "queues")
    queues["PolicyDocument"]["Statement"][2]["Resource"] = "*"
    assert iam_problems(broken)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("Resources", "SnapshotQueue", "Properties", "FifoQueue"), False),
        (("Resources", "DeadLetterQueue", "Properties", "FifoQueue"), False),
        (("Resources", "SnapshotQueue", "Properties", "ContentBasedDeduplication"), True),
        (("Resources", "SnapshotQueue", "Properties", "VisibilityTimeout"), 600),
        (("Resources", "SnapshotQueue", "Properties", "RedrivePolicy", "maxReceiveCount"), None),
        (("Resources", "ReconcileFunction", "Properties", "Timeout"), 900),
        (
            ("Resources", "ReconcileFunction", "Properties", "Events", "Snapshots", "Properties"),
            {"Queue": {"Fn::GetAtt": ["SnapshotQueue", "Arn"]}, "BatchSize": 10},
        ),
    ],
)
def test_queue_check_notices(template: Template, path: tuple[str, ...], value: Any) -> None:
    broken = copy.deepcopy(template)
    parent = broken
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    assert queue_problems(broken)


# --- Monitoring: alarms to one topic, and a dashboard of CATALOG's metrics -------------

TOPIC = {"Fn::If": ["CreateAlarmTopic", {"Ref": "AlarmTopic"}, {"Ref": "AlarmTopicArn"}]}
POOL_ALARMS = 5  # AlarmPools' AllowedPattern takes up to this many names
MI_QUERY = re.compile(
    r"SELECT (?P<stat>SUM|MAX|MIN|AVG)\((?P<metric>\w+)\) FROM (?P<namespace>\w+)"
    r"(?: WHERE pool = '(?P<pool>[^']*)')?"
)


@dataclass(frozen=True)
class Expected:
    """One alarm: what it watches (namespace/metric, statistic) and when it fires."""

    metric: str
    statistic: str
    period: int
    periods: int
    threshold: float
    comparison: str
    missing: str


EXPECTED_ALARMS = {
    "DeadLetterAlarm": Expected(
        "AWS/SQS/ApproximateNumberOfMessagesVisible", "Maximum", 300, 1, 0,
        "GreaterThanThreshold", "notBreaching",
    ),
    "ReconcileErrorsAlarm": Expected(
        "AWS/Lambda/Errors", "Sum", 300, 1, 0, "GreaterThanThreshold", "notBreaching"
    ),
    "SweepErrorsAlarm": Expected(
        "AWS/Lambda/Errors", "Sum", 300, 1, 0, "GreaterThanThreshold", "notBreaching"
    ),
    "InterruptionErrorsAlarm": Expected(
        "AWS/Lambda/Errors", "Sum", 300, 1, 0, "GreaterThanThreshold", "notBreaching"
    ),
    "NoSnapshotsAlarm": Expected(
        "dynagent/SnapshotsApplied", "SUM", 60, 10, 1, "LessThanThreshold", "breaching"
    ),
    "LaunchErrorsAlarm": Expected(
        "dynagent/LaunchErrors", "SUM", 300, 3, 0, "GreaterThanThreshold", "notBreaching"
    ),
    "PendingAtMaxAlarm": Expected(
        "dynagent/PendingAtMax", "MAX", 300, 6, 1, "GreaterThanOrEqualToThreshold",
        "notBreaching",
    ),
} | {
    f"NoSnapshotsPool{n}Alarm": Expected(
        "dynagent/SnapshotsApplied", "SUM", 60, 10, 1, "LessThanThreshold", "breaching"
    )
    for n in range(1, POOL_ALARMS + 1)
}  # fmt: skip


def alarm_expression(properties: dict[str, Any]) -> str:
    """The Metrics Insights query of an alarm, with a per-pool !Sub's pool as ${Pool}."""
    (query,) = properties["Metrics"]
    assert query["ReturnData"] is True
    expression = query["Expression"]
    if isinstance(expression, dict):
        text, _ = expression["Fn::Sub"]
        return str(text)
    return str(expression)


def observed(properties: dict[str, Any]) -> Expected:
    """What an alarm's properties say, in the terms of Expected."""
    if "Metrics" in properties:
        (query,) = properties["Metrics"]
        match = MI_QUERY.fullmatch(alarm_expression(properties))
        assert match, f"not a Metrics Insights query: {alarm_expression(properties)}"
        metric = f"{match['namespace']}/{match['metric']}"
        statistic, period = match["stat"], query["Period"]
    else:
        metric = f"{properties['Namespace']}/{properties['MetricName']}"
        statistic, period = properties["Statistic"], properties["Period"]
    return Expected(
        metric, statistic, period, properties["EvaluationPeriods"], properties["Threshold"],
        properties["ComparisonOperator"], properties["TreatMissingData"],
    )  # fmt: skip


def alarm_problems(template: Template) -> list[str]:
    """Alarms that differ from EXPECTED_ALARMS, watch a metric not in CATALOG, or notify
    anything but the alarm topic."""
    from dynagent.report.metrics import BY_NAME, NAMESPACE

    problems = []
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    if set(alarms) != set(EXPECTED_ALARMS):
        problems.append(f"alarms {sorted(alarms)} are not {sorted(EXPECTED_ALARMS)}")
    for name, alarm in alarms.items():
        properties = alarm["Properties"]
        expected = EXPECTED_ALARMS.get(name)
        got = observed(properties)
        if expected is not None and got != expected:
            problems.append(f"{name}: {got} is not {expected}")
        # Every evaluation period must breach ("for 15 minutes"), not M of N.
        if properties.get("DatapointsToAlarm", got.periods) != got.periods:
            problems.append(f"{name}: DatapointsToAlarm is not EvaluationPeriods")
        namespace, _, metric = got.metric.rpartition("/")
        if namespace == NAMESPACE and metric not in BY_NAME:
            problems.append(f"{name}: {metric} is not in the metrics CATALOG")
        for actions in ("AlarmActions", "OKActions"):
            if properties.get(actions) != [TOPIC]:
                problems.append(f"{name}: {actions} is not the alarm topic")
    return problems


def test_the_alarms_watch_what_they_should_and_notify_the_topic(template: Template) -> None:
    assert alarm_problems(template) == []


def test_the_alarm_topic_is_made_only_without_a_parameter(template: Template) -> None:
    topic = template["Resources"]["AlarmTopic"]
    assert topic["Condition"] == "CreateAlarmTopic"
    assert template["Conditions"]["CreateAlarmTopic"] == {
        "Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]
    }
    subscription = template["Resources"]["AlarmEmailSubscription"]
    assert subscription["Condition"] == "HasAlarmEmail"
    assert subscription["Properties"]["TopicArn"] == TOPIC
    assert subscription["Properties"]["Endpoint"] == {"Ref": "AlarmEmail"}
    assert template["Outputs"]["AlarmTopicArn"]["Value"] == TOPIC
    for parameter in ("AlarmTopicArn", "AlarmEmail", "AlarmPools"):
        assert template["Parameters"][parameter]["Default"] == ""


def test_the_function_and_queue_alarms_name_this_stacks_resources(template: Template) -> None:
    alarms = template["Resources"]
    dlq = "DeadLetterQueue"
    dimension = {
        "DeadLetterAlarm": {"Name": "QueueName", "Value": {"Fn::GetAtt": [dlq, "QueueName"]}},
        "ReconcileErrorsAlarm": {"Name": "FunctionName", "Value": {"Ref": "ReconcileFunction"}},
        "SweepErrorsAlarm": {"Name": "FunctionName", "Value": {"Ref": "SweepFunction"}},
        "InterruptionErrorsAlarm": {
            "Name": "FunctionName", "Value": {"Ref": "InterruptionFunction"}
        },
    }  # fmt: skip
    for name, wanted in dimension.items():
        assert alarms[name]["Properties"]["Dimensions"] == [wanted]


def _evaluate(value: Any, parameters: dict[str, str]) -> Any:
    """CloudFormation's Ref, Sub (of parameters), Split, Select, Equals, Not: enough for
    the conditions and the pool alarms' queries."""
    if isinstance(value, list):
        return [_evaluate(item, parameters) for item in value]
    if not isinstance(value, dict):
        return value
    ((function, argument),) = value.items()
    if function == "Ref":
        return parameters[argument]
    if function == "Fn::Sub":
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        names = parameters | {k: _evaluate(v, parameters) for k, v in variables.items()}
        return re.sub(r"\$\{([^}]+)\}", lambda m: names[m.group(1)], text)
    argument = _evaluate(argument, parameters)
    if function == "Fn::Split":
        return argument[1].split(argument[0])
    if function == "Fn::Select":
        index, items = argument
        if not 0 <= index < len(items):
            raise IndexError("Fn::Select out of range fails the deployment")
        return items[index]
    if function == "Fn::Equals":
        return argument[0] == argument[1]
    if function == "Fn::Not":
        return not argument[0]
    raise AssertionError(f"unexpected {function}")


@pytest.mark.parametrize(
    "pools", [[], ["a100"], ["a100", "t4.spot"], ["p1", "p2", "p3", "p4", "p5"]]
)
def test_each_pool_in_alarm_pools_gets_its_own_snapshot_alarm(
    template: Template, pools: list[str]
) -> None:
    value = ",".join(pools)
    assert re.fullmatch(template["Parameters"]["AlarmPools"]["AllowedPattern"], value)
    parameters = {"AlarmPools": value}
    made = {}
    for n in range(1, POOL_ALARMS + 1):
        alarm = template["Resources"][f"NoSnapshotsPool{n}Alarm"]
        if _evaluate(template["Conditions"][alarm["Condition"]], parameters):
            (query,) = alarm["Properties"]["Metrics"]
            made[n] = _evaluate(query["Expression"], parameters)
    assert made == {
        n: f"SELECT SUM(SnapshotsApplied) FROM dynagent WHERE pool = '{pool}'"
        for n, pool in enumerate(pools, start=1)
    }


@pytest.mark.parametrize(
    "value", ["p1,p2,p3,p4,p5,p6", "a100,", ",a100", "it's", "a b", "a100,,t4"]
)
def test_alarm_pools_refuses_what_the_alarms_cannot_take(template: Template, value: str) -> None:
    assert not re.fullmatch(template["Parameters"]["AlarmPools"]["AllowedPattern"], value)


def dashboard_body(template: Template) -> tuple[dict[str, Any], set[str]]:
    """The dashboard's JSON with each ${X} replaced by a placeholder SUB(X), and the Xs."""
    text = template["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    assert isinstance(text, str)
    names = set(re.findall(r"\$\{([^}]+)\}", text))
    body = json.loads(re.sub(r"\$\{([^}]+)\}", r"SUB(\1)", text))
    assert isinstance(body, dict)
    return body, names


SEARCH = re.compile(
    r"SEARCH\('Namespace=\"(?P<namespace>[^\"]+)\" MetricName=\"(?P<metric>\w+)\"', "
    r"'(?P<stat>\w+)', (?P<period>\d+)\)"
)
# What the dashboard must show, from the issue: fleet, demand, cost, launches and
# terminations by reason, refusals by code, snapshot age; and the warm pool's stopped
# machines by type, their disks' cost, stops, starts and refused starts (issue 29).
DASHBOARD_METRICS = {
    "Instances", "Agents", "PendingSlots", "CostPerHour", "Launches", "Terminations",
    "LaunchErrors", "SnapshotAge", "StoppedInstances", "StoppedDiskCost", "Stops", "Starts",
    "StartsRefused",
}  # fmt: skip


def dashboard_problems(template: Template) -> list[str]:
    from dynagent.report.metrics import BY_NAME, NAMESPACE

    problems = []
    body, names = dashboard_body(template)
    resources_ = set(template["Resources"])
    for name in names:
        if name.split(".")[0] not in resources_ and name not in ("AWS::Region", "AWS::StackName"):
            problems.append(f"${{{name}}} is not a resource, its attribute or a pseudo parameter")
    shown = set()
    for widget in body["widgets"]:
        for line in widget.get("properties", {}).get("metrics", []):
            for item in line:
                if isinstance(item, dict) and "SEARCH" in item.get("expression", ""):
                    match = SEARCH.fullmatch(item["expression"])
                    if not match or match["namespace"] != NAMESPACE:
                        problems.append(f"a search outside {NAMESPACE}: {item['expression']}")
                    elif match["metric"] not in BY_NAME:
                        problems.append(f"{match['metric']} is not in the metrics CATALOG")
                    else:
                        shown.add(match["metric"])
            if line and line[0] == NAMESPACE:
                problems.append(f"{line[1]}: a dynagent metric with a fixed dimension set")
    if missing := DASHBOARD_METRICS - shown:
        problems.append(f"the dashboard lacks {sorted(missing)}")
    alarms = [w for w in body["widgets"] if w["type"] == "alarm"]
    listed = {a for w in alarms for a in w["properties"]["alarms"]}
    unconditional = {
        f"SUB({name}.Arn)"
        for name, alarm in resources(template, "AWS::CloudWatch::Alarm").items()
        if "Condition" not in alarm
    }
    if len(alarms) != 1 or not unconditional <= listed:
        problems.append(f"the alarm widget does not list {sorted(unconditional - listed)}")
    return problems


def test_the_dashboard_is_json_of_catalog_metrics(template: Template) -> None:
    assert dashboard_problems(template) == []
    body, _ = dashboard_body(template)
    # Widgets do not overlap on the 24-column grid.
    cells = set()
    for widget in body["widgets"]:
        assert widget["x"] + widget["width"] <= 24
        for x in range(widget["x"], widget["x"] + widget["width"]):
            for y in range(widget["y"], widget["y"] + widget["height"]):
                assert (x, y) not in cells, f"widgets overlap at {(x, y)}"
                cells.add((x, y))


def _set_body(template: Template, old: str, new: str) -> Template:
    broken = copy.deepcopy(template)
    properties = broken["Resources"]["Dashboard"]["Properties"]
    text = properties["DashboardBody"]["Fn::Sub"]
    assert old in text
    properties["DashboardBody"]["Fn::Sub"] = text.replace(old, new, 1)
    return broken


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('MetricName=\\"Instances\\"', 'MetricName=\\"Instance\\"'),
        ('MetricName=\\"LaunchErrors\\"', 'MetricName=\\"DeadLetters\\"'),
        ('Namespace=\\"dynagent\\" MetricName=\\"Agents', 'Namespace=\\"x\\" MetricName=\\"Agents'),
        ('"${SweepErrorsAlarm.Arn}"', '"${NoSuchAlarm.Arn}"'),
        ('"${LaunchErrorsAlarm.Arn}", ', ""),
        ('["AWS/SQS"', '["dynagent", "Instances", "pool", "a100"], ["AWS/SQS"'),
        ('"widgets": [', '"widgets": [,'),
    ],
)
def test_the_dashboard_check_notices(template: Template, old: str, new: str) -> None:
    broken = _set_body(template, old, new)
    try:
        assert dashboard_problems(broken)
    except json.JSONDecodeError:
        assert new.endswith(",")  # the one edit that breaks the JSON itself


@pytest.mark.parametrize(
    ("alarm", "key", "value"),
    [
        ("DeadLetterAlarm", "Threshold", 5),
        ("NoSnapshotsAlarm", "TreatMissingData", "notBreaching"),
        ("LaunchErrorsAlarm", "EvaluationPeriods", 1),
        ("PendingAtMaxAlarm", "ComparisonOperator", "GreaterThanThreshold"),
        ("SweepErrorsAlarm", "OKActions", []),
        ("ReconcileErrorsAlarm", "AlarmActions", ["arn:aws:sns:us-east-1:123456789012:other"]),
        ("NoSnapshotsPool3Alarm", "DatapointsToAlarm", 5),
    ],
)
def test_the_alarm_check_notices(template: Template, alarm: str, key: str, value: Any) -> None:
    broken = copy.deepcopy(template)
    broken["Resources"][alarm]["Properties"][key] = value
    assert alarm_problems(broken)


def test_the_alarm_check_notices_a_metric_outside_the_catalog(template: Template) -> None:
    broken = copy.deepcopy(template)
    (query,) = broken["Resources"]["LaunchErrorsAlarm"]["Properties"]["Metrics"]
    query["Expression"] = "SELECT SUM(LaunchFailures) FROM dynagent"
    assert any("not in the metrics CATALOG" in p for p in alarm_problems(broken))


def test_every_function_may_be_traced_and_may_send_traces_only(template: Template) -> None:
    functions_ = template["Globals"]["Function"]
    assert functions_["Tracing"] == {"Ref": "Tracing"}
    assert template["Parameters"]["Tracing"]["AllowedValues"] == ["Active", "PassThrough"]
    # Off, the Tracer's SDK is not imported at all (functions/aws/app.py reads this).
    assert functions_["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == {
        "Fn::If": ["Traced", "false", "true"]
    }
    assert template["Conditions"]["Traced"] == {"Fn::Equals": [{"Ref": "Tracing"}, "Active"]}
    policy = template["Resources"]["TracingPolicy"]["Properties"]
    roles = {role["Ref"] for role in policy["Roles"]}
    function_roles = {
        f["Properties"]["Role"]["Fn::GetAtt"][0] for f in functions(template).values()
    }
    assert roles == function_roles
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert set(statement["Action"]) == TRACE_WRITES and statement["Resource"] == "*"
