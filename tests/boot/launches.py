"""One machine launched through each launch path, and the boot script the cloud got.

What boots in the tests is what the functions sent: a snapshot goes through the real
``reconcile`` and the real adapter to the local cloud, and the script is read back from
the cloud as a machine would get it: RunInstances' user data (one instance type), the
launch template version's (offerings, through CreateFleet), and the VM's
``startup-script`` metadata (Compute Engine).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Final, Literal

from dynagent.aws.ec2 import Ec2Provider
from dynagent.aws.fleet_launch import template_name
from dynagent.core.config import AwsProvider, Pool
from dynagent.core.gpus import aws_gpus
from dynagent.run.reconcile import reconcile

from ..aws.helpers import config, image_id, managed_instances, now, pool_document, snapshot
from ..gcp.helpers import gcp_pool_document, managed
from ..gcp.helpers import provider_for as gce_provider_for

Path = Literal["aws-run-instances", "aws-launch-template", "gcp"]
PATHS: Final[tuple[Path, ...]] = ("aws-run-instances", "aws-launch-template", "gcp")
POOL: Final = "gpu"


@dataclass(frozen=True)
class Sent:
    """A machine the functions launched and the boot script they sent it."""

    cloud: Literal["aws", "gcp"]
    instance: str
    gpus: int
    user_data: str
    pool: Pool


def launch(path: Path, clouds: Any, master_url: str, slots: int = 4, **fields: Any) -> Sent:
    """Reconcile a snapshot with one pending task of ``slots`` on a pool of ``path``,
    with ``fields`` over the pool's provider; what one launched machine got."""
    fields = {"master_url": master_url, **fields}
    if path == "gcp":
        return _gcp(clouds.compute, slots, fields)
    return _aws(clouds.ec2, path == "aws-launch-template", slots, fields)


def _aws(ec2: Any, offerings: bool, slots: int, fields: dict[str, Any]) -> Sent:
    shapes: dict[str, Any] = {"instance_type": "g4dn.12xlarge"}
    if offerings:
        shapes = {"offerings": {"instance_types": ["g4dn.xlarge", "g4dn.12xlarge"]}}
    document = pool_document(
        image_id(ec2), POOL, agent_docker_network="default", startup_script="", **shapes
    )
    document["provider"].update(fields)
    pool = config(document).pool(POOL)
    provider = Ec2Provider(pool, ec2, sleep=lambda _: None)
    outcome = reconcile(pool, provider, snapshot(1, POOL, pending=[("task", slots)]), now())
    assert outcome.launch is not None and outcome.launch.error is None, outcome.report()
    (instance,) = managed_instances(ec2, POOL)
    if offerings:
        assert isinstance(pool.provider, AwsProvider)
        (template,) = ec2.describe_launch_templates(
            LaunchTemplateNames=[template_name(pool.provider, POOL)]
        )["LaunchTemplates"]
        versions = ec2.describe_launch_template_versions(
            LaunchTemplateId=template["LaunchTemplateId"]
        )["LaunchTemplateVersions"]
        encoded = versions[0]["LaunchTemplateData"]["UserData"]
    else:
        attribute = ec2.describe_instance_attribute(
            InstanceId=instance["InstanceId"], Attribute="userData"
        )
        encoded = attribute["UserData"]["Value"]
    gpus = aws_gpus(instance["InstanceType"]) or 0
    user_data = base64.b64decode(encoded).decode()
    return Sent("aws", instance["InstanceId"], gpus, user_data, pool)


def _gcp(compute: Any, slots: int, fields: dict[str, Any]) -> Sent:
    document = gcp_pool_document(
        POOL,
        **{
            "instance_type": {"machine_type": "n1-standard-16", "gpu_type": "nvidia-tesla-t4",
                              "gpu_num": 4},
            "agent_docker_network": "default",
            "startup_script": "",
            **fields,
        },
    )  # fmt: skip
    cfg = config(document)
    provider = gce_provider_for(compute, cfg)
    pool = cfg.pool(POOL)
    outcome = reconcile(pool, provider, snapshot(1, POOL, pending=[("task", slots)]), now())
    assert outcome.launch is not None and outcome.launch.error is None, outcome.report()
    (vm,) = managed(compute, POOL)
    (script,) = [i["value"] for i in vm["metadata"]["items"] if i["key"] == "startup-script"]
    return Sent("gcp", vm["name"], 4, script, pool)
