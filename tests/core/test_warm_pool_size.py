"""``warm_pool.max_stopped: auto``: no count; each stopped machine is kept until its
disk has billed what one start of it saves over a launch (the boot's extra minutes at
its price), at most max_stopped_period."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from dynagent.core.config import Pool
from dynagent.core.decide import decide
from dynagent.core.decide.warm_pool_size import kept_for
from tests.builders import NOW, fleet, idle, pool, snapshot

from .test_warm_pool import idle_agent, stopped

V100S = ["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"]


def auto_pool(**warm: str) -> Pool:
    return pool(
        instance_type="p3.16xlarge",
        offerings={"instance_types": V100S},
        max_instances=100,
        warm_pool={"max_stopped": "auto", **warm},
    )


def test_each_machine_is_kept_for_what_one_start_of_it_saves() -> None:
    provider = auto_pool().provider
    # 270 s of a $3.06 machine is $0.23: ten and a half hours of a $0.022 disk.
    small, large = kept_for(provider, 3.06), kept_for(provider, 24.48)
    assert timedelta(hours=10) < small < timedelta(hours=11)
    assert large == 8 * small
    # Never past the admin's period; a fixed max_stopped keeps the period as it is.
    assert kept_for(auto_pool(max_stopped_period="24h").provider, 24.48) == timedelta(hours=24)
    fixed = pool(warm_pool={"max_stopped": 5, "max_stopped_period": "48h"}).provider
    assert kept_for(fixed, 3.06) == timedelta(hours=48)


def test_a_small_machine_goes_at_its_break_even_a_large_one_stays() -> None:
    of = auto_pool()
    small = replace(stopped("s-small", of, hours_ago=11), instance_type="p3.2xlarge")
    large = replace(stopped("s-large", of, hours_ago=11), instance_type="p3.16xlarge")
    young = replace(stopped("s-young", of, hours_ago=9), instance_type="p3.2xlarge")
    plan = decide(of, fleet(small, large, young), None, NOW)
    assert [t.instance_id for t in plan.terminations] == ["s-small"]
    assert "max_stopped_period 10h" in plan.terminations[0].reason


def test_no_count_bounds_the_stopped_machines() -> None:
    of = auto_pool()
    machines = [replace(stopped(f"s-{n}", of), instance_type="p3.8xlarge") for n in range(12)]
    agents = [replace(idle_agent(f"i-{n}"), instance_type="p3.8xlarge") for n in range(5)]
    shot = snapshot(agents=[idle(f"i-{n}") for n in range(5)])
    plan = decide(of, fleet(*machines, *agents), shot, NOW)
    # Twelve stopped already and five more reaped: all seventeen kept.
    assert plan.terminations == () and len(plan.stops) == 5
