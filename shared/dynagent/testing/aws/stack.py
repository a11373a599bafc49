"""The deployed stack's queues and roles in a LocalAws, made by CloudFormation from the
project's own template.yaml.

``deploy_stack`` stands for ``sam deploy``: it creates a stack in the local AWS's
CloudFormation (moto's) from template.yaml, keeping what moto can make and what ``dynagent
doctor`` reads: the queues, the functions' roles and every policy on them (and the log
groups those policies name), with the template's parameters and conditions, and the
functions with their reserved concurrency. Simpler than a deployment: moto has no SAM
transform, so each function is made as the plain ``AWS::Lambda::Function`` SAM would
make, with a stub for code and without its layer, environment, events or logging
settings; no layer, schedules, alarms or dashboard, and the stack's outputs are left out
too. As on AWS, a function's reservation the account cannot spare fails the deployment
(account.py): the stack rolls back (``ROLLBACK_COMPLETE``, Lambda's message in its
events) and ``deploy_stack`` raises ``DeployFailed``, as ``sam deploy`` exits non-zero.

Two fixes to moto's CloudFormation, for LocalAws's accounts (installed by moto_patches.py):
DescribeStackResources leaves out a resource whose condition is false, as CloudFormation
does (moto lists it as a record without ids or type); and a resource Lambda refuses
rolls the stack back (moto leaves it ``CREATE_IN_PROGRESS`` and sends Lambda's JSON
error to the XML client). Simpler than AWS: only Lambda's refusals roll back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Final

import yaml
from moto.awslambda.exceptions import LambdaClientError
from moto.cloudformation.models import CloudFormationBackend, Stack
from moto.cloudformation.utils import yaml_tag_constructor

TEMPLATE: Final = Path(__file__).resolve().parents[4] / "template.yaml"
KEPT: Final = frozenset(
    {
        "AWS::SQS::Queue", "AWS::IAM::Role", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy",
        "AWS::Logs::LogGroup", "AWS::Lambda::Function",
    }
)  # fmt: skip
# The properties of an AWS::Serverless::Function its AWS::Lambda::Function keeps here.
_FUNCTION_PROPERTIES: Final = ("Description", "Handler", "Timeout", "Role",
                               "ReservedConcurrentExecutions")  # fmt: skip
_STUB_CODE: Final = "def handler(event, context):\n    return None\n"


class _TemplateLoader(yaml.SafeLoader):
    """CloudFormation's short forms (!Ref, !Sub, !GetAtt...) read as moto reads them."""


_TemplateLoader.add_multi_constructor("", yaml_tag_constructor)


def stack_template(path: Path = TEMPLATE) -> dict[str, Any]:
    """template.yaml with only the resources moto's CloudFormation makes (see above)."""
    template: dict[str, Any] = yaml.load(path.read_text(), Loader=_TemplateLoader)
    template.pop("Transform", None)
    defaults = template.pop("Globals", {}).get("Function", {})
    template.pop("Outputs", None)
    resources = {
        name: _function(resource, defaults)
        if resource["Type"] == "AWS::Serverless::Function"
        else resource
        for name, resource in template["Resources"].items()
    }
    template["Resources"] = {
        name: resource for name, resource in resources.items() if resource["Type"] in KEPT
    }
    return template


def _function(resource: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The AWS::Lambda::Function SAM makes of a serverless function, with stub code."""
    given = {**defaults, **resource["Properties"]}
    properties = {key: given[key] for key in _FUNCTION_PROPERTIES if key in given}
    properties["Runtime"] = given.get("Runtime", "python3.13")
    properties["Code"] = {"ZipFile": _STUB_CODE}
    return {"Type": "AWS::Lambda::Function", "Properties": properties}


class DeployFailed(Exception):
    """The stack rolled back; the message is CloudFormation's reason."""


def deploy_stack(
    cloudformation: Any, name: str, parameters: Mapping[str, str], path: Path = TEMPLATE
) -> None:
    """Create stack ``name`` with these parameter values (a boto3 CloudFormation client);
    raise DeployFailed when it rolls back."""
    cloudformation.create_stack(
        StackName=name,
        TemplateBody=_body(path),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM"],
    )
    (stack,) = cloudformation.describe_stacks(StackName=name)["Stacks"]
    if stack["StackStatus"] == "ROLLBACK_COMPLETE":
        events = cloudformation.describe_stack_events(StackName=name)["StackEvents"]
        reasons = [e["ResourceStatusReason"] for e in events if "FAILED" in e["ResourceStatus"]]
        raise DeployFailed(f"stack {name} rolled back: {'; '.join(reasons)}")


@cache
def _body(path: Path) -> str:
    """The stack template as JSON, read once: parsing template.yaml costs a tenth of a
    second, and tests deploy it many times."""
    return json.dumps(stack_template(path))


def patches(owned: Callable[[str], bool]) -> tuple[tuple[type, str, object], ...]:
    """(owner, attribute, replacement) for moto_patches.py to install while a LocalAws runs."""
    original = CloudFormationBackend.describe_stack_resources
    create_resources = Stack.create_resources

    def describe(self: Any, stack_name: str, logical_resource_id: str) -> Any:
        stack, resources = original(self, stack_name, logical_resource_id)
        if owned(self.account_id):
            resources = [resource for resource in resources if resource is not None]
        return stack, resources

    def create(self: Any) -> None:
        try:
            create_resources(self)
        except LambdaClientError as error:
            if not owned(self.account_id):
                raise
            _roll_back(self, f'Resource handler returned message: "{error.message}"')

    return (
        (CloudFormationBackend, "describe_stack_resources", describe),
        (Stack, "create_resources", create),
    )


def _roll_back(stack: Any, reason: str) -> None:
    """What CloudFormation does when a resource fails to create: the failure's event,
    then every resource made so far deleted (moto's stack deletion)."""
    stack._add_stack_event("CREATE_FAILED", resource_status_reason=reason)
    stack.resource_map.delete()
    stack.status = "ROLLBACK_COMPLETE"
    stack._add_stack_event("ROLLBACK_COMPLETE")
