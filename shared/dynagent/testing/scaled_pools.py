"""The master's side of the pools dynagent scales: each as ``dynagent master-config``
writes it, so the local master admits their work as a stock master with that fragment."""

from __future__ import annotations

from dynagent.admission import aws_slots
from dynagent.config import Config
from dynagent.master_config import admission_provider
from dynagent.testing.determined import LocalDetermined


def add_scaled_pools(master: LocalDetermined, config: Config) -> None:
    """Add each of the config's pools to the master with its admission-only provider."""
    named: dict[str, int] = {}
    for pool in config.pools.values():
        provider = admission_provider(pool, named)
        master.add_pool(
            pool.name,
            "AWS",
            slots_per_agent=aws_slots(
                provider["instance_type"],
                provider.get("instance_slots"),
                provider.get("cpu_slots_allowed", False),
            ),
            location=provider["region"],
            instance_type=provider["instance_type"],
            max_agents=provider["max_instances"],
        )
