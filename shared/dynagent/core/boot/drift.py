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
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping

from dynagent.core.config import AwsProvider, Pool

from .contract import agent_boot
from .master import MasterUrlError, master_address

# Hex digits kept: fits a GCE label value, and 2^48 configs make a clash unlikely.
LENGTH = 12


def boot_config(pool: Pool, master_addresses: Mapping[str, str]) -> str:
    """The pool's boot config hash now; "" when ``master_url`` names an alias that no
    snapshot resolved (no launch happens then, and no stopped machine is judged)."""
    provider = pool.provider
    try:
        master = master_address(provider.master_url).resolved(master_addresses)
    except MasterUrlError:
        return ""
    boot = dataclasses.replace(agent_boot(provider, pool.name, {}, master), slot_types={})
    if isinstance(provider, AwsProvider):
        machine = {"image": provider.image_id, "profile": provider.iam_instance_profile_arn}
    else:
        account = provider.service_account
        machine = {"image": provider.boot_disk_source_image, "profile": account.email}
    identity = {
        "boot": dataclasses.asdict(boot),
        "machine": machine,
        "cpu_slots_allowed": provider.cpu_slots_allowed,
    }
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:LENGTH]
