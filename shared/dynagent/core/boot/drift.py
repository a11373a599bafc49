"""The boot config a machine was launched with, as one short hash: a stopped machine of
the warm pool whose hash differs from the pool's now would come back as the old config
(its image, its boot script's agent and master, its instance profile), so it is deleted
and never started.

What counts is what a started machine keeps from its launch: the image its disk was made
from, the instance profile or service account it runs as, and what its boot script
starts (the admin's startup script, the agent image and its environment with the master's
address, the files it writes). The slot type table is left out as a table: adding a
machine type to the pool does not change how one of another type boots;
``cpu_slots_allowed``, which changes a type's own slot type, is in.

Beside the hash, each part of it has a short hash of its own (``boot_parts``), so a
machine that drifted can say what changed: its image, its instance profile or service
account, the master's address, the agent (its image, config and environment), the
startup scripts, or the slot type.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from dynagent.core.config import AwsProvider, GcpProvider, Pool

from .contract import CONTAINER_STARTUP_SCRIPT, MASTER_CERT, agent_boot
from .master import MasterUrlError, master_address

# Hex digits kept: fits a GCE label value, and 2^48 configs make a clash unlikely.
LENGTH = 12

# The parts of a boot config, in the order their short hashes are written, and what
# each is called when it changed. The agent's part is what the others leave: its image,
# network, runtime, log driver, agent.yaml and the rest of its environment.
PARTS = (
    ("image", "image"),
    ("identity", "instance profile or service account"),
    ("master", "master address or certificate"),
    ("agent", "agent image, config or environment"),
    ("startup", "startup scripts"),
    ("slots", "slot type (cpu_slots_allowed)"),
)
# Hex digits per part: 6 parts make 24, within a GCE label value's 63.
PART_LENGTH = 4
_MASTER_ENVIRONMENT = ("DET_MASTER_HOST", "DET_MASTER_PORT", "DET_SECURITY_TLS_")


def boot_config(pool: Pool, master_addresses: Mapping[str, str]) -> str:
    """The pool's boot config hash now; "" when ``master_url`` names an alias that no
    snapshot resolved (no launch happens then, and no stopped machine is judged), or the
    image is an SSM parameter or image family the functions could not read (nothing is
    judged)."""
    return boot_config_and_parts(pool, master_addresses)[0]


def boot_parts(pool: Pool, master_addresses: Mapping[str, str]) -> str:
    """The short hash of each part of the pool's boot config now (``PARTS``' order), as
    one string; "" when the hash is unknown."""
    return boot_config_and_parts(pool, master_addresses)[1]


def boot_config_and_parts(pool: Pool, master_addresses: Mapping[str, str]) -> tuple[str, str]:
    """(``boot_config``, ``boot_parts``), from one reading of the pool's boot."""
    identity = _identity(pool, master_addresses)
    if identity is None:
        return "", ""
    text = json.dumps(identity, sort_keys=True, default=str)
    config = hashlib.sha256(text.encode()).hexdigest()[:LENGTH]
    boot = dict(identity["boot"])
    files = boot.pop("files")
    environment = boot.pop("environment")
    master = [pair for pair in environment if pair[0].startswith(_MASTER_ENVIRONMENT)]
    startup = [f for f in files if f["path"] == CONTAINER_STARTUP_SCRIPT]
    parts = {
        "image": identity["machine"]["image"],
        "identity": identity["machine"]["profile"],
        "master": [master, [f for f in files if f["path"] == MASTER_CERT]],
        "agent": [
            boot,
            [pair for pair in environment if pair not in master],
            [f for f in files if f["path"] not in (MASTER_CERT, CONTAINER_STARTUP_SCRIPT)],
        ],
        "startup": [boot.pop("startup_script"), startup],
        "slots": identity["cpu_slots_allowed"],
    }
    return config, "".join(_short(parts[name]) for name, _ in PARTS)


def changed_parts(launched: str, now: str) -> list[str]:
    """What differs between two ``boot_parts``, by name; [] when either is unknown
    (a machine launched before its parts were recorded)."""
    size = PART_LENGTH * len(PARTS)
    if len(launched) != size or len(now) != size:
        return []
    return [
        what
        for index, (_, what) in enumerate(PARTS)
        if launched[index * PART_LENGTH : (index + 1) * PART_LENGTH]
        != now[index * PART_LENGTH : (index + 1) * PART_LENGTH]
    ]


def drift_of(launched: str, launched_parts: str, config: str, parts: str) -> str | None:
    """What changed between a machine's boot config (``launched`` and its parts) and the
    pool's now, for people; None when nothing did or it cannot be told: the pool's is
    unknown, or the machine was launched before its parts were recorded (its hash may
    have been made otherwise, as of an image family now resolved)."""
    if not config or not launched_parts or launched == config:
        return None
    return " and ".join(changed_parts(launched_parts, parts)) or "boot config"


def boot_tag(config: str, parts: str) -> str:
    """The value of a machine's boot config tag or label: the hash, then its parts'
    (lowercase hex and a dash, a valid GCE label value)."""
    return f"{config}-{parts}" if config and parts else config


def read_boot_tag(value: str) -> tuple[str, str]:
    """(hash, parts) of a boot config tag or label; a machine tagged before the parts
    were recorded has the hash alone."""
    config, _, parts = value.partition("-")
    return config, parts


def _short(value: object) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:PART_LENGTH]


def _identity(pool: Pool, master_addresses: Mapping[str, str]) -> dict[str, Any] | None:
    """What a started machine keeps from its launch, as data; None when ``master_url``
    names an alias no snapshot resolved."""
    provider = pool.provider
    if isinstance(provider, AwsProvider) and provider.image_parameter is not None:
        return None  # the functions could not resolve the parameter: its AMI is unknown
    if isinstance(provider, GcpProvider) and provider.image_family is not None:
        return None  # nor the family: its newest image is unknown
    try:
        master = master_address(provider.master_url).resolved(master_addresses)
    except MasterUrlError:
        return None
    boot = dataclasses.replace(agent_boot(provider, pool.name, {}, master), slot_types={})
    if isinstance(provider, AwsProvider):
        machine = {"image": provider.image_id, "profile": provider.iam_instance_profile_arn}
    else:
        account = provider.service_account
        machine = {"image": provider.boot_disk_source_image, "profile": account.email}
    return {
        "boot": dataclasses.asdict(boot),
        "machine": machine,
        "cpu_slots_allowed": provider.cpu_slots_allowed,
    }
