"""The Cloud Functions' metrics: one structured log entry per point, in the shape the
log-based metrics of infra/gcp/deploy.sh read, from passes over the local Compute."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from dynagent.gcp.functions import GcpFunctions
from dynagent.gcp.logs import METRIC_MESSAGE, MetricLog
from dynagent.report.metrics import BY_NAME
from dynagent.testing.gcp.compute import LocalCompute
from dynagent.testing.gcp.pubsub_events import message_event

from .helpers import config, gcp_pool_document, managed, now, snapshot


def entries(stream: io.StringIO) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    found = [line for line in lines if line.get("message") == METRIC_MESSAGE]
    for entry in found:  # every entry is a catalog metric, with exactly its dimensions
        spec = BY_NAME[entry["metric"]]
        fixed = {"severity", "message", "time", "metric", "value", "unit"}
        assert set(entry) == fixed | set(spec.dimensions)
        assert entry["severity"] == "INFO" and entry["unit"] == spec.unit
    stream.seek(0)
    stream.truncate()
    return found


def values(found: list[dict[str, Any]]) -> dict[tuple[str, ...], float]:
    result: dict[tuple[str, ...], float] = {}
    for entry in found:
        spec = BY_NAME[entry["metric"]]
        key = (entry["metric"], *(entry[name] for name in spec.dimensions))
        assert key not in result
        result[key] = entry["value"]
    return result


@pytest.fixture
def at() -> datetime:
    return now()


@pytest.fixture
def stream() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def functions(compute: LocalCompute, at: datetime, stream: io.StringIO) -> GcpFunctions:
    instances, operations = compute.instances_client(), compute.zone_operations_client()
    steps = iter(range(1_000_000))
    return GcpFunctions(
        config(gcp_pool_document()),
        instances=lambda: instances,
        operations=lambda: operations,
        clock=lambda: at,
        sleep=lambda _: None,
        metrics=MetricLog(stream),
        timer=lambda: next(steps) * 0.25,  # each pass lasts 250 ms
    )


def event(body: bytes) -> Any:
    return message_event(body, "projects/p/topics/snapshots", "projects/p/subscriptions/s")


def test_a_reconcile_and_a_sweep_log_their_metrics(
    functions: GcpFunctions, compute: LocalCompute, at: datetime, stream: io.StringIO
) -> None:
    published = snapshot(1, pool="t4", pending=[("x", 4)], time=at - timedelta(seconds=2))
    functions.reconcile_event(event(published.to_json().encode()))
    assert len(managed(compute)) == 1

    found = entries(stream)
    launches = next(e for e in found if e["metric"] == "Launches")
    assert launches == {
        "severity": "INFO",
        "message": "dynagent metric",
        "time": at.isoformat(),
        "metric": "Launches",
        "value": 1,
        "unit": "Count",
        "pool": "t4",
        "reason": "demand",
    }
    got = values(found)
    assert got[("SnapshotAge", "t4")] == 2
    assert got[("PendingSlots", "t4")] == 4
    assert got[("ReconcileDuration", "t4")] == 250
    assert got[("Agents", "t4", "idle")] == 0

    functions.sweep()
    swept = values(entries(stream))
    assert swept[("Instances", "t4", "starting")] + swept[("Instances", "t4", "running")] == 1
    # n1-standard-32 with 4 T4s, priced from the built-in list.
    price = functions.config.pools["t4"].provider.catalog().offerings[0].price
    assert price > 0 and swept[("CostPerHour", "t4")] == round(price, 4)
    assert ("Agents", "t4", "idle") not in swept  # a sweep knows no agents


def test_a_message_set_aside_is_counted_for_its_pool_or_unknown(
    functions: GcpFunctions, at: datetime, stream: io.StringIO
) -> None:
    functions.reconcile_event(event(b"{not json"))
    skewed = snapshot(1, pool="t4", time=at + timedelta(minutes=10))
    functions.reconcile_event(event(skewed.to_json().encode()))
    found = entries(stream)
    assert [(e["metric"], e["pool"], e["value"]) for e in found] == [
        ("DeadLetters", "unknown", 1),
        ("DeadLetters", "t4", 1),
    ]


def test_a_warm_pool_logs_its_stopped_machines_by_type_and_their_disk_cost(
    compute: LocalCompute, at: datetime, stream: io.StringIO
) -> None:
    from dynagent.core.fleet import Mark
    from dynagent.core.plan import MarkWrite
    from dynagent.gcp.compute import GceProvider

    instances, operations = compute.instances_client(), compute.zone_operations_client()
    functions = GcpFunctions(
        config(gcp_pool_document(warm_pool={"max_stopped": 2})),
        instances=lambda: instances,
        operations=lambda: operations,
        clock=lambda: at,
        sleep=lambda _: None,
        metrics=MetricLog(stream),
    )
    published = snapshot(1, pool="t4", pending=[("x", 4)], time=at)
    functions.reconcile_event(event(published.to_json().encode()))
    launched = values(entries(stream))
    assert launched[("StoppedInstances", "t4", "n1-standard-32")] == 0
    assert launched[("StoppedDiskCost", "t4")] == 0
    (vm,) = managed(compute)

    # The VM stopped by a pass an hour ago: TERMINATED, with the pass's label.
    pool = functions.config.pools["t4"]
    compute.set_status(vm["name"], "TERMINATED")
    GceProvider(pool, instances, operations).write_marks(
        (MarkWrite(Mark.STOPPED_AT, at - timedelta(hours=1), (vm["name"],), "stopped"),)
    )
    functions.sweep()
    found = entries(stream)
    swept = values(found)
    assert swept[("StoppedInstances", "t4", "n1-standard-32")] == 1
    disk = pool.provider.stopped_disk_per_hour
    assert disk > 0 and swept[("StoppedDiskCost", "t4")] == round(disk, 4)
    assert not [k for k in swept if k[0] == "Terminations"]  # the warm pool keeps it
    stopped = next(e for e in found if e["metric"] == "StoppedInstances")
    assert (stopped["pool"], stopped["instance_type"], stopped["unit"]) == (
        "t4",
        "n1-standard-32",
        "Count",
    )
