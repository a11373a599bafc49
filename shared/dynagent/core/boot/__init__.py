"""What an agent machine runs at boot, written once for both clouds.

``contract`` says what Determined's boot script gives its agent (files, environment,
mounts, flags, slot type) as data; ``script`` renders it as the bash script each cloud
runs at boot (EC2 user data, a GCE ``startup-script``); ``master`` reads the address the
agent dials from ``master_url``.
"""

from .contract import AgentBoot, BootFile, SlotType, agent_boot, machine_gpus
from .master import MasterAddress, MasterUrlError, master_address
from .script import render

__all__ = [
    "AgentBoot",
    "BootFile",
    "MasterAddress",
    "MasterUrlError",
    "SlotType",
    "agent_boot",
    "machine_gpus",
    "master_address",
    "render",
]
