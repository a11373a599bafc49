"""``dynagent doctor`` on AWS: a well-formed account passes, and each thing a first launch
would trip on is reported with its fix, against the local AWS (moto's server on loopback,
boto3 over HTTP), through the real EC2, Service Quotas, IAM, CloudFormation and SQS APIs."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError

from dynagent.cli.doctor.aws import AwsClients, check, guarded
from dynagent.cli.doctor.aws.concurrency import RESERVATIONS, RESERVED
from dynagent.cli.doctor.findings import Finding, Status
from dynagent.cli.main import main
from dynagent.core.config import Config
from dynagent.testing.aws.local_aws import LocalAws
from dynagent.testing.aws.stack import TEMPLATE, DeployFailed, deploy_stack

from .aws_account import (
    REGION,
    STACK,
    TAG_KEY,
    TAG_VALUE,
    Account,
    stack_parameters,
    well_formed,
)


@pytest.fixture
def account(aws: LocalAws) -> Account:
    return well_formed(aws)


@pytest.fixture
def account_env(account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's environment pointed at the account, as the AWS CLI's would be."""
    for name, value in account.aws.env().items():
        monkeypatch.setenv(name, value)


def run(
    account: Account, config: Config | None = None, stack: str | None = None, clients: Any = None
) -> list[Finding]:
    config = config or account.config()
    aws = account.aws
    made = clients or AwsClients(lambda service, region: aws.client(service, region))
    return check(config, list(config.pools.values()), made, stack, REGION)


def not_ok(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.status is not Status.OK and f.check != "aws.stack"]


def only(findings: list[Finding], check: str, status: Status = Status.FAIL) -> Finding:
    (found,) = [f for f in findings if f.check == check and f.status is status]
    return found


# --- A well-formed account ---------------------------------------------------------------


def write_config(account: Account, tmp_path: Path, *pools: dict[str, Any]) -> str:
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump({"resource_pools": list(pools or account.pools())}))
    return str(path)


def test_a_well_formed_account_passes_every_check(
    account: Account, account_env: None, tmp_path: Path, capsys: Any
) -> None:
    code = main(["doctor", "--config", write_config(account, tmp_path), "--stack", STACK])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[-1] == f"{len(lines) - 1} passed, 0 failed, 0 warnings, 0 not checked"
    assert all(line.startswith("✔ ") for line in lines[:-1])
    # Every check ran: 8 offerings of train by CreateFleet, big by RunInstances, cheap by
    # RequestSpotInstances; three roles, two findings each; both queues.
    text = "\n".join(lines)
    assert text.count("(CreateFleet)") == 8
    assert "pool big: dry run of launching p4d.24xlarge" in text and "(RunInstances)" in text
    assert "(RequestSpotInstances)" in text
    assert text.count("stack dyn: role ") == 6 and text.count("queue: https://") == 2
    assert (
        f"✔ Lambda concurrency in {REGION}: 998 of 1000 unreserved; the stack's functions "
        "hold theirs" in lines
    )
    for check_name in ("AMI", "offered in", "network", "vCPU quota", "placement scores",
                       "AWSServiceRoleForEC2Spot"):  # fmt: skip
        assert check_name in text


def test_json_names_each_check_and_says_nothing_failed(
    account: Account, account_env: None, tmp_path: Path, capsys: Any
) -> None:
    config = write_config(account, tmp_path, account.pool("big"))
    assert main(["doctor", "--config", config, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["failed"], report["skipped"]) == (False, [])
    statuses = {(c["check"], c["status"]) for c in report["checks"]}
    assert statuses == {
        ("aws.image", "ok"), ("aws.offered", "ok"), ("aws.network", "ok"), ("aws.quota", "ok"),
        ("aws.dry_run", "ok"), ("aws.lambda_concurrency", "ok"), ("aws.stack", "unknown"),
    }  # fmt: skip
    (stack,) = [c for c in report["checks"] if c["check"] == "aws.stack"]
    assert stack["fix"] == "give the deployed stack's name: --stack NAME"


def test_a_pool_with_offerings_that_never_launched_is_dry_run_as_run_instances(
    account: Account,
) -> None:
    ec2 = account.aws.client("ec2")
    for template in ec2.describe_launch_templates()["LaunchTemplates"]:
        ec2.delete_launch_template(LaunchTemplateId=template["LaunchTemplateId"])
    findings = run(account, account.config(account.pool("train")))
    dry_runs = [f for f in findings if f.check == "aws.dry_run"]
    assert len(dry_runs) == 8 and all(f.status is Status.OK for f in dry_runs)
    assert all(f.what.endswith("(RunInstances)") for f in dry_runs)
    assert not ec2.describe_instances()["Reservations"]  # a dry run launches nothing


# --- Seeded failures, each with its fix -------------------------------------------------------


def test_a_missing_ami_fails_naming_the_region(account: Account) -> None:
    big = account.pool("big")
    big["provider"]["image_id"] = "ami-0123456789abcdef0"
    findings = run(account, account.config(big))
    image = only(findings, "aws.image")
    assert image.what == f"pool big: AMI ami-0123456789abcdef0 in {REGION}"
    assert "no such image in this region" in image.why
    assert "aws ec2 describe-images" in image.fix and "copy-image" in image.fix
    # The dry run EC2 refuses for the same AMI is not a second failure.
    dry_run = only(findings, "aws.dry_run", Status.UNKNOWN)
    assert dry_run.what == (
        f"pool big: dry run of launching p4d.24xlarge in {account.subnets['us-west-2b']} "
        "(RunInstances)"
    )
    assert dry_run.why == "not checked: EC2 refuses the AMI above (InvalidAMIID.NotFound)"
    assert [f.check for f in not_ok(findings)] == ["aws.image", "aws.dry_run"]


def test_a_missing_ami_is_one_failure_not_one_per_offering(
    account: Account, account_env: None, tmp_path: Path, capsys: Any
) -> None:
    train = account.pool("train")
    train["provider"]["image_id"] = "ami-0123456789abcdef0"
    assert main(["doctor", "--config", write_config(account, tmp_path, train)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("✘ ")] == [
        f"✘ pool train: AMI ami-0123456789abcdef0 in {REGION}: no such image in this region "
        "(AMIs are regional; a copy has another id) (fix: set image_id to an AMI of "
        f"{REGION} (aws ec2 describe-images --region {REGION} --image-ids "
        "ami-0123456789abcdef0), or copy it: aws ec2 copy-image)"
    ]
    assert (
        "? pool train: dry runs of its 8 launches: not checked: EC2 refuses the AMI above "
        "(InvalidAMIID.NotFound) (fix: correct image_id as above, then run doctor again)"
    ) in lines
    assert lines[-1].endswith(" 1 failed, 0 warnings, 2 not checked")  # and the stack


def test_when_the_image_check_fails_other_dry_run_failures_still_fail(account: Account) -> None:
    ec2 = account.aws.client("ec2")
    arm = ec2.describe_images(Filters=[{"Name": "architecture", "Values": ["arm64"]}])["Images"]
    big = account.pool("big")
    big["provider"]["image_id"] = arm[0]["ImageId"]  # the image check fails; EC2 knows it
    clients = operator(account.aws, EVERYTHING_BUT_IAM)  # and may not pass the agents' role
    findings = run(account, account.config(big), None, clients)
    assert [(f.check, f.status) for f in not_ok(findings)] == [
        ("aws.image", Status.FAIL),
        ("aws.dry_run", Status.FAIL),
    ]
    assert only(findings, "aws.dry_run").why.startswith("UnauthorizedOperation: ")


def test_an_ami_of_another_architecture_fails(account: Account) -> None:
    ec2 = account.aws.client("ec2")
    arm = ec2.describe_images(Filters=[{"Name": "architecture", "Values": ["arm64"]}])["Images"]
    big = account.pool("big")
    big["provider"]["image_id"] = arm[0]["ImageId"]
    image = only(run(account, account.config(big)), "aws.image")
    assert image.why == "the image is arm64, which p4d.24xlarge cannot run"
    assert image.fix == "use an image built for x86_64, or instance types that run arm64"


def test_a_type_not_offered_in_a_subnets_zone_fails(account: Account) -> None:
    account.aws.withhold_instance_type("g5.12xlarge", "us-west-2b")
    findings = run(account, account.config(account.pool("train")))
    (offered,) = not_ok(findings)
    subnet_b = account.subnets["us-west-2b"]
    assert offered.what.startswith("pool train: g5.12xlarge offered in ")
    assert offered.why.startswith(f"not offered in {subnet_b} (us-west-2b); offered in us-west-2a")
    assert offered.fix.startswith("give subnets in us-west-2a")
    assert offered.fix.endswith("(offerings.subnet_ids), or drop g5.12xlarge")


def test_a_quota_below_one_machine_fails_and_below_max_instances_warns(account: Account) -> None:
    account.aws.set_service_quota("L-417A185B", 48)  # P On-Demand: p4d.24xlarge has 96
    account.aws.set_service_quota("L-DB2E81BA", 96)  # G On-Demand: 4 x g5.12xlarge is 192
    findings = run(account, account.config(account.pool("big"), account.pool("train")))
    quota = only(findings, "aws.quota")
    assert quota.what == f"pool big: On-Demand P vCPU quota in {REGION} (L-417A185B)"
    assert quota.why == "48 vCPUs, one p4d.24xlarge needs 96"
    assert quota.fix == (
        "aws service-quotas request-service-quota-increase --service-code ec2 "
        f"--quota-code L-417A185B --region {REGION} --desired-value 192"
    )
    warning = only(findings, "aws.quota", Status.WARN)
    assert warning.what.startswith("pool train: On-Demand G and VT")
    assert warning.why == "96 vCPUs: one g5.12xlarge (48) fits, max_instances 4 need 192"


def test_a_quota_only_at_its_default_is_read_from_the_default(account: Account) -> None:
    account.aws.set_service_quota("L-417A185B", 192, applied=False)
    findings = run(account, account.config(account.pool("big")))
    assert only(findings, "aws.quota", Status.OK).why == "192 vCPUs, 2 x p4d.24xlarge need 192"


def test_a_quota_service_quotas_does_not_know_is_not_checked(aws: LocalAws) -> None:
    account = well_formed(aws, quotas={})
    findings = run(account, account.config(account.pool("big")))
    quota = only(findings, "aws.quota", Status.UNKNOWN)
    assert quota.why == "Service Quotas reports no value"
    assert "--quota-code L-417A185B" in quota.fix


def operator(aws: LocalAws, statements: list[dict[str, Any]]) -> AwsClients:
    """Clients signed by an IAM user allowed only ``statements``."""
    iam = aws.client("iam")
    iam.create_user(UserName="operator")
    policy = {"Version": "2012-10-17", "Statement": statements}
    iam.put_user_policy(UserName="operator", PolicyName="doctor", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="operator")["AccessKey"]
    session = boto3.session.Session(
        aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"]
    )
    return AwsClients(
        lambda service, region: session.client(
            service, region_name=region, endpoint_url=aws.endpoint_url
        )
    )


EVERYTHING_BUT_IAM = [{"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}]


def test_pass_role_refused_by_the_dry_run_fails_every_launch_of_the_profile(
    account: Account,
) -> None:
    clients = operator(account.aws, EVERYTHING_BUT_IAM)
    findings = run(
        account, account.config(account.pool("big"), account.pool("cheap")), None, clients
    )
    failed = not_ok(findings)
    assert [f.what for f in failed] == [
        f"pool big: dry run of launching p4d.24xlarge in {account.subnets['us-west-2b']} "
        "(RunInstances)",
        f"pool cheap: dry run of launching g4dn.xlarge in {account.subnets['us-west-2c']} "
        "(RequestSpotInstances)",
    ]
    for finding in failed:
        assert finding.why.startswith("UnauthorizedOperation: ")
        assert f"iam:PassRole on resource: {account.agent_role}" in finding.why
        assert "allow iam:PassRole on the profile's role to EC2" in finding.fix
        assert "AgentInstanceProfileRoleArn" in finding.fix


def test_pass_role_allowed_to_ec2_lets_the_dry_runs_pass(account: Account) -> None:
    pass_role = {
        "Effect": "Allow",
        "Action": "iam:PassRole",
        "Resource": account.agent_role,
        "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
    }
    clients = operator(account.aws, [*EVERYTHING_BUT_IAM, pass_role])
    assert not_ok(run(account, account.config(account.pool("big")), None, clients)) == []


@pytest.mark.parametrize("seeded", ["subnet in another region", "group in another VPC",
                                    "subnets in two VPCs"])  # fmt: skip
def test_a_network_of_another_region_or_vpc_fails(account: Account, seeded: str) -> None:
    big = account.pool("big")
    interface = big["provider"]["network_interface"]
    if seeded == "subnet in another region":
        east = account.aws.client("ec2", "us-east-1")
        vpc = east.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
        interface["subnet_id"] = east.create_subnet(VpcId=vpc, CidrBlock="10.9.0.0/24")["Subnet"][
            "SubnetId"
        ]
        expected = f"{interface['subnet_id']} is not in {REGION} (another region's, or mistyped)"
    elif seeded == "group in another VPC":
        ec2 = account.aws.client("ec2")
        default = ec2.describe_security_groups(GroupNames=["default"])["SecurityGroups"][0]
        interface["security_group_id"] = default["GroupId"]
        expected = f"{default['GroupId']} is in {default['VpcId']}, the subnets in {account.vpc}"
    else:
        ec2 = account.aws.client("ec2")
        other = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])
        foreign = other["Subnets"][0]
        big["provider"]["offerings"] = {
            "instance_types": ["p4d.24xlarge"],
            "subnet_ids": [account.subnets["us-west-2b"], foreign["SubnetId"]],
        }
        expected = (
            f"the subnets span VPCs: {account.subnets['us-west-2b']} in {account.vpc}, "
            f"{foreign['SubnetId']} in {foreign['VpcId']}"
        )
    network = only(run(account, account.config(big)), "aws.network")
    assert expected in network.why.split("; ")
    assert network.fix.startswith(f"name subnets and a security group of one VPC in {REGION}")


def test_a_missing_spot_service_linked_role_fails(account: Account) -> None:
    iam = account.aws.client("iam")
    iam.delete_role(RoleName="AWSServiceRoleForEC2Spot")
    findings = run(account, account.config(account.pool("cheap")))
    role = only(findings, "aws.spot_role")
    assert role.why == "the account has none, so every spot launch is refused"
    assert role.fix == "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"
    # Pools that buy no spot do not need it.
    assert not_ok(run(account, account.config(account.pool("big")))) == []


def test_spot_placement_scores_warn_when_low_and_are_unknown_when_absent(account: Account) -> None:
    account.aws.set_spot_placement_score("g4dn.xlarge", "us-west-2c", 2)
    low = only(run(account, account.config(account.pool("cheap"))), "aws.spot_score", Status.WARN)
    assert low.why.startswith("2 in us-west-2c (of 10): spot requests for 3 machines")
    cheap = account.pool("cheap")
    cheap["provider"]["instance_type"] = "g6.xlarge"  # nothing scored
    none = only(run(account, account.config(cheap)), "aws.spot_score", Status.UNKNOWN)
    assert none.why == "EC2 gave no score for these types and zones"


class _CloudFormationYaml(yaml.SafeLoader):
    """template.yaml as plain data: CloudFormation's short forms (!Ref...) read as None."""


_CloudFormationYaml.add_multi_constructor("!", lambda loader, suffix, node: None)


def test_the_concurrency_check_counts_what_template_yaml_reserves() -> None:
    template = yaml.load(TEMPLATE.read_text(), Loader=_CloudFormationYaml)
    reserved = {
        name: resource["Properties"]["ReservedConcurrentExecutions"]
        for name, resource in template["Resources"].items()
        if "ReservedConcurrentExecutions" in resource.get("Properties", {})
    }
    assert reserved == RESERVED
    assert sum(reserved.values()) == RESERVATIONS


def test_a_lambda_concurrency_of_10_fails_as_the_deploy_would(aws: LocalAws) -> None:
    aws.set_lambda_concurrency(10)  # a new account's Concurrent executions
    account = well_formed(aws, stack=False)
    (failed,) = not_ok(run(account, account.config(account.pool("big"))))
    assert (failed.check, failed.what) == (
        "aws.lambda_concurrency",
        f"Lambda concurrency in {REGION}",
    )
    assert failed.why == (
        "10 of 10 unreserved: the stack's sweep and interruption functions reserve 2, and "
        "Lambda keeps 100 unreserved, so the deploy would fail"
    )
    assert failed.fix == (
        "raise the Lambda quota Concurrent executions (L-B99A9384) to at least 102: "
        "aws service-quotas request-service-quota-increase --service-code lambda "
        f"--quota-code L-B99A9384 --region {REGION} --desired-value 102"
    )
    cloudformation = aws.client("cloudformation")
    with pytest.raises(DeployFailed, match=r"below its minimum value of \[10\]"):
        deploy_stack(cloudformation, "refused", stack_parameters(account))
    # The value the fix asks for is enough: doctor passes, and so does the deploy.
    aws.set_lambda_concurrency(102)
    assert not_ok(run(account, account.config(account.pool("big")))) == []
    deploy_stack(cloudformation, STACK, stack_parameters(account))
    findings = run(account, account.config(account.pool("big")), STACK)
    assert only(findings, "aws.lambda_concurrency", Status.OK).why == (
        "100 of 102 unreserved; the stack's functions hold theirs"
    )


def test_other_functions_reservations_count_against_the_stack(aws: LocalAws) -> None:
    aws.set_lambda_concurrency(1000)
    account = well_formed(aws, stack=False)
    iam, lam = aws.client("iam"), aws.client("lambda")
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
             "Principal": {"Service": "lambda.amazonaws.com"}}]}  # fmt: skip
    role = iam.create_role(RoleName="other", AssumeRolePolicyDocument=json.dumps(trust))
    lam.create_function(FunctionName="other", Runtime="python3.13", Handler="app.handler",
                        Role=role["Role"]["Arn"], Code={"ZipFile": zipped_handler()})  # fmt: skip
    lam.put_function_concurrency(FunctionName="other", ReservedConcurrentExecutions=899)
    failed = only(run(account, account.config(account.pool("big"))), "aws.lambda_concurrency")
    assert failed.why.startswith("101 of 1000 unreserved: ")
    assert failed.fix.endswith("--desired-value 1001")


def zipped_handler() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "def handler(event, context):\n    return None\n")
    return buffer.getvalue()


# --- The deployed stack ------------------------------------------------------------------


ROLE_FUNCTIONS = [
    ("ReconcileRole", "reconcile"),
    ("SweepRole", "sweep"),
    ("InterruptionRole", "interruption"),
]


def role_findings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.check == "aws.role" and f.status is not Status.OK]


def test_a_stack_without_the_agent_role_parameter_cannot_pass_it(account: Account) -> None:
    parameters = {"ManagedTagKey": TAG_KEY, "ManagedTagValue": TAG_VALUE}
    deploy_stack(account.aws.client("cloudformation"), "no-pass", parameters)
    failed = role_findings(run(account, account.config(account.pool("big")), "no-pass"))
    assert [f.what for f in failed] == [
        f"stack no-pass: role {role} may do what the {function} function does"
        for role, function in ROLE_FUNCTIONS
    ]
    for finding in failed:
        assert finding.why == (
            f"denied: pass the agents' role to EC2 (iam:PassRole on {account.agent_role})"
        )
        assert finding.fix.startswith("deploy the stack with AgentInstanceProfileRoleArn")


def test_a_stack_for_another_tag_pair_may_not_touch_the_pools_instances(account: Account) -> None:
    parameters = {"ManagedTagKey": TAG_KEY, "ManagedTagValue": "someone-elses",
                  "AgentInstanceProfileRoleArn": account.agent_role}  # fmt: skip
    deploy_stack(account.aws.client("cloudformation"), "other-pair", parameters)
    failed = role_findings(run(account, account.config(account.pool("big")), "other-pair"))
    assert len(failed) == 3
    assert "terminate managed instances (ec2:TerminateInstances on " in failed[0].why
    assert "RunInstances with the managed tag (ec2:RunInstances on " in failed[0].why
    assert "ManagedTagKey and ManagedTagValue equal to the pools' tag_key" in failed[0].fix


def test_a_role_that_may_terminate_anything_fails(account: Account) -> None:
    iam = account.aws.client("iam")
    resources = account.aws.client("cloudformation").describe_stack_resources(StackName=STACK)
    sweep = next(r for r in resources["StackResources"] if r["LogicalResourceId"] == "SweepRole")
    anything = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "ec2:TerminateInstances", "Resource": "*"}]}  # fmt: skip
    iam.put_role_policy(
        RoleName=sweep["PhysicalResourceId"],
        PolicyName="oops",
        PolicyDocument=json.dumps(anything),
    )
    (failed,) = role_findings(run(account, account.config(account.pool("big")), STACK))
    assert failed.what == f"stack {STACK}: role SweepRole touches nothing without the managed tag"
    assert failed.why == (
        "allowed: terminate an untagged instance (ec2:TerminateInstances); "
        "terminate someone else's instance (ec2:TerminateInstances)"
    )


def test_a_missing_stack_or_queue_fails(account: Account) -> None:
    findings = run(account, account.config(account.pool("big")), "nope")
    stack = only(findings, "aws.stack")
    assert stack.why == "no such stack" and "--stack" in stack.fix
    sqs = account.aws.client("sqs")
    sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=f"{STACK}-dead-letters.fifo")["QueueUrl"])
    queue = only(run(account, account.config(account.pool("big")), STACK), "aws.queue")
    assert queue.what == f"stack {STACK}: dead-letter queue"
    assert queue.fix == "deploy the stack again (sam deploy)"


# --- The command ------------------------------------------------------------------------------


def test_a_failed_check_makes_the_command_exit_1(
    account: Account, account_env: None, tmp_path: Path, capsys: Any
) -> None:
    big = account.pool("big")
    big["provider"]["image_id"] = "ami-0123456789abcdef0"
    assert main(["doctor", "--config", write_config(account, tmp_path, big)]) == 1
    out = capsys.readouterr().out
    assert f"✘ pool big: AMI ami-0123456789abcdef0 in {REGION}: no such image" in out
    assert "? stack: the functions' roles and queues: not checked" in out


def test_without_credentials_one_line_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    config = tmp_path / "pools.yaml"
    pool = {"pool_name": "p", "provider": {"type": "aws", "region": REGION,
            "image_id": "ami-0123456789abcdef0", "instance_type": "g5.xlarge"}}  # fmt: skip
    config.write_text(yaml.safe_dump({"resource_pools": [pool]}))
    assert main(["doctor", "--config", str(config)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "dynagent: pool p (aws) not checked: no AWS credentials found: set AWS_PROFILE, or "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (`aws configure` writes a profile); on "
        "EC2, give the instance a role"
    ]


def test_a_check_aws_will_not_answer_is_not_checked_and_a_bug_is_one_line() -> None:
    def refused() -> list[Finding]:
        error = {"Error": {"Code": "UnauthorizedOperation", "Message": "You are not authorized"}}
        raise ClientError(error, "DescribeImages")

    (unknown,) = guarded("aws.image", "pool p: AMI", refused)
    assert (unknown.status, unknown.why) == (
        Status.UNKNOWN,
        "DescribeImages: UnauthorizedOperation: You are not authorized",
    )
    assert unknown.fix == "allow DescribeImages to whoever runs doctor"
    (bug,) = guarded("aws.image", "pool p: AMI", lambda: [][0])
    assert bug.why == "doctor could not check this: IndexError('list index out of range')"


def test_a_warm_pool_on_an_instance_store_ami_fails(account: Account) -> None:
    ec2 = account.aws.client("ec2")
    (store, *_) = ec2.describe_images(
        Filters=[
            {"Name": "root-device-type", "Values": ["instance-store"]},
            {"Name": "architecture", "Values": ["x86_64"]},
        ]
    )["Images"]
    big = account.pool("big")
    big["provider"]["image_id"] = store["ImageId"]
    # Without a warm pool the root device does not matter: machines are terminated.
    assert only(run(account, account.config(big)), "aws.image", Status.OK)
    big["provider"]["warm_pool"] = {"max_stopped": 2}
    image = only(run(account, account.config(big)), "aws.image")
    assert image.status is Status.FAIL
    assert "instance-store root device, which EC2 cannot stop" in image.why
    assert "EBS-backed AMI" in image.fix


def test_each_reservation_a_pool_names_is_found_and_matched_or_its_fix_given(
    account: Account,
) -> None:
    aws = account.aws
    # The big pool launches p4d.24xlarge in us-west-2b only.
    fits = aws.create_capacity_reservation("p4d.24xlarge", "us-west-2b", 4)
    elsewhere = aws.create_capacity_reservation("p4d.24xlarge", "us-west-2c", 2)
    other_type = aws.create_capacity_reservation("g5.xlarge", "us-west-2b", 2, tags={"t": "g5"})
    big = account.pool("big")
    big["provider"]["reservations"] = [fits, elsewhere, "cr-0000000000000000f", "tag:t=g5"]

    findings = [f for f in run(account, account.config(big)) if f.check == "aws.reservation"]

    by_id = {f.what.split("reservation ")[1].split(" ")[0]: f for f in findings}
    assert by_id[fits].status is Status.OK
    assert "targeted: used only by launches that name it" in by_id[fits].why
    assert by_id[elsewhere].status is Status.FAIL
    assert by_id[elsewhere].why == "the pool has no subnet in us-west-2c, where the reservation is"
    assert by_id["cr-0000000000000000f"].status is Status.FAIL
    assert "no such capacity reservation" in by_id["cr-0000000000000000f"].why
    assert by_id[other_type].status is Status.FAIL
    assert "g5.xlarge, which the pool does not launch" in by_id[other_type].why


def test_an_image_an_ssm_parameter_names_is_checked_as_its_ami_and_its_role_may_read_it(
    account: Account,
) -> None:
    ssm = account.aws.client("ssm", REGION)
    big = account.pool("big")
    ami = big["provider"]["image_id"]
    ssm.put_parameter(Name="/team/gpu-ami", Value=ami, Type="String", DataType="aws:ec2:image")
    big["provider"]["image_id"] = "resolve:ssm:/team/gpu-ami"
    findings = run(account, account.config(big), STACK)
    named = only(findings, "aws.image_parameter", Status.OK)
    assert named.what == f"pool big: SSM parameter /team/gpu-ami in {REGION}"
    assert named.why.startswith(f"names {ami}")
    assert only(findings, "aws.image", Status.OK).what == f"pool big: AMI {ami} in {REGION}"
    assert not_ok(findings) == []  # the dry runs use its AMI; the roles may read it

    big["provider"]["image_id"] = "resolve:ssm:/team/missing"
    findings = run(account, account.config(big))
    missing = only(findings, "aws.image_parameter")
    assert "no such parameter in this region" in missing.why
    assert "aws ssm put-parameter" in missing.fix
    assert [f.check for f in not_ok(findings)] == ["aws.image_parameter"]
