"""The Lambda functions' metrics: CloudWatch embedded metric format documents on the log,
read back as CloudWatch Logs would, from passes over the local AWS."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from dynagent.aws.emf import EmfWriter
from dynagent.aws.functions import AwsFunctions
from dynagent.core.prices import AWS_ON_DEMAND
from dynagent.report.metrics import BY_NAME, NAMESPACE
from dynagent.testing.aws.event_source import LambdaContext

from .helpers import (
    config,
    event_from_queue,
    fifo_queue,
    image_id,
    managed_instances,
    now,
    pool_document,
    published_event,
    snapshot,
)
from .test_functions import app  # noqa: F401  (the fixture: functions/aws/app.py, loaded)

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR, SHARED_DIR = ROOT / "functions" / "aws", ROOT / "shared"


def documents(text: str) -> list[dict[str, Any]]:
    """The EMF documents among log lines, as CloudWatch Logs picks them out."""
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return [line for line in lines if "_aws" in line]


def points(docs: list[dict[str, Any]]) -> dict[tuple[str, ...], float]:
    """Every metric value by (name, pool, other dimension values...), each document checked
    against the EMF specification's shape and the catalog."""
    found: dict[tuple[str, ...], float] = {}
    for doc in docs:
        (directive,) = doc["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == NAMESPACE
        (dimensions,) = directive["Dimensions"]
        assert "service" not in doc  # no Powertools service dimension (see dynagent.aws.emf)
        for metric in directive["Metrics"]:
            spec = BY_NAME[metric["Name"]]  # every name is in the catalog
            assert metric["Unit"] == spec.unit
            assert tuple(dimensions) == spec.dimensions
            key = (metric["Name"], *(doc[name] for name in dimensions))
            assert key not in found
            (found[key],) = doc[metric["Name"]]  # Powertools writes values as a list
    return found


def ticks(step: float) -> Callable[[], float]:
    """A timer that moves ``step`` seconds each time it is read: each pass lasts one step."""
    clock = iter(range(1_000_000))
    return lambda: next(clock) * step


@pytest.fixture
def queues(sqs: Any) -> tuple[str, str]:
    return fifo_queue(sqs, "snapshots.fifo"), fifo_queue(sqs, "dead-letters.fifo")


@pytest.fixture
def at() -> datetime:
    return now()


@pytest.fixture
def stream() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def functions(
    ec2: Any, sqs: Any, queues: tuple[str, str], at: datetime, stream: io.StringIO
) -> Iterator[AwsFunctions]:
    yield AwsFunctions(
        config(pool_document(image_id(ec2))),
        ec2_for_region=lambda region: ec2,
        sqs=sqs,
        dead_letter_url=queues[1],
        clock=lambda: at,
        sleep=lambda _: None,
        metrics=EmfWriter(stream),
        timer=ticks(0.5),
    )


def test_a_reconcile_and_a_sweep_write_their_metrics(
    functions: AwsFunctions, sqs: Any, ec2: Any, queues: Any, at: datetime, stream: io.StringIO
) -> None:
    published = snapshot(1, pending=[("a", 8), ("b", 8)], time=at - timedelta(seconds=3))
    functions.reconcile_batch(published_event(sqs, queues[0], published), LambdaContext())
    assert len(managed_instances(ec2)) == 2

    docs = documents(stream.getvalue())
    assert {doc["_aws"]["Timestamp"] for doc in docs} == {int(at.timestamp() * 1000)}
    # One document per set of dimension values: pool alone, then each state and reason.
    assert [doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"] for doc in docs].count(
        [["pool"]]
    ) == 1
    assert points(docs) == {
        ("SnapshotAge", "a100"): 3.0,
        ("SnapshotsApplied", "a100"): 1.0,
        ("PendingSlots", "a100"): 16.0,
        ("Agents", "a100", "idle"): 0.0,
        ("Agents", "a100", "busy"): 0.0,
        ("Agents", "a100", "draining"): 0.0,
        ("PendingAtMax", "a100"): 0.0,
        ("ReconcileDuration", "a100"): 500.0,
        # Observed before the launch: nothing yet.
        ("Instances", "a100", "starting"): 0.0,
        ("Instances", "a100", "running"): 0.0,
        ("Instances", "a100", "stopping"): 0.0,
        ("Instances", "a100", "stopped"): 0.0,
        ("CostPerHour", "a100"): 0.0,
        ("Launches", "a100", "demand"): 2.0,
    }

    stream.seek(0)
    stream.truncate()
    functions.sweep()
    swept = points(documents(stream.getvalue()))
    assert sum(v for k, v in swept.items() if k[0] == "Instances") == 2
    assert swept[("CostPerHour", "a100")] == round(2 * AWS_ON_DEMAND["p4d.24xlarge"], 4)
    assert swept[("ReconcileDuration", "a100")] == 500.0
    # A sweep knows no demand, no agents, no snapshot.
    assert not {"PendingSlots", "Agents", "PendingAtMax", "SnapshotAge"} & {k[0] for k in swept}


def test_a_launch_the_cloud_refuses_is_counted_by_its_code(
    functions: AwsFunctions, aws: Any, sqs: Any, queues: Any, stream: io.StringIO
) -> None:
    aws.fail_next_launch("p4d.24xlarge", "VcpuLimitExceeded")
    functions.reconcile_batch(
        published_event(sqs, queues[0], snapshot(1, pending=[("a", 8)])), LambdaContext()
    )
    found = points(documents(stream.getvalue()))
    assert found[("LaunchErrors", "a100", "quota")] == 1.0
    assert not [k for k in found if k[0] == "Launches"]


def test_records_set_aside_are_counted_by_their_pool(
    functions: AwsFunctions, sqs: Any, queues: Any, at: datetime, stream: io.StringIO
) -> None:
    skewed = snapshot(2, time=at + timedelta(minutes=10))  # a configured pool, a bad clock
    event = event_from_queue(
        sqs,
        queues[0],
        [
            ("a100", "bad-json", "{not json"),
            ("zz", "bad-pool", snapshot(1, pool="zz").to_json()),
            ("a100", "skewed", skewed.to_json()),
        ],
    )
    assert functions.reconcile_batch(event, LambdaContext()) == {"batchItemFailures": []}
    dead = [
        (doc["pool"], *doc["DeadLetters"])
        for doc in documents(stream.getvalue())
        if "DeadLetters" in doc
    ]
    assert sorted(dead) == [("a100", 1.0), ("unknown", 1.0), ("unknown", 1.0)]


def test_the_handlers_print_emf_to_stdout_without_a_service_dimension(
    app: ModuleType,  # noqa: F811
    sqs: Any,
    queues: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Lambda's own wiring: stdout is the log, POWERTOOLS_SERVICE_NAME is set, X-Ray's
    daemon is absent (Tracer disables itself outside Lambda)."""
    event = published_event(sqs, queues[0], snapshot(1, pending=[("a", 8)]))
    assert app.reconcile(event, LambdaContext()) == {"batchItemFailures": []}
    reconciled = points(documents(capsys.readouterr().out))
    assert reconciled[("Launches", "a100", "demand")] == 1.0
    assert reconciled[("SnapshotsApplied", "a100")] == 1.0

    app.sweep({"source": "aws.events"}, LambdaContext())
    assert app.TRACED  # traced as deployed with Tracing=Active; inert outside Lambda
    swept = points(documents(capsys.readouterr().out))
    # Every pool of the config, t4 too, and the a100 instance launched above.
    assert swept[("Instances", "t4", "running")] == 0.0
    assert swept[("Instances", "a100", "starting")] + swept[("Instances", "a100", "running")] == 1


@pytest.mark.parametrize("disabled", ["true", "false"])
def test_the_xray_sdk_is_imported_only_when_tracing_is_on(disabled: str) -> None:
    """It costs some 0.2 s of a cold start: the stack's Tracing parameter decides."""
    code = (
        f"import sys; sys.path[:0] = [{str(FUNCTIONS_DIR)!r}, {str(SHARED_DIR)!r}]; "
        "import app; print('aws_xray_sdk.core' in sys.modules)"
    )
    env = {**os.environ, "POWERTOOLS_TRACE_DISABLED": disabled}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == ("False" if disabled == "true" else "True")


def test_launches_pause_after_repeated_refusals_and_the_status_and_metrics_say_so(
    aws: Any, ec2: Any, sqs: Any, queues: Any, stream: io.StringIO
) -> None:
    clock = [now()]
    functions = AwsFunctions(
        config(pool_document(image_id(ec2), launch_error_timeout="10m", launch_error_retries=1)),
        ec2_for_region=lambda region: ec2,
        sqs=sqs,
        dead_letter_url=queues[1],
        snapshot_queue_url=queues[0],
        clock=lambda: clock[0],
        sleep=lambda _: None,
        metrics=EmfWriter(stream),
    )

    def reconcile(seq: int) -> dict[tuple[str, ...], float]:
        stream.seek(0)
        stream.truncate()
        event = published_event(sqs, queues[0], snapshot(seq, pending=[("a", 8)], time=clock[0]))
        functions.reconcile_batch(event, LambdaContext())
        return points(documents(stream.getvalue()))

    for seq in (1, 2):  # two refusals within launch_error_timeout: retries used up
        aws.fail_next_launch("p4d.24xlarge", "VcpuLimitExceeded")
        assert reconcile(seq)[("LaunchErrors", "a100", "quota")] == 1.0
        clock[0] += timedelta(minutes=1)
    launches = aws.calls("ec2").count("RunInstances")
    paused = reconcile(3)
    assert aws.calls("ec2").count("RunInstances") == launches  # not even tried
    assert paused[("LaunchesPaused", "a100")] == 1.0
    tags = sqs.list_queue_tags(QueueUrl=queues[0])["Tags"]
    assert "paused-until=" in tags["dynagent:status:a100"]

    clock[0] += timedelta(minutes=11)  # the timeout after the last refusal has passed
    resumed = reconcile(4)
    assert ("LaunchesPaused", "a100") not in resumed
    assert len(managed_instances(ec2)) == 1


def test_the_warm_pool_counts_stops_starts_refusals_and_what_stopped_machines_cost(
    aws: Any, ec2: Any, sqs: Any, stream: io.StringIO
) -> None:
    from .test_ec2_repack import two_subnets
    from .test_warm_pool import STOPPED, Pass, idle_for, state_of

    subnets = [s["SubnetId"] for s in two_subnets(ec2)]
    document = pool_document(
        image_id(ec2),
        instance_type="p3.8xlarge",
        offerings={"instance_types": ["p3.8xlarge", "p3.16xlarge"], "subnet_ids": subnets},
        warm_pool={"max_stopped": 1},
    )
    functions = AwsFunctions(
        config(document),
        ec2_for_region=lambda _: ec2,
        sleep=lambda _: None,
        metrics=EmfWriter(stream),
    )
    send = Pass(sqs, functions)

    def sent(**fields: Any) -> dict[tuple[str, ...], float]:
        stream.seek(0)
        stream.truncate()
        send(**fields)
        return points(documents(stream.getvalue()))

    disk = functions.config.pools["a100"].provider.stopped_disk_per_hour
    launched = sent(pending=[("exp-1", 4)])
    # A warm pool's gauges every pass, zeros included, one series per type it offers.
    assert launched[("StoppedInstances", "a100", "p3.8xlarge")] == 0.0
    assert launched[("StoppedInstances", "a100", "p3.16xlarge")] == 0.0
    assert launched[("StoppedDiskCost", "a100")] == 0.0
    (machine,) = managed_instances(ec2)
    instance_id, zone = str(machine["InstanceId"]), machine["Placement"]["AvailabilityZone"]
    sent(agents=[(instance_id, 4, 0)])
    idle_for(ec2, instance_id, minutes=30)

    stopped = sent(agents=[(instance_id, 4, 0)])
    assert state_of(ec2, instance_id) in STOPPED
    assert stopped[("Stops", "a100")] == 1.0
    assert stopped[("StoppedInstances", "a100", "p3.8xlarge")] == 1.0
    assert stopped[("StoppedInstances", "a100", "p3.16xlarge")] == 0.0
    assert stopped[("StoppedDiskCost", "a100")] == round(disk, 4) > 0
    assert not [k for k in stopped if k[0] == "Terminations"]

    started = sent(pending=[("exp-2", 4)])
    assert started[("Starts", "a100")] == 1.0
    assert state_of(ec2, instance_id) in ("pending", "running")
    assert started[("StoppedInstances", "a100", "p3.8xlarge")] == 0.0
    assert started[("StoppedDiskCost", "a100")] == 0.0
    assert not {"StartsRefused", "Launches", "Stops"} & {k[0] for k in started}

    # Idle again, stopped again; then no capacity left for its type in its zone: the
    # start is refused, and its cold launch buys the type in the other subnet, in the
    # same pass.
    sent(agents=[(instance_id, 4, 0)])
    idle_for(ec2, instance_id, minutes=30)
    assert sent(agents=[(instance_id, 4, 0)])[("Stops", "a100")] == 1.0
    aws.limit_capacity("p3.8xlarge", zone=zone, count=0)
    refused = sent(pending=[("exp-3", 4)])
    assert refused[("StartsRefused", "a100", "capacity")] == 1.0
    assert ("Starts", "a100") not in refused
    assert refused[("Launches", "a100", "demand")] == 1.0
    assert refused[("StoppedInstances", "a100", "p3.8xlarge")] == 1.0
    assert refused[("StoppedDiskCost", "a100")] == round(disk, 4)
