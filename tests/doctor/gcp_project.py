"""A well-formed GCP project for three pools, on the local Compute, the local topics API
and the local IAM: what doctor must pass.

``t4`` runs n1-standard-8 with 4 T4s in us-central1-a on the default (auto mode) network,
as the agents' service account; ``a100`` buys a2-highgpu-1g or -4g, spot or standard, in
us-central1-a and -b, on a custom network's subnetwork; ``l4`` runs spot g2-standard-8
with an L4 in europe-west4-a. Quotas cover max_instances of each; the functions' account
holds what deploy.sh grants and may act as the agents'; the admin may act as it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from google.oauth2.credentials import Credentials

from dynagent.cli.doctor.gcp import GcpApis
from dynagent.cli.doctor.gcp.access import ACT_AS, PERMISSIONS, function_account
from dynagent.core.config import Config, config_from_document
from dynagent.testing.gcp.compute import LocalCompute
from dynagent.testing.gcp.iam import LocalGcpIam, account_resource
from dynagent.testing.gcp.pubsub_topics import LocalPubSubTopics

PROJECT = "dyn-proj"
IMAGES = "images-proj"
NAME = "dynagent"
ADMIN = "admin@example.com"
FUNCTIONS = function_account(PROJECT, NAME)
AGENTS = f"agents@{PROJECT}.iam.gserviceaccount.com"
QUOTAS = {
    ("us-central1", "NVIDIA_T4_GPUS"): 12,  # 3 x 4
    ("us-central1", "NVIDIA_A100_GPUS"): 8,  # 2 x a2-highgpu-4g
    ("us-central1", "PREEMPTIBLE_NVIDIA_A100_GPUS"): 8,
    ("europe-west4", "PREEMPTIBLE_NVIDIA_L4_GPUS"): 4,  # 4 x 1
    ("", "GPUS_ALL_REGIONS"): 16,
}
_POOLS: list[dict[str, Any]] = [
    {"pool_name": "t4", "provider": {
        "type": "gcp", "project": PROJECT, "zone": "us-central1-a", "max_instances": 3,
        "boot_disk_source_image": f"projects/{IMAGES}/global/images/family/det-agent",
        "instance_type": {"machine_type": "n1-standard-8", "gpu_type": "nvidia-tesla-t4",
                          "gpu_num": 4},
        "service_account": {"email": AGENTS}}},
    {"pool_name": "a100", "provider": {
        "type": "gcp", "project": PROJECT, "zone": "us-central1-a", "max_instances": 2,
        "boot_disk_source_image": f"projects/{IMAGES}/global/images/det-agent-1",
        "network_interface": {"network": "global/networks/train",
                              "subnetwork": "regions/us-central1/subnetworks/train-a"},
        "offerings": {"machines": [
            {"machine_type": "a2-highgpu-1g", "gpu_type": "nvidia-tesla-a100", "gpu_num": 1},
            {"machine_type": "a2-highgpu-4g", "gpu_type": "nvidia-tesla-a100", "gpu_num": 4}],
            "zones": ["us-central1-a", "us-central1-b"], "purchase": ["spot", "standard"]}}},
    {"pool_name": "l4", "provider": {
        "type": "gcp", "project": PROJECT, "zone": "europe-west4-a", "max_instances": 4,
        "spot": True,
        "boot_disk_source_image": f"https://www.googleapis.com/compute/v1/projects/{IMAGES}/global/images/det-agent-1",
        "instance_type": {"machine_type": "g2-standard-8", "gpu_type": "nvidia-l4",
                          "gpu_num": 1}}},
]  # fmt: skip


@dataclass
class Project:
    compute: LocalCompute
    topics: LocalPubSubTopics
    iam: LocalGcpIam

    def apis(self) -> GcpApis:
        return GcpApis(
            Credentials(token=ADMIN),  # type: ignore[no-untyped-call]
            compute_endpoint=self.compute.endpoint,
            pubsub_endpoint=self.topics.endpoint,
            iam_endpoint=self.iam.endpoint,
        )

    @staticmethod
    def pool(name: str) -> dict[str, Any]:
        return copy.deepcopy(next(p for p in _POOLS if p["pool_name"] == name))

    def config(self, *pools: dict[str, Any]) -> Config:
        return config_from_document({"resource_pools": list(pools) or copy.deepcopy(_POOLS)})


def well_formed(compute: LocalCompute, topics: LocalPubSubTopics, iam: LocalGcpIam) -> Project:
    compute.reset()
    topics.topics.clear()
    iam.reset()
    catalog = compute.catalog
    catalog.add_image(IMAGES, "det-agent-0", family="det-agent")
    catalog.add_image(IMAGES, "det-agent-1", family="det-agent")
    for (region, metric), limit in QUOTAS.items():
        catalog.set_quota(PROJECT, metric, limit, region=region)
    catalog.add_network(PROJECT, "default", auto_subnetworks=True)
    catalog.add_network(PROJECT, "train")
    catalog.add_subnetwork(PROJECT, "us-central1", "train-a", "train", cidr="10.20.0.0/20")
    iam.allow_impersonation(f"user:{ADMIN}", FUNCTIONS)
    functions = f"serviceAccount:{FUNCTIONS}"
    iam.grant(
        functions, f"projects/{PROJECT}", [*PERMISSIONS, "compute.instances.setServiceAccount"]
    )
    iam.grant(functions, account_resource(AGENTS), [ACT_AS])
    client = topics.client()
    for topic in ("snapshots", "sweep", "dead-letters", "drain-notices"):
        client.create_topic(name=f"projects/{PROJECT}/topics/{NAME}-{topic}")
    return Project(compute, topics, iam)
