"""The bridge's check that the master admits the work dynagent scales for, against the
local master restarted with a master.yaml: a pool the master provisions itself or has no
provider for stops the bridge with the fix; counts that differ warn once; the pools as
``dynagent master-config`` writes them pass. Each case runs with one pool and with three
(the neighbours as master-config writes them), as an admin (who may read the master's
config) and as a user (who reads the resource pools)."""

from __future__ import annotations

from typing import Any

import pytest

from dynagent.bridge.client import Credentials, MasterClient
from dynagent.bridge.loop import Bridge, BridgeRefused
from dynagent.core.admission import ADMISSION_REGION
from dynagent.files.master_config import master_pools
from dynagent.testing.determined.master import DEFAULT_PASSWORD, LocalDetermined

from .test_bridge import POOL, Clock, Collected, Layout, Log

FIX = "dynagent master-config --config POOLS.yaml"


@pytest.fixture(params=[False, True], ids=["one pool", "three pools"])
def layout(request: pytest.FixtureRequest) -> Layout:
    return Layout(neighbours=request.param)


@pytest.fixture(params=["admin", "determined"], ids=["admin", "user"])
def user(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def restart(master: LocalDetermined, layout: Layout, ours: dict[str, Any], **top: Any) -> None:
    """The master restarts with a100 as given and the neighbours as master-config writes
    them."""
    config = layout.config()
    others = [p for p in master_pools(config) if p["pool_name"] != POOL]
    master.configure({**top, "resource_pools": [{"pool_name": POOL, **ours}, *others]})


def provider(instance_type: str, region: str = ADMISSION_REGION, **fields: Any) -> dict[str, Any]:
    aws = {"type": "aws", "region": region, "image_id": "ami-12345678", "ssh_key_name": "k"}
    return {"provider": {**aws, "instance_type": instance_type, **fields}}


def bridge_as(master: LocalDetermined, layout: Layout, user: str) -> tuple[Bridge, Collected]:
    sink = Collected()
    client = MasterClient(master.url, Credentials(user, DEFAULT_PASSWORD))
    return Bridge(layout.config(), client, sink, clock=Clock(), logger=Log()), sink


def warnings_of(bridge: Bridge) -> list[str]:
    lines: list[str] = bridge.logger.lines
    return [line.removeprefix("warning ") for line in lines if line.startswith("warning")]


def test_the_pools_master_config_writes_pass_without_a_warning(
    master: LocalDetermined, layout: Layout, user: str
) -> None:
    master.configure({"resource_pools": master_pools(layout.config())})
    bridge, sink = bridge_as(master, layout, user)
    bridge.run_once()
    assert sorted(s.pool for s in sink.snapshots) == sorted(layout.names)
    assert warnings_of(bridge) == []


def test_a_pool_the_master_provisions_itself_stops_the_bridge(
    master: LocalDetermined, layout: Layout, user: str
) -> None:
    restart(master, layout, provider("p4d.24xlarge", region="us-west-2"))
    bridge, sink = bridge_as(master, layout, user)
    with pytest.raises(BridgeRefused) as refused:
        bridge.run_once()
    message = str(refused.value)
    assert (
        f"pool {POOL!r} is provisioned by the master itself (aws provider in us-west-2)" in message
    )
    assert FIX in message
    assert "v100" not in message and "t4" not in message
    assert sink.snapshots == []


def test_a_pool_without_a_provider_in_the_master_stops_the_bridge(
    master: LocalDetermined, layout: Layout, user: str
) -> None:
    restart(master, layout, {})
    master.add_agent("i-1", POOL, 8)  # connected agents do not make it admit beyond them
    bridge, sink = bridge_as(master, layout, user)
    with pytest.raises(BridgeRefused) as refused:
        bridge.run_once()
    message = str(refused.value)
    assert f"pool {POOL!r} has no provider in the master's config" in message
    assert "request unfulfillable" in message and FIX in message
    assert sink.snapshots == []


def test_a_pool_whose_master_counts_no_slots_stops_the_bridge(
    master: LocalDetermined, layout: Layout, user: str
) -> None:
    restart(master, layout, provider("m5.large"))  # no GPU, no cpu_slots_allowed: 0 slots
    bridge, _ = bridge_as(master, layout, user)
    with pytest.raises(BridgeRefused, match="the master counts 0 slots per agent"):
        bridge.run_once()


@pytest.mark.parametrize(
    ("master_pool", "expected"),
    [
        (provider("g4dn.12xlarge", max_instances=5),
         ["counts 4 slots per agent and dynagent launches machines of up to 8",
          "admits experiments of up to 20 slots (5 x 4); dynagent reaches 64"]),
        (provider("p4d.24xlarge", max_instances=2),
         ["admits experiments of up to 16 slots (2 x 8); dynagent reaches 64"]),
        (provider("big-box", instance_slots=16, max_instances=5),
         ["admits single-agent work of up to 16 slots, and dynagent's largest machine has 8",
          "admits experiments of up to 80 slots, and dynagent reaches 64"]),
    ],
    ids=["fewer slots per agent", "fewer instances", "more slots per agent"],
)  # fmt: skip
def test_counts_that_differ_warn_once_and_the_bridge_publishes(
    master: LocalDetermined, layout: Layout, user: str, master_pool: Any, expected: list[str]
) -> None:
    restart(master, layout, master_pool)
    bridge, sink = bridge_as(master, layout, user)
    bridge.run_once()
    bridge.run_once()
    warned = warnings_of(bridge)
    assert len(warned) == len(expected)
    for text, message in zip(expected, warned, strict=True):
        assert text in message and FIX in message and message.startswith(f"pool {POOL!r}")
    assert POOL in {s.pool for s in sink.snapshots}


def test_launch_error_false_lets_bigger_experiments_in_where_the_master_says_so(
    master: LocalDetermined, layout: Layout, user: str
) -> None:
    """Only an admin reads launch_error; a user's bridge assumes Determined's default."""
    restart(master, layout, provider("p4d.24xlarge", max_instances=2), launch_error=False)
    bridge, _ = bridge_as(master, layout, user)
    bridge.run_once()
    capacity = [m for m in warnings_of(bridge) if "admits experiments of up to 16" in m]
    assert len(capacity) == (0 if user == "admin" else 1)
    assert bridge.launch_error is (False if user == "admin" else None)
