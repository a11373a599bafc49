"""The Lambda entry points, called with SQS FIFO events of the real shape.

The handler module ``functions/aws/app.py`` is imported as Lambda would, with its
configuration in the environment and boto3 pointed at the local AWS.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.config import Config as BotoConfig

from dynagent.aws.functions import AwsFunctions, retry_delay
from dynagent.aws.sqs import SqsPublisher
from dynagent.testing.aws.event_source import LambdaContext, deliver_once

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
    tags_of,
)

FUNCTIONS_DIR = Path(__file__).resolve().parents[2] / "functions" / "aws"


@pytest.fixture
def queues(sqs: Any) -> tuple[str, str]:
    return fifo_queue(sqs, "snapshots.fifo"), fifo_queue(sqs, "dead-letters.fifo")


@pytest.fixture
def app(
    aws: Any, ec2: Any, queues: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ModuleType]:
    """``functions/aws/app.py`` as Lambda loads it, configured through the environment."""
    from .helpers import write_config

    path = write_config(
        tmp_path / "dynagent.yaml",
        pool_document(image_id(ec2)),
        pool_document(image_id(ec2), name="t4", instance_type="g4dn.xlarge"),
    )
    for name, value in aws.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DYNAGENT_CONFIG", str(path))
    monkeypatch.setenv("DYNAGENT_DEAD_LETTER_QUEUE_URL", queues[1])
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "dynagent")
    monkeypatch.syspath_prepend(str(FUNCTIONS_DIR))
    sys.modules.pop("app", None)
    # boto3 clients are cached per process; start from clean ones for this endpoint.
    from dynagent.aws import clients

    clients.ec2_client.cache_clear()
    clients.sqs_client.cache_clear()
    yield importlib.import_module("app")
    sys.modules.pop("app", None)
    clients.ec2_client.cache_clear()
    clients.sqs_client.cache_clear()


def dead_letters(sqs: Any, url: str) -> list[dict[str, Any]]:
    response = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )
    return response.get("Messages", [])


def test_a_snapshot_reaches_the_fleet(app: ModuleType, sqs: Any, ec2: Any, queues: Any) -> None:
    event = published_event(sqs, queues[0], snapshot(1, pending=[("trial-17.0", 8), ("cmd-3", 1)]))
    assert app.reconcile(event, LambdaContext()) == {"batchItemFailures": []}
    instances = managed_instances(ec2)  # 8 + 1 slots: two 8-GPU instances
    assert [tags_of(i)["dynagent:launch-key"] for i in instances] == ["a100:1", "a100:1"]


def test_bad_messages_go_to_the_dead_letter_queue_and_the_rest_applies(
    app: ModuleType, sqs: Any, ec2: Any, queues: Any
) -> None:
    good = snapshot(5, pending=[("trial", 8)]).to_json()
    bad = [
        ("a100", "bad-json", "{not json"),
        ("a100", "bad-type", json.dumps({"type": "pool.delta", "version": 1})),
        ("a100", "bad-version", json.dumps({"type": "pool.snapshot", "version": 2})),
        ("a100", "bad-field", json.dumps({"type": "pool.snapshot", "version": 1, "pool": "a100"})),
        ("zz", "bad-pool", snapshot(1, pool="zz").to_json()),
    ]
    event = event_from_queue(sqs, queues[0], [*bad, ("a100", "good", good)])
    assert app.reconcile(event, LambdaContext()) == {"batchItemFailures": []}
    assert len(managed_instances(ec2)) == 1

    reasons = {
        m["MessageAttributes"]["dynagent-reason"]["StringValue"]
        for m in dead_letters(sqs, queues[1])
    }
    assert len(reasons) == 5
    joined = " | ".join(sorted(reasons))
    for expected in ("not JSON", "pool.delta", "version 2", "seq", "'zz' is not configured"):
        assert expected in joined


def test_a_stale_snapshot_is_ignored(app: ModuleType, sqs: Any, ec2: Any, queues: Any) -> None:
    old = snapshot(1, pending=[("trial", 8)], time=now() - timedelta(minutes=11))
    assert app.reconcile(published_event(sqs, queues[0], old), LambdaContext()) == {
        "batchItemFailures": []
    }
    assert managed_instances(ec2) == []


def test_only_the_newest_snapshot_of_a_pool_in_a_batch_is_applied(
    app: ModuleType, aws: Any, sqs: Any, ec2: Any, queues: Any
) -> None:
    event = published_event(
        sqs,
        queues[0],
        snapshot(1, pending=[("a", 8), ("b", 8), ("c", 8)]),
        snapshot(2, pending=[("a", 8)]),
        snapshot(1, pool="t4", pending=[("n", 1)]),
    )
    aws.clear_calls()
    app.reconcile(event, LambdaContext())
    assert len(managed_instances(ec2)) == 1
    assert len(managed_instances(ec2, pool="t4")) == 1
    assert aws.calls().count("RunInstances") == 2


def test_replayed_batch_launches_nothing_more(
    app: ModuleType, sqs: Any, ec2: Any, queues: Any
) -> None:
    event = published_event(sqs, queues[0], snapshot(3, pending=[("a", 8), ("b", 8)]))
    app.reconcile(event, LambdaContext())
    app.reconcile(event, LambdaContext())  # Lambda may deliver a batch twice
    assert len(managed_instances(ec2)) == 2


def test_a_gang_gets_its_machines_and_one_spare_once(
    app: ModuleType, sqs: Any, ec2: Any, queues: Any
) -> None:
    # A 24-slot trial on 8-GPU machines: three for it and a spare (gang_spares), in one
    # reconcile. The batch delivered twice, and the next snapshot with the trial still
    # waiting on those boots, launch nothing more.
    event = published_event(sqs, queues[0], snapshot(4, pending=[("trial-9.0", 24)]))
    app.reconcile(event, LambdaContext())
    app.reconcile(event, LambdaContext())
    instances = managed_instances(ec2)
    assert [tags_of(i)["dynagent:launch-key"] for i in instances] == ["a100:4"] * 4

    later = published_event(sqs, queues[0], snapshot(5, pending=[("trial-9.0", 24)]))
    assert app.reconcile(later, LambdaContext()) == {"batchItemFailures": []}
    assert len(managed_instances(ec2)) == 4


class Recorder:
    """A logger that keeps what it was told."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, dict[str, Any]]] = []

    def _log(self, level: str, message: str, extra: dict[str, Any] | None = None) -> None:
        self.records.append((level, message, extra or {}))

    def info(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._log("info", message, extra)

    def warning(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._log("warning", message, extra)

    def error(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._log("error", message, extra)


def test_a_failing_pool_fails_only_its_own_group_and_comes_back_soon(
    aws: Any, ec2: Any, sqs: Any, queues: Any
) -> None:
    image = image_id(ec2)
    cfg = config(pool_document(image), pool_document(image, name="eu", region="eu-west-1"))
    unreachable = boto3.client(  # nothing listens on port 9 of loopback
        "ec2",
        region_name="eu-west-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=BotoConfig(retries={"total_max_attempts": 1}, connect_timeout=1),
    )
    logger = Recorder()
    functions = AwsFunctions(
        cfg,
        ec2_for_region=lambda region: ec2 if region == "us-west-2" else unreachable,
        sqs=sqs,
        snapshot_queue_url=queues[0],
        logger=logger,
    )
    publisher = SqsPublisher(queues[0], sqs)
    publisher.publish(snapshot(1, pool="eu", pending=[("x", 8)]))
    publisher.publish(snapshot(1, pending=[("y", 8)]))
    aws.clear_calls()

    delivered, failed = deliver_once(sqs, queues[0], functions.reconcile_batch, "us-west-2")
    assert (delivered, failed) == (2, 1)
    assert len(managed_instances(ec2)) == 1
    # The failed record's wait is cut to the first backoff step, not the queue's timeout.
    assert "ChangeMessageVisibilityBatch" in aws.calls()
    assert not [r for r in logger.records if r[1] == "could not shorten the retry delay"]
    assert [retry_delay(n) for n in (1, 2, 3, 6, 50)] == [10, 20, 40, 300, 300]


def test_the_sweep_reaps_by_tags_alone(
    app: ModuleType, aws: Any, ec2: Any, sqs: Any, queues: Any
) -> None:
    event = published_event(sqs, queues[0], snapshot(1, pending=[("a", 8)]))
    app.reconcile(event, LambdaContext())
    (instance,) = managed_instances(ec2)
    aws.set_launch_time(instance["InstanceId"], now() - timedelta(minutes=21))

    result = app.sweep({"source": "aws.events", "detail-type": "Scheduled Event"}, LambdaContext())
    a100 = next(p for p in result["pools"] if p["pool"] == "a100")
    assert any("never registered" in action for action in a100["actions"])
    assert managed_instances(ec2) == []


def test_registration_and_idleness_are_recorded_and_reaped(
    app: ModuleType, aws: Any, ec2: Any, sqs: Any, queues: Any
) -> None:
    app.reconcile(published_event(sqs, queues[0], snapshot(1, pending=[("a", 8)])), LambdaContext())
    (instance,) = managed_instances(ec2)
    agent = instance["InstanceId"]
    app.reconcile(
        published_event(sqs, queues[0], snapshot(2, agents=[(agent, 8, 0)])), LambdaContext()
    )
    (instance,) = managed_instances(ec2)
    assert "dynagent:registered" in tags_of(instance)
    assert "dynagent:idle-since" in tags_of(instance)

    # The idle mark is the state the sweep reads: age it past the idle period.
    old = (now() - timedelta(minutes=25)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ec2.create_tags(Resources=[agent], Tags=[{"Key": "dynagent:idle-since", "Value": old}])
    app.sweep({}, LambdaContext())
    assert managed_instances(ec2) == []


def test_a_spot_warning_reaches_the_interruption_entry_point(
    app: ModuleType, ec2: Any, sqs: Any, queues: Any
) -> None:
    from .test_interruptions import notice

    app.reconcile(published_event(sqs, queues[0], snapshot(1, pending=[("a", 8)])), LambdaContext())
    (instance,) = managed_instances(ec2)  # launched for "a", not registered yet

    result = app.interruption(notice(instance["InstanceId"]), LambdaContext())

    (report,) = result["pools"]
    assert report["pool"] == "a100" and len(report["launched"]) == 1
    assert len(managed_instances(ec2)) == 2
    assert app.interruption(notice("i-0123456789abcdef0"), LambdaContext()) == {"pools": []}


def test_a_warm_function_describes_each_image_once(
    aws: Any, ec2: Any, sqs: Any, queues: Any
) -> None:
    functions = AwsFunctions(
        config(pool_document(image_id(ec2))), ec2_for_region=lambda region: ec2
    )
    aws.clear_calls()
    # The second snapshot's first task fits the instance still starting; its second not.
    for seq, tasks in ((1, [("a", 8)]), (2, [("a", 8), ("b", 8)])):
        event = published_event(sqs, queues[0], snapshot(seq, pending=tasks))
        functions.reconcile_batch(event, LambdaContext())
    assert aws.calls().count("RunInstances") == 2
    assert aws.calls().count("DescribeImages") == 1
