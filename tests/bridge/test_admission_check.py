"""The bridge's check that the master admits the work dynagent scales for, against the
local master: a pool the master provisions itself or has no provider for stops the bridge
with the fix; counts that differ warn once; the pools as ``dynagent master-config``
writes them pass. Each case runs with one pool and with three."""

from __future__ import annotations

from typing import Any

import pytest

from dynagent.admission import ADMISSION_REGION
from dynagent.bridge.loop import BridgeRefused
from dynagent.testing.determined import LocalDetermined
from dynagent.testing.scaled_pools import add_scaled_pools

from .test_bridge import POOL, Layout, bridge_for

FIX = "dynagent master-config --config POOLS.yaml"


@pytest.fixture(params=[False, True], ids=["one pool", "three pools"])
def layout(request: pytest.FixtureRequest) -> Layout:
    return Layout(neighbours=request.param)


def scaled_except_ours(master: LocalDetermined, layout: Layout) -> None:
    """The other pools of a three-pool run, as master-config writes them."""
    if not layout.neighbours:
        return
    config = layout.config()
    others = {name: pool for name, pool in config.pools.items() if name != POOL}
    add_scaled_pools(master, config.model_copy(update={"pools": others}))


def warnings_of(bridge: Any) -> list[str]:
    return [
        line.removeprefix("warning ") for line in bridge.logger.lines if line.startswith("warning")
    ]


def test_the_pools_master_config_writes_pass_without_a_warning(
    master: LocalDetermined, layout: Layout
) -> None:
    add_scaled_pools(master, layout.config())
    bridge, sink = bridge_for(master, layout.config())
    bridge.run_once()
    assert sorted(s.pool for s in sink.snapshots) == sorted(layout.names)
    assert warnings_of(bridge) == []


def test_a_pool_the_master_provisions_itself_stops_the_bridge(
    master: LocalDetermined, layout: Layout
) -> None:
    master.add_pool(POOL, "AWS", slots_per_agent=8, location="us-west-2", max_agents=5)
    scaled_except_ours(master, layout)
    bridge, sink = bridge_for(master, layout.config())
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
    master: LocalDetermined, layout: Layout
) -> None:
    master.add_pool(POOL, "STATIC")
    master.add_agent("i-1", POOL, 8)  # connected agents do not make it admit beyond them
    scaled_except_ours(master, layout)
    bridge, sink = bridge_for(master, layout.config())
    with pytest.raises(BridgeRefused) as refused:
        bridge.run_once()
    message = str(refused.value)
    assert f"pool {POOL!r} has no provider in the master's config" in message
    assert "request unfulfillable" in message and FIX in message
    assert sink.snapshots == []


def test_a_pool_whose_master_counts_no_slots_stops_the_bridge(
    master: LocalDetermined, layout: Layout
) -> None:
    master.add_pool(
        POOL, "AWS", slots_per_agent=0, location=ADMISSION_REGION, instance_type="m5.large",
        max_agents=5,
    )  # fmt: skip
    scaled_except_ours(master, layout)
    bridge, _ = bridge_for(master, layout.config())
    with pytest.raises(BridgeRefused, match="the master counts 0 slots per agent"):
        bridge.run_once()


@pytest.mark.parametrize(
    ("slots", "max_agents", "expected"),
    [
        (4, 5, ["counts 4 slots per agent and dynagent launches machines of up to 8",
                "admits experiments of up to 20 slots (5 x 4); dynagent reaches 64"]),
        (8, 2, ["admits experiments of up to 16 slots (2 x 8); dynagent reaches 64"]),
        (16, 5, ["admits single-agent work of up to 16 slots, and dynagent's largest "
                 "machine has 8", "admits experiments of up to 80 slots, and dynagent "
                 "reaches 64"]),
    ],
    ids=["fewer slots per agent", "fewer instances", "more slots per agent"],
)  # fmt: skip
def test_counts_that_differ_warn_once_and_the_bridge_publishes(
    master: LocalDetermined, layout: Layout, slots: int, max_agents: int, expected: list[str]
) -> None:
    master.add_pool(
        POOL, "AWS", slots_per_agent=slots, location=ADMISSION_REGION, max_agents=max_agents
    )
    scaled_except_ours(master, layout)
    bridge, sink = bridge_for(master, layout.config())
    bridge.run_once()
    bridge.run_once()
    warned = warnings_of(bridge)
    assert len(warned) == len(expected)
    for text, message in zip(expected, warned, strict=True):
        assert text in message and FIX in message and message.startswith(f"pool {POOL!r}")
    assert POOL in {s.pool for s in sink.snapshots}
