"""The reliability scenarios on the local Compute Engine and the Pub/Sub emulator.

Each drives ``GcpFunctions`` (reconcile on CloudEvents from the emulator, and the sweep)
with the real google-cloud-compute client against ``dynagent.testing.gce`` and a virtual
clock (tests/reliability/gcp_rig.py). Faults are injected only at the doubles; with
``mode.inject`` False a scenario injects none, and its ``faults`` stays 0.
"""

from __future__ import annotations

import random

from tests.reliability.clouds import Clouds
from tests.reliability.figures import Figures, Mode, Scenario
from tests.reliability.gcp_rig import Rig, config, gcp_pool_document, shuffled, snapshot

GPUS = 4  # gcp_pool_document's machine: one 4-slot task per VM

# R1: a few pools, each growing its demand over a few snapshots.
R1_POOLS = ("p1", "p2", "p3")
R1_STEPS = 3


def r1_duplicates(clouds: Clouds, mode: Mode) -> Figures:
    """Every snapshot delivered three times: its first delivery's ack is lost (Pub/Sub
    delivers the same message id again) and the master re-publishes it later (a new
    message id, possibly after newer snapshots of its pool), pools interleaved at random.
    Level-triggered reconciles and deterministic VM names must insert nothing extra."""
    figures = Figures("R1 duplicates", "gcp")
    cfg = config(*(gcp_pool_document(pool) for pool in R1_POOLS))
    for run in range(5 if mode.long else 1):
        rng = random.Random(run)
        with Rig(clouds.compute(), clouds.pubsub(), cfg) as rig:
            streams = []
            for pool in R1_POOLS:
                snapshots = [
                    snapshot(
                        seq,
                        pool=pool,
                        pending=[(f"{pool}-task-{i}", GPUS) for i in range(1, seq + 1)],
                        time=rig.clock.now(),
                    )
                    for seq in range(1, R1_STEPS + 1)
                ]
                stream = list(snapshots)
                if mode.inject:  # each re-published anywhere after its first copy
                    for item in snapshots:
                        at = rng.randint(stream.index(item) + 1, len(stream))
                        stream.insert(at, item)
                streams.append(stream)
            # Pools interleave at random; each pool's own stream stays in order.
            for pool_index in shuffled(rng, [i for i, s in enumerate(streams) for _ in s]):
                rig.publish(streams[pool_index].pop(0))
            rig.goal = lambda rig=rig: all(len(rig.live(p)) >= R1_STEPS for p in R1_POOLS)
            rig.deliver(lose_first_ack=mode.inject)
            rig.read_dead_letters()
            figures.runs += 1
            figures.launches_expected += R1_STEPS * len(R1_POOLS)
            figures.launches_made += len(rig.compute.created())
            figures.leaked += sum(max(0, len(rig.live(p)) - R1_STEPS) for p in R1_POOLS)
            figures.lost += rig.lost()
            redelivered = sum(m.deliveries - 1 for m in rig.messages.values())
            republished = len(rig.messages) - R1_STEPS * len(R1_POOLS)
            figures.faults += redelivered + republished
            _note_converge(figures, rig)
            _note_escapes(figures, rig)
    return figures


def _note_converge(figures: Figures, rig: Rig) -> None:
    passes, seconds = rig.converge()
    figures.converge_passes = max(figures.converge_passes, passes)
    figures.converge_seconds = max(figures.converge_seconds, seconds)


def _note_escapes(figures: Figures, rig: Rig) -> None:
    """Exceptions out of the function: each one is a retry Pub/Sub must pay for."""
    escaped = sum(len(m.escaped) for m in rig.messages.values())
    figures.extra["escaped"] = figures.extra.get("escaped", 0) + escaped


SCENARIOS: dict[str, Scenario] = {
    "R1 duplicates": r1_duplicates,
}
