"""The EC2 adapter over the wire: boto3 against the local AWS (moto's server on loopback)."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import pytest

from dynagent.aws.ec2 import Ec2Provider, client_token
from dynagent.core.fleet import InstanceState, Mark, RequestState
from dynagent.core.plan import Adoption, Cancellation, Launch, MarkWrite, Plan, Termination
from dynagent.run.provider import LaunchNotVisible
from dynagent.run.reconcile import reconcile

from .helpers import (
    config,
    image_id,
    lookalike,
    managed_instances,
    now,
    pool_document,
    snapshot,
    tags_of,
)


def provider_for(ec2: Any, **fields: Any) -> Ec2Provider:
    cfg = config(pool_document(image_id(ec2), **fields))
    return Ec2Provider(cfg.pool("a100"), ec2, cfg.settings, sleep=lambda _: None)


def launches(count: int, key: str) -> Plan:
    """A plan that only launches ``count`` instances under ``key``."""
    return Plan(
        pool="a100",
        launch_key=key,
        launch_at=now(),
        launches=tuple(Launch(reason="test") for _ in range(count)),
    )


def test_launch_tags_instances_and_volumes_and_requires_imdsv2(ec2: Any) -> None:
    provider = provider_for(ec2, custom_tags=[{"key": "team", "value": "vision"}])
    result = provider.launch(launches(2, "a100:7"))

    instances = managed_instances(ec2)
    assert sorted(result.started) == sorted(i["InstanceId"] for i in instances)
    for instance in instances:
        tags = tags_of(instance)
        assert tags["managed-by"] == "dynagent-test"
        assert tags["dynagent:pool"] == "a100"
        assert tags["Name"] == "determined-ai-agent"
        assert tags["team"] == "vision"
        assert tags["dynagent:launch-key"] == "a100:7"
        assert instance["MetadataOptions"]["HttpTokens"] == "required"
        # Task containers on a bridge network are one hop further from the metadata service.
        assert instance["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
        assert instance["InstanceType"] == "p4d.24xlarge"
    volumes = ec2.describe_volumes(Filters=[{"Name": "tag:dynagent:pool", "Values": ["a100"]}])[
        "Volumes"
    ]
    assert volumes, "root volumes carry the pool's tags too"


def test_user_data_runs_startup_script_then_the_agent(ec2: Any) -> None:
    provider = provider_for(ec2, startup_script="echo from-the-admin")
    (instance_id,) = provider.launch(launches(1, "a100:1")).started
    raw = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    script = base64.b64decode(raw["UserData"]["Value"]).decode()
    assert "echo from-the-admin" in script
    assert script.index("startup_script") < script.index("docker run")
    assert "DET_MASTER_HOST=10.0.0.5" in script and "DET_MASTER_PORT=8080" in script
    assert "DET_RESOURCE_POOL=a100" in script
    assert "--network determined" in script
    # The agent id is the instance id: the snapshot's agents then name their instances.
    assert "AGENT_ID=$(curl" in script and "latest/meta-data/instance-id" in script
    assert '-e DET_AGENT_ID="$AGENT_ID"' in script


def test_same_launch_key_never_launches_twice(aws: Any, ec2: Any) -> None:
    # The local AWS honours ClientToken as EC2 does (moto alone ignores it).
    provider = provider_for(ec2)
    first = provider.launch(launches(3, "a100:42"))
    again = provider.launch(launches(3, "a100:42"))
    assert again.started == first.started
    assert len(managed_instances(ec2)) == 3


def test_a_replay_that_plans_fewer_instances_launches_none(ec2: Any) -> None:
    provider = provider_for(ec2)
    provider.launch(launches(3, "a100:42"))
    replay = provider.launch(launches(1, "a100:42"))
    assert replay.replayed and not replay.started
    assert len(managed_instances(ec2)) == 3


def test_a_new_snapshot_launches_anew(ec2: Any) -> None:
    provider = provider_for(ec2)
    provider.launch(launches(1, "a100:1"))
    provider.launch(launches(1, "a100:2"))
    assert len(managed_instances(ec2)) == 2
    assert client_token("a100:1") != client_token("a100:2")
    assert len(client_token("a" * 300)) <= 64


def test_refused_launch_is_reported_not_raised(ec2: Any) -> None:
    provider = provider_for(ec2, image_id="ami-00000000000000000")
    result = provider.launch(launches(1, "a100:1"))
    assert result.error and "AMI" in result.error.upper()
    assert not result.started


def test_observe_reads_states_marks_and_only_the_managed_pool(ec2: Any) -> None:
    provider = provider_for(ec2)
    ours = provider.launch(launches(2, "a100:1")).started
    other = provider_for(ec2, tag_value="someone-else")  # same pool name, other owner
    other.launch(launches(1, "a100:1x"))
    ec2.stop_instances(InstanceIds=[ours[1]])
    when = now() - timedelta(minutes=3)
    provider.write_marks((MarkWrite(Mark.IDLE_SINCE, when, (ours[0],), "test"),))

    fleet = provider.observe()
    by_id = {i.id: i for i in fleet.instances}
    assert set(by_id) == set(ours)
    assert by_id[ours[0]].idle_since == when
    assert by_id[ours[1]].state in (InstanceState.STOPPING, InstanceState.STOPPED)


def test_observe_reads_every_page(aws: Any, ec2: Any) -> None:
    provider = provider_for(ec2)
    for seq in range(7):  # seven reservations
        provider.launch(launches(1, f"a100:{seq}"))
    provider.page_size = 3
    aws.clear_calls()
    assert len(provider.observe().instances) == 7
    assert aws.calls().count("DescribeInstances") == 3


def test_one_tag_write_per_distinct_value(aws: Any, ec2: Any) -> None:
    provider = provider_for(ec2)
    ids = provider.launch(launches(4, "a100:1")).started
    aws.clear_calls()
    when = now()
    provider.write_marks(
        (
            MarkWrite(Mark.REGISTERED, when, ids, "agent connected"),
            MarkWrite(Mark.IDLE_SINCE, when, ids[:2], "agent idle"),
        )
    )
    assert aws.calls() == ["CreateTags", "CreateTags"]
    provider.write_marks((MarkWrite(Mark.IDLE_SINCE, None, ids[:2], "agent busy"),))
    assert aws.calls()[-1] == "DeleteTags"
    assert all(i.idle_since is None for i in provider.observe().instances)


def test_terminate_in_chunks_and_not_found_is_done(aws: Any, ec2: Any) -> None:
    provider = provider_for(ec2)
    ids = provider.launch(launches(5, "a100:1")).started
    provider.max_ids_per_call = 2
    aws.clear_calls()
    provider.terminate(tuple(Termination(i, "test") for i in ids))
    assert aws.calls().count("TerminateInstances") == 3
    assert managed_instances(ec2) == []
    # Terminating again, or an id EC2 never had, is not an error.
    provider.terminate((Termination("i-0123456789abcdef0", "gone"),))


def test_spot_requests_are_tagged_adopted_and_cancelled(aws: Any, ec2: Any) -> None:
    provider = provider_for(ec2, spot=True, spot_max_price="3.50")
    (request_id,) = provider.launch(launches(1, "a100:1")).started
    request = ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[request_id])[
        "SpotInstanceRequests"
    ][0]
    assert tags_of(request)["managed-by"] == "dynagent-test"
    assert request["Type"] == "one-time"
    assert request.get("ValidUntil") is not None

    fleet = provider.observe()
    (observed,) = fleet.spot_requests
    assert observed.state is RequestState.ACTIVE and observed.instance_id
    assert fleet.instances == ()  # EC2 does not copy the request's tags to its instance

    provider.adopt((Adoption(request_id, observed.instance_id),))
    (instance,) = provider.observe().instances
    assert instance.id == observed.instance_id
    # RequestSpotInstances takes no metadata options: adoption sets every launch's.
    (described,) = managed_instances(ec2)
    assert described["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
    assert described["MetadataOptions"]["HttpTokens"] == "required"

    provider.cancel((Cancellation(request_id, "test"), Cancellation("sir-00000000", "gone")))


def test_spot_launch_key_is_idempotent_too(ec2: Any) -> None:
    provider = provider_for(ec2, spot=True)
    plan = launches(2, "a100:9")
    first = provider.launch(plan)
    again = provider.launch(plan)
    assert again.started == first.started
    assert len(provider.observe().spot_requests) == 2


def test_waits_until_launches_are_visible(aws: Any, ec2: Any) -> None:
    provider = provider_for(ec2)
    aws.hide_new_instances(describes=2)  # EC2 is eventually consistent
    waits: list[float] = []
    provider.sleep = waits.append
    started = provider.launch(launches(1, "a100:1")).started
    assert len(waits) == 2
    assert [i.id for i in provider.observe().instances] == list(started)


def test_gives_up_waiting_with_an_error_worth_retrying(aws: Any, ec2: Any) -> None:
    provider = provider_for(ec2)
    aws.hide_new_instances(describes=1000)
    ticks = iter(range(0, 10_000, 10))
    start = now()
    provider.clock = lambda: start + timedelta(seconds=next(ticks))
    with pytest.raises(LaunchNotVisible):
        provider.launch(launches(1, "a100:1"))


def test_reconcile_never_touches_an_instance_without_the_managed_pair(ec2: Any) -> None:
    # Same name and pool tag, no managed pair: must survive anything the plan does.
    other = lookalike(ec2)
    cfg = config(pool_document(image_id(ec2), max_instances=0))
    pool = cfg.pool("a100")
    provider = Ec2Provider(pool, ec2, cfg.settings)
    outcome = reconcile(pool, provider, snapshot(1, agents=[(other, 8, 0)]), now())
    assert outcome.plan is not None and outcome.plan.changes_nothing
    state = ec2.describe_instances(InstanceIds=[other])["Reservations"][0]
    assert state["Instances"][0]["State"]["Name"] in ("stopping", "stopped")
    assert "dynagent:registered" not in tags_of(state["Instances"][0])


def test_clients_use_the_standard_retry_mode() -> None:
    from dynagent.aws.clients import ec2_client, sqs_client

    for client in (ec2_client("us-west-2"), sqs_client("us-west-2")):
        assert client.meta.config.retries["mode"] == "standard"


def test_a_boot_script_over_ec2s_user_data_limit_is_refused_saying_what_to_shorten(
    ec2: Any,
) -> None:
    provider = provider_for(ec2, startup_script="echo x\n" * 3000)
    result = provider.launch(launches(1, "a100:9"))
    assert result.started == ()
    assert result.error and "EC2 takes at most 16384" in result.error
    assert "startup_script" in result.error
    assert managed_instances(ec2) == []
