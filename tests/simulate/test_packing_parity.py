"""Packing's machines are the ones the master places work on: what ``decide`` launches
for a pool of 1-, 4- and 8-GPU offerings, registered on the simulator's master (which
follows Determined's ``fitting.go`` with code of its own), runs every task at once and
leaves no machine unused but a gang's spare."""

from __future__ import annotations

import pytest

from dynagent.core.decide import decide
from dynagent.core.fleet import Fleet
from dynagent.simulate.clock import Events
from dynagent.simulate.master import SimMaster
from dynagent.simulate.trace import Job
from tests.builders import NOW, pool, snapshot
from tests.core.test_placement import job

G5 = {"g5.xlarge": 1, "g5.12xlarge": 4, "g5.48xlarge": 8}


@pytest.mark.parametrize(
    "sizes",
    [(12,), (20,), (28,), (16, 1, 1), (12, 4, 2, 1), (20, 8, 3)],
)
def test_the_master_places_every_task_on_the_machines_packing_launched(
    sizes: tuple[int, ...],
) -> None:
    gpus = pool(
        instance_type="g5.48xlarge",
        offerings={"instance_types": list(G5), "max_slots": 80},
        max_instances=40,
    )
    pending = [job(f"t{k}", slots) for k, slots in enumerate(sizes)]
    plan = decide(gpus, Fleet(), snapshot(pending=pending), NOW)
    assert plan.unschedulable == () and plan.waiting == ()

    master = SimMaster("gpu", G5.values(), 40, Events())
    for k, slots in enumerate(sizes):
        master.submit(Job(f"t{k}", 0, 600, slots))
    for n, launch in enumerate(plan.launches):
        master.connect(f"i-{n}", G5[launch.offerings[0].instance_type])
    master.schedule(0)

    assert master.queue == []
    # A gang on three or more new machines has a spare of their size, which stays free:
    # here the gangs of 12, 20 and 28 slots, on 4-GPU machines (no 8-GPU one divides them).
    spares = [G5[launch.offerings[0].instance_type] for launch in plan.launches if not launch.tasks]
    assert spares == [4] * sum(1 for slots in sizes if slots in (12, 20, 28))
    assert all(launch.cause == "gang_spare" for launch in plan.launches if not launch.tasks)
    assert sorted(a.slots for a in master.agents.values() if a.used == 0) == spares
