"""Building blocks for GCP tests: pools on the local Compute, its clients, instance views."""

from __future__ import annotations

from typing import Any

from dynagent.core.config import Config
from dynagent.gcp.compute import GceProvider
from dynagent.run.fallback import CapacityMemory
from dynagent.testing.gcp.compute import LocalCompute

from ..aws.helpers import config, now, snapshot

PROJECT = "local-project"  # LocalCompute's default
ZONE = "us-central1-a"

__all__ = ["config", "now", "snapshot"]


def gcp_pool_document(name: str = "t4", **provider: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "type": "gcp",
        "project": PROJECT,
        "zone": ZONE,
        "boot_disk_source_image": f"projects/{PROJECT}/global/images/agent-image",
        "label_key": "managed-by",
        "label_value": "dynagent-test",
        "name_prefix": "det-agent-",
        "instance_type": {"machine_type": "n1-standard-32", "gpu_type": "nvidia-tesla-t4",
                          "gpu_num": 4},
        "network_interface": {"network": f"projects/{PROJECT}/global/networks/default"},
        "service_account": {"email": f"agent@{PROJECT}.iam.gserviceaccount.com"},
        "network_tags": ["det-agent"],
        "max_instances": 5,
        "master_url": "http://10.128.0.2:8080",
        "startup_script": "echo hello",
    }  # fmt: skip
    fields.update(provider)
    return {"pool_name": name, "provider": fields}


def provider_for(
    compute: LocalCompute,
    cfg: Config | None = None,
    memory: CapacityMemory | None = None,
    **fields: Any,
) -> GceProvider:
    cfg = cfg or config(gcp_pool_document(**fields))
    pool = next(iter(cfg.pools.values()))
    return GceProvider(
        pool,
        compute.instances_client(),
        compute.zone_operations_client(),
        cfg.settings,
        sleep=lambda _: None,
        memory=memory,
    )


def managed(compute: LocalCompute, pool: str = "t4") -> list[dict[str, Any]]:
    return [
        i
        for i in compute.instances()
        if i.get("labels", {}).get("dynagent-pool") == pool
        and i["status"] not in ("STOPPING", "TERMINATED")
    ]
