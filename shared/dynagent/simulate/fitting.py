"""Determined's fitting rules, as its agent resource manager places a task on agents.

Pure functions over numbers, mirrored from ``master/internal/rm/agentrm`` in
determined-ai/determined; the simulator's master (``simulate.agents``) indexes its
agents so that it finds the same fit without scoring every agent. (``dynagent.core.fitting``
predicts the same placement for packing, on a snapshot's agents; the policy's names
are its.)

- ``fitting.go`` ``findFits``: a *shared* fit first, the best-scored agent with enough
  free slots (and, for a zero-slot task, room for one more auxiliary container); if
  none, and the task may span agents and needs more than one slot, a *dedicated* fit:
  whole unused agents of one size (``dedicated_size``).
- ``fitting_methods.go`` ``BestFit`` and ``WorstFit``: the score of an agent for a
  task (``best_fit``, ``worst_fit``); ``maxZeroSlotContainersSatisfied`` bounds the
  zero-slot tasks on an agent by the pool's ``max_aux_containers_per_agent``.

Not modelled: ``allow_heterogeneous_fits`` (off by default in ``scheduler_config.go``;
with it a gang may mix agent sizes) and agents disabled or draining (the simulator's
master never disables one).
"""

from __future__ import annotations

from collections.abc import Iterable

from dynagent.core.config import Pool

# resource_pool_config.go defaultRPConfig: MaxAuxContainersPerAgent.
MAX_AUX_CONTAINERS_PER_AGENT = 100


def best_fit(request: int, slots: int, used: int, aux: int, max_aux: int) -> float:
    """``BestFit``: the fullest agent wins (the fewest free slots), so that whole agents
    stay idle for the autoscaler to reap. A zero-slot task on an agent using no slot
    goes where most auxiliary containers run already; an empty agent scores 0."""
    if used or request:
        return 1.0 / (1.0 + (slots - used))
    if not aux:
        return 0.0
    return 1.0 / (1.0 + (max_aux - aux))


def worst_fit(request: int, slots: int, used: int, aux: int, max_aux: int) -> float:
    """``WorstFit``: the emptiest agent wins (the largest share of its slots free), which
    spreads tasks out. A zero-slot task on an agent using no slot goes where the
    largest share of auxiliary room is left; an empty agent scores 0."""
    if used or request:
        return (slots - used) / slots
    if not aux:
        return 0.0
    return (max_aux - aux) / max_aux


SCORES = {"best": best_fit, "worst": worst_fit}


def dedicated_size(request: int, unused: Iterable[tuple[int, int]]) -> int | None:
    """The agent size a gang of ``request`` slots takes whole, given (size, how many
    unused agents of that size) pairs; None when no size will do.

    ``findDedicatedAgentFits``: unused agents (no slot in use) grouped by size, the
    largest first, so the gang spans as few agents as possible; the first size whose
    agents hold the request and divides it gives ``request // size`` agents, each used
    whole. Sizes of 0 slots are skipped.
    """
    for size, count in sorted(unused, reverse=True):
        if size and count * size >= request and request % size == 0:
            return size
    return None


def fits_pool(
    request: int,
    sizes: Iterable[int],
    max_instances: int,
    single_agent: bool = False,
    max_aux: int = MAX_AUX_CONTAINERS_PER_AGENT,
) -> bool:
    """Whether some fleet of this pool could ever run the task, by ``findFits``.

    ``sizes`` are the slots of the machines the pool may launch. A zero-slot task runs
    on any agent with auxiliary room; a task fits one agent of a size that holds it;
    else, unless it must stay on one agent or asks for a single slot, it takes whole
    agents of one size that divides it, at most ``max_instances`` of them.
    """
    sizes = tuple(sizes)
    if max_instances < 1 or not sizes:
        return False
    if request == 0:
        return max_aux > 0
    if any(size >= request for size in sizes):
        return True
    if single_agent or request <= 1:
        return False
    return any(size and request % size == 0 and request // size <= max_instances for size in sizes)


def pool_sizes(pool: Pool) -> tuple[int, ...]:
    """The slots of each machine type the pool offers, fewest first."""
    return tuple(sorted({offering.slots for offering in pool.provider.catalog().offerings}))
