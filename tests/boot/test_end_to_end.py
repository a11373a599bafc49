"""End to end with a real agent, on each cloud: a task waits in the local Determined
master; ``dynagent bridge`` (the command, on the master's host) publishes the pool to an
SQS queue on the local AWS, or a Pub/Sub topic on the emulator; the reconcile function's
code launches a machine; the boot script the cloud got boots on a real Docker Engine;
the agent registers with the master; the bridge publishes it; the next reconcile marks
the machine registered; the master places the task there.

The pools keep Determined's way of naming the master (``master_url: http://local-ipv4:
PORT``, ``internal-ip`` on GCP): the bridge reads the master host's address from its
metadata service (a stand-in on loopback here) and the boot script dials what it said.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from dynagent.aws.functions import AwsFunctions
from dynagent.aws.tags import MARK_TAGS
from dynagent.core.fleet import Mark
from dynagent.core.gpus import aws_gpus
from dynagent.files.config import load_config
from dynagent.gcp.functions import GcpFunctions
from dynagent.gcp.labels import MARK_LABELS
from dynagent.testing.aws.event_source import deliver_once
from dynagent.testing.aws.local_aws import LocalAws
from dynagent.testing.determined.master import DEFAULT_PASSWORD, AgentRegistration, LocalDetermined
from dynagent.testing.determined.scaled_pools import add_scaled_pools
from dynagent.testing.gcp.compute import LocalCompute
from dynagent.testing.gcp.pubsub import PubSubEmulator
from dynagent.testing.gcp.pubsub_events import deliver_pulled
from dynagent.testing.machines.agent_machine import AgentMachine
from dynagent.testing.machines.metadata_service import MetadataService, aws_metadata, gcp_metadata

from ..aws.helpers import (
    fifo_queue,
    image_id,
    managed_instances,
    pool_document,
    tags_of,
    write_config,
)
from ..gcp.helpers import gcp_pool_document, managed

POOL = "gpu"


def bridge_once(
    master: LocalDetermined, config: Path, to: str, env: dict[str, str], host: str = "ec2"
) -> None:
    """``dynagent bridge --once`` as an admin runs it next to the master."""
    done = subprocess.run(
        [sys.executable, "-m", "dynagent.cli.main", "bridge", "--master", master.url,
         "--config", str(config), "--to", to, "--once", "--master-host", host],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_snapshot_launches_a_machine_whose_agent_registers_and_runs_the_task(
    aws: LocalAws, ec2: Any, sqs: Any, master: LocalDetermined, machines_available: None,
    tmp_path: Path,
) -> None:  # fmt: skip
    config = write_config(
        tmp_path / "pools.yaml",
        pool_document(
            image_id(ec2), POOL, instance_type="g4dn.12xlarge", startup_script="",
            agent_docker_network="default", master_url=f"http://local-ipv4:{master.port}",
        ),
    )  # fmt: skip
    add_scaled_pools(master, load_config(config))
    trial = master.submit("trial-1", 4, POOL).task_id
    queue = fifo_queue(sqs, "e2e-boot.fifo")
    functions = AwsFunctions(
        load_config(config), ec2_for_region=lambda _: ec2, sqs=sqs, sleep=lambda _: None
    )
    # The master's host: its metadata says its private address is loopback here.
    listener = socket.create_server(("127.0.0.1", 0))
    host_metadata = MetadataService(
        "aws", aws_metadata("i-0master", "us-west-2a", private_ip="127.0.0.1"), listener
    )
    env = {
        **os.environ,
        **aws.env(),
        "DET_USER": "admin",
        "DET_PASS": DEFAULT_PASSWORD,
        "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{listener.getsockname()[1]}",
    }
    try:
        bridge_once(master, config, queue, env)
        assert deliver_once(sqs, queue, functions.reconcile_batch, aws.region)[0]
        (instance,) = managed_instances(ec2, POOL)
        instance_id = instance["InstanceId"]
        attribute = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        user_data = base64.b64decode(attribute["UserData"]["Value"]).decode()
        assert "-e DET_MASTER_HOST=127.0.0.1 " in user_data  # what the bridge published

        gpus = aws_gpus(instance["InstanceType"]) or 0
        with AgentMachine("aws", instance_id, gpus=gpus, master=master) as machine:
            machine.boot(user_data)
            machine.wait_for(master.registrations, timeout=30, what="the agent to register")
            assert master.registrations() == [AgentRegistration(instance_id, POOL, 4, "cuda")]

            bridge_once(master, config, queue, env)
            assert deliver_once(sqs, queue, functions.reconcile_batch, aws.region)[0]
            (seen,) = managed_instances(ec2, POOL)
            assert MARK_TAGS[Mark.REGISTERED] in tags_of(seen)

            master.schedule()
            assert master.task_state(trial) == "RUNNING"
            assert list(master.placement(trial)) == [instance_id]
            assert machine.agent_running()
    finally:
        host_metadata.close()


def test_on_gcp_a_snapshot_launches_a_vm_whose_agent_registers_and_runs_the_task(
    compute: LocalCompute, pubsub_emulator: PubSubEmulator, publisher: Any, subscriber: Any,
    names: Any, master: LocalDetermined, machines_available: None, tmp_path: Path,
) -> None:  # fmt: skip
    document = gcp_pool_document(
        POOL, startup_script="", agent_docker_network="default",
        master_url=f"http://internal-ip:{master.port}",
    )  # fmt: skip
    config = write_config(tmp_path / "pools.yaml", document)
    add_scaled_pools(master, load_config(config))
    trial = master.submit("trial-1", 4, POOL).task_id
    topic = pubsub_emulator.topic_path(names("e2e-boot"))
    subscription = pubsub_emulator.subscription_path(names("e2e-boot"))
    publisher.create_topic(name=topic)
    subscriber.create_subscription(
        request={"name": subscription, "topic": topic, "enable_message_ordering": True}
    )
    instances, operations = compute.instances_client(), compute.zone_operations_client()
    functions = GcpFunctions(
        load_config(config),
        instances=lambda: instances,
        operations=lambda: operations,
        sleep=lambda _: None,
    )
    listener = socket.create_server(("127.0.0.1", 0))
    values = {**gcp_metadata("det-master", "us-central1-a"),
              "instance/network-interfaces/0/ip": "127.0.0.1"}  # fmt: skip
    host_metadata = MetadataService("gcp", values, listener)
    env = {
        **os.environ,
        **pubsub_emulator.env(),
        "DET_USER": "admin",
        "DET_PASS": DEFAULT_PASSWORD,
        "GCE_METADATA_HOST": f"127.0.0.1:{listener.getsockname()[1]}",
    }
    try:
        bridge_once(master, config, topic, env, host="gce")
        assert deliver_pulled(subscriber, subscription, topic, functions.reconcile_event) == 1
        (vm,) = managed(compute, POOL)
        (script,) = [i["value"] for i in vm["metadata"]["items"] if i["key"] == "startup-script"]
        assert "-e DET_MASTER_HOST=127.0.0.1 " in script  # what the bridge published

        with AgentMachine("gcp", vm["name"], gpus=4, master=master) as machine:
            machine.boot(script)
            machine.wait_for(master.registrations, timeout=30, what="the agent to register")
            assert master.registrations() == [AgentRegistration(vm["name"], POOL, 4, "cuda")]

            bridge_once(master, config, topic, env, host="gce")
            assert deliver_pulled(subscriber, subscription, topic, functions.reconcile_event)
            (seen,) = managed(compute, POOL)
            assert MARK_LABELS[Mark.REGISTERED] in seen["labels"]

            master.schedule()
            assert master.task_state(trial) == "RUNNING"
            assert list(master.placement(trial)) == [vm["name"]]
    finally:
        host_metadata.close()
