"""One small driver per local cloud, so a scenario reads the same on AWS and on GCP."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from dynagent.aws.ec2 import Ec2Provider
from dynagent.core.config import Config, Pool
from dynagent.core.fleet import Mark
from dynagent.core.plan import Launch, MarkWrite, Plan
from dynagent.gcp.compute import GceProvider
from dynagent.run.provider import Provider
from dynagent.testing.aws.local_aws import LocalAws
from dynagent.testing.gcp.compute import LocalCompute

from ..aws.helpers import config, image_id, pool_document
from ..gcp.helpers import gcp_pool_document


class Cloud(Protocol):
    name: str
    slots: int

    def pool(self, **fields: Any) -> Config: ...

    def provider(self, pool: Pool) -> Provider: ...

    def stop(self, instance_id: str) -> None:
        """Stop (AWS) or preempt (GCP) an instance behind the autoscaler's back."""
        ...

    def present(self) -> set[str]:
        """Instances of the pool's name, managed or not, that are not being terminated."""
        ...

    def lookalike(self) -> str:
        """An instance like ours in every way but the managed pair."""
        ...


def launch(provider: Provider, pool: Pool, count: int, key: str, when: datetime) -> list[str]:
    plan = Plan(
        pool=pool.name,
        launch_key=key,
        launch_at=when,
        launches=tuple(Launch(reason="setup") for _ in range(count)),
    )
    return list(provider.launch(plan).started)


def mark(provider: Provider, ids: list[str], what: Mark, when: datetime) -> None:
    provider.observe()  # GCP writes labels against what it last read
    provider.write_marks((MarkWrite(what, when, tuple(ids), "setup"),))


class AwsCloud:
    name = "aws"
    slots = 8

    def __init__(self, aws: LocalAws) -> None:
        self.aws = aws
        self.ec2 = aws.client("ec2")

    def pool(self, **fields: Any) -> Config:
        return config(pool_document(image_id(self.ec2), name="p", **fields))

    def provider(self, pool: Pool) -> Provider:
        return Ec2Provider(pool, self.ec2, sleep=lambda _: None)

    def stop(self, instance_id: str) -> None:
        self.ec2.stop_instances(InstanceIds=[instance_id])

    def present(self) -> set[str]:
        states = ["pending", "running", "stopping", "stopped"]
        response = self.ec2.describe_instances(
            Filters=[
                {"Name": "tag:dynagent:pool", "Values": ["p"]},
                {"Name": "instance-state-name", "Values": states},
            ]
        )
        return {i["InstanceId"] for r in response["Reservations"] for i in r["Instances"]}

    def lookalike(self) -> str:
        pool = self.pool(tag_value="not-ours").pool("p")
        (instance_id,) = launch(self.provider(pool), pool, 1, "p:other", datetime.now())
        return instance_id


class GcpCloud:
    name = "gcp"
    slots = 4

    def __init__(self, compute: LocalCompute) -> None:
        self.compute = compute
        self.instances = compute.instances_client()
        self.operations = compute.zone_operations_client()

    def pool(self, **fields: Any) -> Config:
        return config(gcp_pool_document(name="p", **fields))

    def provider(self, pool: Pool) -> Provider:
        return GceProvider(pool, self.instances, self.operations, sleep=lambda _: None)

    def stop(self, instance_id: str) -> None:
        self.compute.set_status(instance_id, "TERMINATED")

    def present(self) -> set[str]:
        # A deleted VM shows STOPPING until it is gone.
        return {
            vm["name"]
            for vm in self.compute.instances()
            if vm.get("labels", {}).get("dynagent-pool") == "p" and vm["status"] != "STOPPING"
        }

    def lookalike(self) -> str:
        pool = self.pool(label_value="not-ours").pool("p")
        (name,) = launch(self.provider(pool), pool, 1, "p:other", datetime.now())
        return name
