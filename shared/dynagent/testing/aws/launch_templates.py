"""Launch templates as EC2 keeps them: CreateLaunchTemplate and
CreateLaunchTemplateVersion honour ClientToken, a new version inherits from its
``SourceVersion``, and the template's own tags stay off its LaunchTemplateData."""

from __future__ import annotations

import copy
from typing import Any, cast

from moto.ec2.responses.launch_templates import LaunchTemplates

from dynagent.testing.aws.client_tokens import LAUNCH_TEMPLATE_TOKEN_MAX_CHARS, idempotent_reply
from dynagent.testing.aws.knobs import knobs_for

# moto's originals, taken once at import: the wrappers always call through to these.
_moto_create_launch_template = LaunchTemplates.create_launch_template
_moto_create_launch_template_version = LaunchTemplates.create_launch_template_version


def create_launch_template(self: Any) -> Any:
    """Idempotent by ClientToken, as in EC2 (moto answers a retry AlreadyExists, and a
    token reused for another name creates that template); and the template's own tags
    (resource type launch-template) stay off its version's LaunchTemplateData, where
    moto copies them and EC2 does not."""
    if knobs_for(self.current_account) is None:
        return _moto_create_launch_template(self)

    def create() -> dict[str, Any]:
        result = cast(dict[str, Any], _moto_create_launch_template(self).result)
        template = self.ec2_backend.get_launch_template(
            result["LaunchTemplate"]["LaunchTemplateId"]
        )
        data = template.default_version().data
        specs = [
            spec
            for spec in data.get("TagSpecifications", [])
            if spec.get("ResourceType") != "launch-template"
        ]
        if specs:
            data["TagSpecifications"] = specs
        else:
            data.pop("TagSpecifications", None)
        return result

    return idempotent_reply(self, "CreateLaunchTemplate", create, LAUNCH_TEMPLATE_TOKEN_MAX_CHARS)


def create_launch_template_version(self: Any) -> Any:
    """Idempotent by ClientToken (moto adds a version per retry), and ``SourceVersion``
    honoured: the new version inherits every parameter of the source version it does not
    set itself (moto ignores SourceVersion and keeps only the parameters given)."""
    if knobs_for(self.current_account) is None:
        return _moto_create_launch_template_version(self)

    def create() -> dict[str, Any]:
        backend = self.ec2_backend
        source_number = self._get_param("SourceVersion")
        source: dict[str, Any] = {}
        if source_number:
            name, template_id = (
                self._get_param("LaunchTemplateName"),
                self._get_param("LaunchTemplateId"),
            )
            template = (
                backend.get_launch_template(template_id)
                if template_id
                else backend.get_launch_template_by_name(name)
            )
            source = copy.deepcopy(template.get_version(source_number).data)
        result = cast(dict[str, Any], _moto_create_launch_template_version(self).result)
        created = result["LaunchTemplateVersion"]
        if source:
            template = backend.get_launch_template(created["LaunchTemplateId"])
            version = template.get_version(created["VersionNumber"])
            version.data = {**source, **version.data}
            created["LaunchTemplateData"] = version.data
        return result

    return idempotent_reply(
        self, "CreateLaunchTemplateVersion", create, LAUNCH_TEMPLATE_TOKEN_MAX_CHARS
    )
