"""``boot_disk_source_image: projects/P/global/images/family/F`` on the local Compute,
through the reconcile function as Cloud Functions runs it: VMs are created from the
family's newest image; when the family gets a new one, the agents of the old image
drift within a minute and a pass; a family that cannot be read is said, and judges
nothing."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from dynagent.core.boot.drift import read_boot_tag
from dynagent.gcp import labels as gce_labels
from dynagent.gcp.functions import GcpFunctions
from dynagent.testing.gcp.compute import LocalCompute

from ..bridge.cluster import Recorder
from .helpers import PROJECT, config, gcp_pool_document, managed, now, snapshot
from .test_functions import event

FAMILY = f"projects/{PROJECT}/global/images/family/det-agent"


class Clock:
    def __init__(self) -> None:
        self.now = now()

    def __call__(self) -> datetime:
        return self.now


def functions_for(compute: LocalCompute, clock: Clock, log: Recorder) -> GcpFunctions:
    instances, operations = compute.instances_client(), compute.zone_operations_client()
    images = compute.images_client()
    return GcpFunctions(
        config(gcp_pool_document(boot_disk_source_image=FAMILY)),
        instances=lambda: instances,
        operations=lambda: operations,
        images=lambda: images,
        clock=clock,
        logger=log,
        sleep=lambda _: None,
    )


def test_vms_use_the_family_s_newest_image_and_a_new_one_drifts_the_old_agents(
    compute: LocalCompute,
) -> None:
    compute.catalog.add_image(PROJECT, "det-agent-v1", family="det-agent")
    clock, log = Clock(), Recorder()
    functions = functions_for(compute, clock, log)
    seq = iter(range(1, 100))

    def send(**fields: Any) -> None:
        shot = snapshot(next(seq), pool="t4", time=clock.now, **fields)
        functions.reconcile_event(event(shot.to_json().encode()))

    send(pending=[("exp-1.trial-1", 4)])
    (vm,) = managed(compute)
    agent = str(vm["name"])
    assert compute.boot_image(agent) == f"projects/{PROJECT}/global/images/det-agent-v1"
    send(agents=[(agent, 4, 0)])

    compute.catalog.add_image(PROJECT, "det-agent-v2", family="det-agent")
    clock.now += timedelta(seconds=30)
    send(agents=[(agent, 4, 0)])  # read 30 s ago: not read again yet
    assert [v["name"] for v in managed(compute)] == [agent]
    clock.now += timedelta(seconds=31)
    send(agents=[(agent, 4, 0)], pending=[("exp-2.trial-1", 4)])
    # Work waits: the old agent is drained, not deleted; the work gets the new image.
    images = {str(v["name"]): compute.boot_image(str(v["name"])) for v in managed(compute)}
    assert images.pop(agent).endswith("det-agent-v1")
    assert [i.rsplit("/", 1)[1] for i in images.values()] == ["det-agent-v2"]
    (new,) = images
    old_tag = read_boot_tag(vm["labels"][gce_labels.BOOT_CONFIG_LABEL])
    new_vm = compute.instance(new)
    new_tag = read_boot_tag(new_vm["labels"][gce_labels.BOOT_CONFIG_LABEL])
    assert old_tag[1][:4] != new_tag[1][:4] and old_tag[1][4:] == new_tag[1][4:]  # the image
    assert any("family det-agent now names" in m for _, m, _ in log.lines)
    send(agents=[(agent, 4, 0)])
    assert [v["name"] for v in managed(compute) if v["status"] != "STOPPING"] == [new]


def test_a_family_that_cannot_be_read_is_said_and_judges_nothing(compute: LocalCompute) -> None:
    compute.catalog.add_image(PROJECT, "det-agent-v1", family="det-agent")
    clock, log = Clock(), Recorder()
    warm = functions_for(compute, clock, log)
    warm.reconcile_event(
        event(snapshot(1, pool="t4", pending=[("t", 4)], time=clock.now).to_json().encode())
    )
    (vm,) = managed(compute)
    agent = str(vm["name"])
    compute.catalog.images.clear()  # the family is gone (or the account may not read it)
    clock.now += timedelta(minutes=2)
    for seq, functions in ((2, warm), (3, functions_for(compute, clock, log))):
        shot = snapshot(seq, pool="t4", agents=[(agent, 4, 0)], time=clock.now)
        functions.reconcile_event(event(shot.to_json().encode()))
    # A warm function keeps the image it read; a cold one knows none and judges nothing.
    assert [v["name"] for v in managed(compute)] == [agent]
    errors = [m for level, m, _ in log.lines if level == "error"]
    assert len(errors) == 2 and all("could not read image family det-agent" in m for m in errors)
    assert "launches use projects/local-project/global/images/det-agent-v1" in errors[0]
