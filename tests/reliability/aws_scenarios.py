"""The reliability scenarios on the local AWS (moto's server over HTTP).

Each drives the real Lambda code (``AwsFunctions.reconcile_batch`` with Lambda-shaped
SQS events, and ``sweep``) on a virtual clock (tests/reliability/aws_rig.py), injects
its faults only at the local AWS (its knobs, or the queue as a master or Lambda would
fill it), and fills ``Figures`` from what the cloud shows at the end.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.reliability.aws_rig import (
    Convergence,
    Rig,
    pool,
    pool_config,
    seeded,
    snapshot,
)
from tests.reliability.clouds import Clouds
from tests.reliability.figures import Figures, Mode, Scenario

# -- R1 -------------------------------------------------------------------------------

# Three pools (one spot), each with a backlog that grows over four snapshots, a minute
# apart, to three tasks of one instance each: whatever the order, the newest snapshot
# asks for 3 instances a pool and no older one for more.
R1_POOLS = {"a100": ("p4d.24xlarge", 8, False), "t4": ("g4dn.xlarge", 1, False)}
R1_SPOT = {"a10g": ("g5.xlarge", 1, True)}
R1_BACKLOG = (("a",), ("a", "b"), ("a", "b", "c"), ("a", "b", "c"))


def r1_duplicates(clouds: Clouds, mode: Mode) -> Figures:
    figures = Figures("R1 duplicates", "aws")
    for run in range(3 if mode.long else 1):
        clean = _r1_run(clouds, copies=1, shuffle=None)
        # Every snapshot three times (a master resending past the queue's deduplication
        # window, Lambda redelivering), all shuffled across the pools.
        copies, shuffle = (3, seeded(f"R1:{run}")) if mode.inject else (1, None)
        faulty = _r1_run(clouds, copies=copies, shuffle=shuffle)
        figures.runs += 1
        figures.launches_expected += clean["launches"]
        figures.launches_made += faulty["launches"]
        figures.faults += faulty["faults"]
        figures.leaked += max(0, faulty["live"] - clean["live"])
        figures.lost += len(faulty["escaped"])
        figures.converge_passes = max(figures.converge_passes, faulty["passes"])
        figures.converge_seconds = max(figures.converge_seconds, faulty["seconds"])
        figures.calls_per_minute = max(figures.calls_per_minute or 0, faulty["rate"])
    figures.limits = {"calls_per_minute": 120}
    return figures


def _r1_run(clouds: Clouds, copies: int, shuffle: Any) -> dict[str, Any]:
    aws = clouds.aws()
    image = aws.image_id()
    kinds = {**R1_POOLS, **R1_SPOT}
    config = pool_config(
        *(
            pool(name, image, instance_type=kind, spot=spot, max_instances=5)
            for name, (kind, _, spot) in kinds.items()
        )
    )
    rig = Rig(aws, config)
    start = rig.clock.now()
    items = [
        snapshot(name, seq, start.replace(second=0) + timedelta(minutes=seq - 1), pending)
        for seq, tasks in enumerate(R1_BACKLOG, 1)
        for name, (_, slots, _) in kinds.items()
        for pending in [[(f"{name}-{t}", slots) for t in tasks]]
    ]
    sends = [(item, copy) for item in items for copy in range(copies)]
    if shuffle is not None:
        shuffle.shuffle(sends)
    # All are in the queue by the time of the last; the clock is there too.
    rig.clock.advance(minutes=len(R1_BACKLOG) - 1)
    ids = {rig.publish(item, copy): (item.pool, item.seq) for item, copy in sends}
    before: set[str] = set()
    converge = Convergence(rig.clock)
    aws.clear_calls()
    seen: dict[str, int] = {}
    faults = 0
    while True:
        received = rig.deliver()
        if not received:
            break
        for message_id in received:
            pool_name, seq = ids[message_id]
            # A copy already applied, or a snapshot older than one applied: both faults.
            if seq <= seen.get(pool_name, 0):
                faults += 1
            seen[pool_name] = max(seq, seen.get(pool_name, 0))
        converge.see(len(rig.live()))
        rig.clock.advance(seconds=10)
    for _ in range(2):  # the sweeps that follow change nothing
        rig.functions.sweep()
        converge.see(len(rig.live()))
    return {
        "launches": rig.launches_since(before),
        "live": len(rig.live()),
        "faults": faults,
        "escaped": rig.delivery.escaped,
        "passes": converge.settled_passes,
        "seconds": converge.settled_seconds,
        "rate": rig.calls_per_minute(),
    }


SCENARIOS: dict[str, Scenario] = {
    "R1 duplicates": r1_duplicates,
}
