"""``dynagent master-config``: the master.yaml ``resource_pools`` that make a stock
Determined master admit the work dynagent scales for, from dynagent's own pool file.

The admin keeps one pools file, dynagent's, and pastes what this prints into the
master's config. Each pool dynagent scales gets a provider for admission only (see
``dynagent.core.admission``): Determined's slot count for the pool's largest machine and
its ``max_instances``, in a region no AWS SDK sends a request for, so the master's own
provisioner lists, launches and terminates nothing. Pools dynagent leaves alone (static
agents, ``hpc``) are printed as the file has them, so the list replaces the master's
whole ``resource_pools``. Determined's pool-level keys (``description``, ``scheduler``,
``task_container_defaults``...) are kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import yaml

from dynagent.core.admission import ADMISSION_REGION, aws_slots
from dynagent.core.boot.contract import machine_gpus
from dynagent.core.config import (
    DETERMINED_POOL_KEYS,
    Config,
    ConfigError,
    Pool,
    config_from_document,
)
from dynagent.core.gpus import DETERMINED_EC2_SLOTS
from dynagent.files.config import read_document

_HEADER = """\
# Written by `dynagent master-config --config {source}`.
# Paste it as the resource_pools of the master's master.yaml (replacing those pools),
# then restart the master. Each provider below is for Determined's admission only: it
# gives the master the slots of the pool's largest machine and its max_instances, so a
# notebook, command, shell or experiment is accepted with no agent connected. Its region
# is no AWS region: the master's own provisioner fails every call before sending it, and
# never lists, launches or terminates anything. dynagent launches the agents.
"""


def master_config(path: str | os.PathLike[str]) -> str:
    """The fragment for a pools file, as YAML text with a header saying what it is."""
    source = os.fspath(path)
    document = read_document(path)
    config = config_from_document(document, source, os.environ)
    pools = master_pools(config, document)
    body = yaml.safe_dump({"resource_pools": pools}, sort_keys=False, width=100)
    return _HEADER.format(source=source) + body


def master_pools(config: Config, document: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The master's resource_pools, in the file's order (``document``, the file the config
    was read from), or the config's pools alone."""
    entries = (document or {}).get("resource_pools")
    if not isinstance(entries, list):  # no file, or the old single-pool form
        entries = [{"pool_name": name} for name in config.pools]
    named: dict[str, int] = {}  # instance_type name -> the slots Determined will give it
    pools = []
    for entry in entries:
        name = entry.get("pool_name")
        if name not in config.pools:
            pools.append(dict(entry))  # left to the master: as the file has it
            continue
        kept = {key: value for key, value in entry.items() if key in DETERMINED_POOL_KEYS}
        pools.append(
            {"pool_name": name, **kept, "provider": admission_provider(config.pools[name], named)}
        )
    return pools


def admission_provider(pool: Pool, named: dict[str, int]) -> dict[str, Any]:
    """The pool's admission-only provider. ``named`` holds the instance type names earlier
    pools used: Determined keeps one slot count per name (``instance_slots`` adds to one
    global table, aws_config.go ``validateInstanceTypeSlots``), so a name another pool
    gave a different count is made unique."""
    provider = pool.provider
    if provider.max_instances == 0:
        raise ConfigError(
            f"pool {pool.name!r}: max_instances is 0, and Determined requires more: give the "
            "pool a maximum, or leave it out of dynagent's config"
        )
    slots = provider.slots_per_instance
    instance_type, gpus = _largest_machine(pool)
    cpu = gpus == 0 and slots == 1  # cpu_slots_allowed: 1 CPU slot a machine
    table = DETERMINED_EC2_SLOTS.get(instance_type)
    if table is not None and aws_slots(instance_type, None, cpu) != slots:
        instance_type = f"{instance_type}-{slots}-slots"  # not in the table: instance_slots
        table = None
    while instance_type in named and named[instance_type] != slots:
        instance_type = f"{instance_type}-{slots}-slots"
    named[instance_type] = slots
    fields: dict[str, Any] = {
        "type": "aws",
        "region": ADMISSION_REGION,
        "image_id": "none",
        "ssh_key_name": "none",
        "instance_type": instance_type,
        **_inert_tags(pool),
    }
    if table is None:
        fields["instance_slots"] = 0 if cpu else slots
    if cpu:
        fields["cpu_slots_allowed"] = True
    return {**fields, "min_instances": 0, "max_instances": provider.max_instances}


# The tag pair of an admission-only provider. Its region already keeps the master's
# provisioner from any call; a pair of its own, never one dynagent's machines carry, means
# that were the region ever valid, it still could not list, tag or terminate them.
INERT_TAG_KEY = "dynagent-admission-only"


def _inert_tags(pool: Pool) -> dict[str, str]:
    provider = pool.provider
    own_key = provider.tag_key if provider.type == "aws" else provider.label_key
    key = INERT_TAG_KEY if own_key != INERT_TAG_KEY else f"{INERT_TAG_KEY}-master"
    return {"tag_key": key, "tag_value": pool.name}


def _largest_machine(pool: Pool) -> tuple[str, int]:
    """The name and GPUs of the pool's machine with the most GPUs (the first such)."""
    gpus = machine_gpus(pool.provider)
    largest = max(gpus, key=lambda machine: gpus[machine])
    return largest, gpus[largest]
