"""The local AWS where ``dynagent doctor`` leans on it: IAM's policy evaluation
(SimulatePrincipalPolicy, iam:PassRole on dry runs), Service Quotas, spot placement
scores, instance type offerings, Lambda's account settings and the stack made from
template.yaml; each as AWS documents it, through boto3."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from dynagent.testing.aws.local_aws import LocalAws
from dynagent.testing.aws.stack import deploy_stack

INSTANCE = "arn:aws:ec2:us-west-2:123456789012:instance/i-0123456789abcdef0"


def simulate(aws: LocalAws, statements: list[dict[str, Any]], action: str, **context: Any) -> str:
    """The decision for ``action`` on INSTANCE by a user holding only ``statements``."""
    iam = aws.client("iam")
    iam.create_user(UserName="u")
    document = json.dumps({"Version": "2012-10-17", "Statement": statements})
    iam.put_user_policy(UserName="u", PolicyName="p", PolicyDocument=document)
    entries = [
        {"ContextKeyName": key.replace("__", "/").replace("_", ":", 1), "ContextKeyValues": v,
         "ContextKeyType": "stringList"}
        for key, v in context.items()
    ]  # fmt: skip
    (result,) = iam.simulate_principal_policy(
        PolicySourceArn=f"arn:aws:iam::{aws.account_id}:user/u",
        ActionNames=[action],
        ResourceArns=[INSTANCE],
        ContextEntries=entries,
    )["EvaluationResults"]
    return str(result["EvalDecision"])


TAGGED = {"StringEquals": {"aws:ResourceTag/managed-by": "dynagent"}}
MARKS = {"ForAllValues:StringLike": {"aws:TagKeys": ["dynagent:*"]}}


@pytest.mark.parametrize(
    ("statements", "action", "context", "decision"),
    [
        # An Allow whose condition holds; missing, or for another value, it does not.
        ([{"Effect": "Allow", "Action": "ec2:Terminate*", "Resource": "*", "Condition": TAGGED}],
         "ec2:TerminateInstances", {"aws_ResourceTag__managed-by": ["dynagent"]}, "allowed"),
        ([{"Effect": "Allow", "Action": "ec2:Terminate*", "Resource": "*", "Condition": TAGGED}],
         "ec2:TerminateInstances", {}, "implicitDeny"),
        ([{"Effect": "Allow", "Action": "ec2:Terminate*", "Resource": "*", "Condition": TAGGED}],
         "ec2:TerminateInstances", {"aws_ResourceTag__managed-by": ["x"]}, "implicitDeny"),
        # An explicit Deny wins over any Allow.
        ([{"Effect": "Allow", "Action": "ec2:*", "Resource": "*"},
          {"Effect": "Deny", "Action": "ec2:TerminateInstances", "Resource": INSTANCE}],
         "ec2:TerminateInstances", {}, "explicitDeny"),
        # Actions match without regard to case; resources do not.
        ([{"Effect": "Allow", "Action": "EC2:terminateinstances", "Resource": "*"}],
         "ec2:TerminateInstances", {}, "allowed"),
        ([{"Effect": "Allow", "Action": "ec2:*", "Resource": INSTANCE.replace("/i-", "/I-")}],
         "ec2:TerminateInstances", {}, "implicitDeny"),
        # ForAllValues holds for a missing key (hence the template's Null check).
        ([{"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "*", "Condition": MARKS}],
         "ec2:CreateTags", {}, "allowed"),
        ([{"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "*",
           "Condition": {**MARKS, "Null": {"aws:TagKeys": "false"}}}],
         "ec2:CreateTags", {}, "implicitDeny"),
        ([{"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "*", "Condition": MARKS}],
         "ec2:CreateTags", {"aws_TagKeys": ["dynagent:idle-since", "Name"]}, "implicitDeny"),
        # NotAction allows everything else.
        ([{"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}],
         "ec2:RunInstances", {}, "allowed"),
    ],
)  # fmt: skip
def test_simulate_principal_policy_decides_as_iam(
    aws: LocalAws, statements: list[dict[str, Any]], action: str, context: Any, decision: str
) -> None:
    assert simulate(aws, statements, action, **context) == decision


def test_an_operator_not_modelled_is_refused_not_guessed(aws: LocalAws) -> None:
    later = {"DateGreaterThan": {"aws:CurrentTime": "2020-01-01"}}
    statements = [{"Effect": "Allow", "Action": "ec2:*", "Resource": "*", "Condition": later}]
    with pytest.raises(ClientError, match=r"InvalidInput.*not modelled by the local AWS"):
        simulate(aws, statements, "ec2:RunInstances")


def test_a_dry_run_checks_pass_role_and_leaves_capacity_alone(aws: LocalAws, ec2: Any) -> None:
    iam = aws.client("iam")
    trust = {"Version": "2012-10-17", "Statement": []}
    role = iam.create_role(RoleName="agent", AssumeRolePolicyDocument=json.dumps(trust))["Role"]
    iam.create_instance_profile(InstanceProfileName="agent")
    iam.add_role_to_instance_profile(InstanceProfileName="agent", RoleName="agent")
    iam.create_user(UserName="op")
    allow = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:*",
             "Resource": "*"}]}  # fmt: skip
    iam.put_user_policy(UserName="op", PolicyName="ec2", PolicyDocument=json.dumps(allow))
    key = iam.create_access_key(UserName="op")["AccessKey"]
    op = boto3.client(
        "ec2",
        endpoint_url=aws.endpoint_url,
        region_name=aws.region,
        aws_access_key_id=key["AccessKeyId"],
        aws_secret_access_key=key["SecretAccessKey"],
    )
    aws.fail_next_launch("g5.xlarge", "VcpuLimitExceeded")
    request = {"ImageId": aws.image_id(), "InstanceType": "g5.xlarge", "MinCount": 1,
               "MaxCount": 1, "IamInstanceProfile": {"Name": "agent"}, "DryRun": True}  # fmt: skip
    with pytest.raises(ClientError) as refused:
        op.run_instances(**request)
    assert refused.value.response["Error"]["Code"] == "UnauthorizedOperation"
    assert f"iam:PassRole on resource: {role['Arn']}" in str(refused.value)
    # The account's root (the dummy key belongs to no IAM user) may pass it.
    with pytest.raises(ClientError, match="DryRunOperation"):
        ec2.run_instances(**request)
    # The dry runs took no injected failure: the real launch meets it.
    del request["DryRun"], request["IamInstanceProfile"]
    with pytest.raises(ClientError, match="VcpuLimitExceeded"):
        ec2.run_instances(**request)


def test_service_quotas_serve_applied_and_default_values(aws: LocalAws) -> None:
    quotas = aws.client("service-quotas")
    aws.set_service_quota("L-DB2E81BA", 64)
    aws.set_service_quota("L-417A185B", 96, applied=False)
    assert (
        quotas.get_service_quota(ServiceCode="ec2", QuotaCode="L-DB2E81BA")["Quota"]["Value"] == 64
    )
    with pytest.raises(ClientError, match="NoSuchResourceException"):
        quotas.get_service_quota(ServiceCode="ec2", QuotaCode="L-417A185B")
    assert (
        quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode="L-417A185B")["Quota"][
            "Value"
        ]
        == 96
    )
    with pytest.raises(ClientError, match="NoSuchResourceException"):
        quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode="L-7212CCBC")
    # Per region: another region's value is not this one's.
    west = aws.client("service-quotas", "us-east-1")
    with pytest.raises(ClientError, match="NoSuchResourceException"):
        west.get_service_quota(ServiceCode="ec2", QuotaCode="L-DB2E81BA")


def test_spot_placement_scores_per_zone_or_region(aws: LocalAws, ec2: Any) -> None:
    aws.set_spot_placement_score("g5.xlarge", "us-west-2a", 3)
    aws.set_spot_placement_score("g5.2xlarge", "us-west-2a", 8)
    aws.set_spot_placement_score("g5.xlarge", "us-west-2b", 5)
    zones = {
        z["ZoneId"]: z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]
    }
    asked = {"InstanceTypes": ["g5.xlarge", "g5.2xlarge"], "TargetCapacity": 2,
             "RegionNames": [aws.region]}  # fmt: skip
    by_zone = ec2.get_spot_placement_scores(SingleAvailabilityZone=True, **asked)
    assert {zones[s["AvailabilityZoneId"]]: s["Score"] for s in by_zone["SpotPlacementScores"]} == {
        "us-west-2a": 8,
        "us-west-2b": 5,
    }
    (region,) = ec2.get_spot_placement_scores(**asked)["SpotPlacementScores"]
    assert (region["Region"], region["Score"]) == (aws.region, 8)


def test_a_withheld_type_leaves_only_that_zones_offering(aws: LocalAws, ec2: Any) -> None:
    def zones() -> set[str]:
        offers = ec2.describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": ["g5.xlarge"]}],
        )["InstanceTypeOfferings"]
        return {o["Location"] for o in offers}

    before = zones()
    aws.withhold_instance_type("g5.xlarge", "us-west-2b")
    assert zones() == before - {"us-west-2b"} and "us-west-2b" in before


def test_the_spot_service_linked_role_has_awss_name(aws: LocalAws) -> None:
    role = aws.client("iam").create_service_linked_role(AWSServiceName="spot.amazonaws.com")
    assert role["Role"]["Arn"] == (
        f"arn:aws:iam::{aws.account_id}:role/aws-service-role/spot.amazonaws.com/"
        "AWSServiceRoleForEC2Spot"
    )


def test_the_stack_from_template_yaml_lists_only_the_resources_it_made(aws: LocalAws) -> None:
    cloudformation = aws.client("cloudformation")
    deploy_stack(cloudformation, "s", {"ManagedTagKey": "managed-by", "ManagedTagValue": "d"})
    listed = cloudformation.describe_stack_resources(StackName="s")["StackResources"]
    logical = {r["LogicalResourceId"] for r in listed}
    # PassAgentRolePolicy's condition (an agent role given) is false: it is not made.
    assert "PassAgentRolePolicy" not in logical
    assert {"SnapshotQueue", "DeadLetterQueue", "ReconcileRole", "FleetPolicy"} <= logical
    # The functions, as plain Lambda functions holding their reserved concurrency.
    physical = {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in listed}
    lam = aws.client("lambda")
    sweep = lam.get_function_concurrency(FunctionName=physical["SweepFunction"])
    assert sweep["ReservedConcurrentExecutions"] == 1
    assert "ReservedConcurrentExecutions" not in lam.get_function_concurrency(
        FunctionName=physical["ReconcileFunction"]
    )


def lambda_function(aws: LocalAws, name: str) -> None:
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
             "Principal": {"Service": "lambda.amazonaws.com"}}]}  # fmt: skip
    role = aws.client("iam").create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("app.py", "def handler(event, context):\n    return None\n")
    aws.client("lambda").create_function(
        FunctionName=name, Runtime="python3.13", Handler="app.handler",
        Role=role["Role"]["Arn"], Code={"ZipFile": code.getvalue()},
    )  # fmt: skip


def test_account_settings_report_the_limit_less_what_functions_reserve(aws: LocalAws) -> None:
    lam = aws.client("lambda")
    limits = lam.get_account_settings()["AccountLimit"]
    assert (limits["ConcurrentExecutions"], limits["UnreservedConcurrentExecutions"]) == (
        1000,
        1000,
    )
    lambda_function(aws, "f")
    lam.put_function_concurrency(FunctionName="f", ReservedConcurrentExecutions=900)
    limits = lam.get_account_settings()["AccountLimit"]
    assert limits["UnreservedConcurrentExecutions"] == 100
    # Changing f's own reservation counts it once; one more would leave 99.
    lam.put_function_concurrency(FunctionName="f", ReservedConcurrentExecutions=900)
    with pytest.raises(ClientError, match=r"below its minimum value of \[100\]") as refused:
        lam.put_function_concurrency(FunctionName="f", ReservedConcurrentExecutions=901)
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValueException"
    # Per region; and an account whose limit is 10 cannot reserve anything.
    aws.set_lambda_concurrency(10, region="us-east-1")
    east = aws.client("lambda", "us-east-1").get_account_settings()["AccountLimit"]
    assert (east["ConcurrentExecutions"], east["UnreservedConcurrentExecutions"]) == (10, 10)
    aws.set_lambda_concurrency(10)
    lam.delete_function_concurrency(FunctionName="f")
    with pytest.raises(ClientError, match=r"below its minimum value of \[10\]"):
        lam.put_function_concurrency(FunctionName="f", ReservedConcurrentExecutions=1)
