"""Broken agents: registered with fewer slots than their machine has GPUs. A GPU the
driver lost (an Xid error, a fallen-off-the-bus device) leaves the agent up with fewer
devices, and the master keeps placing work there, sized for what is left. dynagent
knows each machine's GPUs (``boot.machine_gpus``: the pool's ``instance_slots`` or
Determined's table), so it can tell; such agents are replaced (``replace``), idle ones
at once and busy ones drained first.

Left alone: a machine of a type without GPUs (its slots are CPUs or none), one whose
type the cloud did not report, and any pool whose agent.yaml chooses its devices
itself (``visible_gpus``, ``artificial_slots``, ``slot_type``): fewer slots there are
the admin's choice. ``repair: false`` turns the rule off.
"""

from __future__ import annotations

import operator

from dynagent.core.boot import machine_gpus
from dynagent.core.config import ProviderConfig
from dynagent.core.decide.context import Context
from dynagent.core.decide.replace import Retiring

_SLOTS = operator.attrgetter("slots")
# agent.yaml fields with which an agent reports other devices than its machine's GPUs.
_CHOSEN_DEVICES = ("visible_gpus", "artificial_slots", "slot_type")


def broken(ctx: Context) -> list[Retiring]:
    """Connected agents with fewer slots than their machine's GPUs."""
    provider = ctx.provider
    if not provider.repair or ctx.snapshot is None or _devices_chosen(provider):
        return []
    gpus = machine_gpus(provider)
    # Every agent with a whole largest machine's slots: none can be short (the common
    # case, counted in C; this runs on every pass over tens of thousands of agents).
    if min(map(_SLOTS, ctx.snapshot.agents), default=0) >= max(gpus.values(), default=0):
        return []
    found = []
    for instance, agent in zip(ctx.fleet.instances, ctx.connected, strict=True):
        if agent is None:
            continue
        expected = gpus.get(instance.instance_type, 0)
        if agent.slots < expected and instance.live:
            why = f"broken: registered {agent.slots} of its {expected} GPUs"
            found.append(Retiring(instance, agent, why, "broken"))
    return found


def _devices_chosen(provider: ProviderConfig) -> bool:
    contents = provider.agent_config_file_contents
    return isinstance(contents, dict) and any(key in contents for key in _CHOSEN_DEVICES)
