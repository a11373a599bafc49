"""The deployed stack's queues and roles in a LocalAws, made by CloudFormation from the
project's own template.yaml.

``deploy_stack`` stands for ``sam deploy``: it creates a stack in the local AWS's
CloudFormation (moto's) from template.yaml, keeping what moto can make and what ``dynagent
doctor`` reads: the queues, the functions' roles and every policy on them (and the log
groups those policies name), with the template's parameters and conditions. Simpler than
a deployment: no functions, layer, schedules, alarms or dashboard (moto has no SAM
transform), so the stack's outputs are left out too.

One fix to moto's CloudFormation, for LocalAws's accounts (installed by aws.py):
DescribeStackResources leaves out a resource whose condition is false, as CloudFormation
does (moto lists it as a record without ids or type).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Final

import yaml
from moto.cloudformation.models import CloudFormationBackend
from moto.cloudformation.utils import yaml_tag_constructor

TEMPLATE: Final = Path(__file__).resolve().parents[3] / "template.yaml"
KEPT: Final = frozenset(
    {
        "AWS::SQS::Queue", "AWS::IAM::Role", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy",
        "AWS::Logs::LogGroup",
    }
)  # fmt: skip


class _TemplateLoader(yaml.SafeLoader):
    """CloudFormation's short forms (!Ref, !Sub, !GetAtt...) read as moto reads them."""


_TemplateLoader.add_multi_constructor("", yaml_tag_constructor)


def stack_template(path: Path = TEMPLATE) -> dict[str, Any]:
    """template.yaml with only the resources moto's CloudFormation makes (see above)."""
    template: dict[str, Any] = yaml.load(path.read_text(), Loader=_TemplateLoader)
    template.pop("Transform", None)
    template.pop("Globals", None)
    template.pop("Outputs", None)
    template["Resources"] = {
        name: resource
        for name, resource in template["Resources"].items()
        if resource["Type"] in KEPT
    }
    return template


def deploy_stack(
    cloudformation: Any, name: str, parameters: Mapping[str, str], path: Path = TEMPLATE
) -> None:
    """Create stack ``name`` with these parameter values (a boto3 CloudFormation client)."""
    cloudformation.create_stack(
        StackName=name,
        TemplateBody=_body(path),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM"],
    )


@cache
def _body(path: Path) -> str:
    """The stack template as JSON, read once: parsing template.yaml costs a tenth of a
    second, and tests deploy it many times."""
    return json.dumps(stack_template(path))


def patches(owned: Callable[[str], bool]) -> tuple[tuple[type, str, object], ...]:
    """(owner, attribute, replacement) for aws.py to install while a LocalAws runs."""
    original = CloudFormationBackend.describe_stack_resources

    def describe(self: Any, stack_name: str, logical_resource_id: str) -> Any:
        stack, resources = original(self, stack_name, logical_resource_id)
        if owned(self.account_id):
            resources = [resource for resource in resources if resource is not None]
        return stack, resources

    return ((CloudFormationBackend, "describe_stack_resources", describe),)
