"""Whether the master admits the work dynagent scales for: the bridge's check of the
master's pools against dynagent's (``dynagent.core.admission`` has Determined's rules).

A pool the master's own provisioner can scale, or one without a provider (the master
then refuses notebooks, commands and shells at zero agents), stops the bridge: the first
fights dynagent, the second never lets work reach it. Counts that differ (slots per
agent, capacity) are warnings: the work within both still flows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dynagent.core.admission import MasterPool
from dynagent.core.config import Config


@dataclass(frozen=True)
class Finding:
    pool: str
    refuse: bool  # True: the bridge must not run so; False: a warning
    message: str


def admission_findings(
    config: Config,
    master: Mapping[str, MasterPool],
    launch_error: bool | None,
    config_file: str,
) -> list[Finding]:
    """What is wrong with the master's view of each pool dynagent scales, with the fix.
    ``launch_error`` None means unknown (the master's config was not readable): Determined's
    default, true, is assumed."""
    fix = (
        f"Fix: put the pool `dynagent master-config --config {config_file}` prints in the "
        "master's master.yaml resource_pools, and restart the master."
    )
    found = []
    for name, pool in config.pools.items():
        seen = master.get(name)
        dynagent_slots = pool.provider.slots_per_instance
        if seen is None or pool.provider.max_instances == 0:
            continue  # the bridge says a missing pool already; 0 instances is never scaled
        if seen.provisioner_acts:
            found.append(
                Finding(
                    name,
                    True,
                    f"pool {name!r} is provisioned by the master itself ({seen.provider} "
                    f"provider in {seen.location}): its provisioner would launch and terminate "
                    f"agents beside dynagent's. {fix}",
                )
            )
            continue
        if seen.provider is None:
            found.append(
                Finding(
                    name,
                    True,
                    f"pool {name!r} has no provider in the master's config, so the master admits "
                    "work only up to its connected agents: with none it refuses every notebook, "
                    'command and shell ("request unfulfillable") and experiments beyond them '
                    f'("slots requested exceeds cluster capacity"), and dynagent never sees the '
                    f"work. {fix}",
                )
            )
            continue
        if seen.slots_per_agent < dynagent_slots:
            found.append(
                Finding(
                    name,
                    seen.slots_per_agent <= 0,
                    f"pool {name!r}: the master counts {seen.slots_per_agent} slots per agent "
                    f"and dynagent launches machines of up to {dynagent_slots}: the master "
                    f"refuses single-agent work of more than {max(seen.slots_per_agent, 0)} "
                    f"slots. {fix}",
                )
            )
        elif seen.slots_per_agent > dynagent_slots:
            found.append(
                Finding(
                    name,
                    False,
                    f"pool {name!r}: the master admits single-agent work of up to "
                    f"{seen.slots_per_agent} slots, and dynagent's largest machine has "
                    f"{dynagent_slots}: larger work waits in the queue for ever. {fix}",
                )
            )
        reach = pool.provider.max_instances * dynagent_slots
        if launch_error is not False and seen.capacity < reach:
            found.append(
                Finding(
                    name,
                    False,
                    f"pool {name!r}: the master admits experiments of up to {seen.capacity} "
                    f"slots ({seen.max_instances} x {seen.slots_per_agent}); dynagent reaches "
                    f"{reach}: larger ones are refused. {fix}",
                )
            )
        elif seen.capacity > reach:
            found.append(
                Finding(
                    name,
                    False,
                    f"pool {name!r}: the master admits experiments of up to {seen.capacity} "
                    f"slots, and dynagent reaches {reach}: larger ones wait in the queue for "
                    f"ever. {fix}",
                )
            )
    return found
