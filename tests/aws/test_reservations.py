"""Reserved capacity on the local AWS, through the Lambda functions: a pool fills its
targeted ODCR before it buys, keeps its idle machines there when demand falls, leaves
another pool's open reservation alone; a Capacity Block is launched into from its start
in its own market, counted out near its end, and its work moves elsewhere."""

from __future__ import annotations

import io
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from dynagent.aws.functions import AwsFunctions
from dynagent.cli.status_command import AwsSource, statuses, write
from dynagent.testing.aws.local_aws import LocalAws

from .helpers import managed_instances
from .test_ec2_repack import two_subnets
from .test_warm_pool import Pass, functions_for, idle_for

SIX = [(f"exp-{n}", 8) for n in range(6)]


def in_reservation(ec2: Any, reservation_id: str) -> list[str]:
    return sorted(
        i["InstanceId"]
        for i in managed_instances(ec2)
        if i.get("CapacityReservationId") == reservation_id
    )


def free_places(ec2: Any, reservation_id: str) -> int:
    (found,) = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])[
        "CapacityReservations"
    ]
    return int(found["AvailableInstanceCount"])


def two_subnet_pool(aws: LocalAws, ec2: Any, sqs: Any, in_subnet: int) -> tuple[str, Pass]:
    """A pool of p4d.24xlarge in two subnets beside an ODCR of 4 in one subnet's zone:
    the reservation, and passes of its snapshots."""
    subnets = two_subnets(ec2)
    offerings = {"instance_types": ["p4d.24xlarge"], "subnet_ids": [s["SubnetId"] for s in subnets]}
    zone = subnets[in_subnet]["AvailabilityZone"]
    reservation = aws.create_capacity_reservation("p4d.24xlarge", zone, 4)
    fields = {"offerings": offerings, "max_instances": 8, "reservations": [reservation]}
    return reservation, Pass(sqs, functions_for(ec2, **fields))


def test_work_for_six_machines_fills_a_targeted_odcr_of_four_and_buys_two(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    # In the second subnet's zone, so the pool must pick that subnet to use it.
    reservation, send = two_subnet_pool(aws, ec2, sqs, in_subnet=1)

    send(pending=SIX)

    machines = managed_instances(ec2)
    assert len(machines) == 6
    assert len(in_reservation(ec2, reservation)) == 4
    bought = [m for m in machines if "CapacityReservationId" not in m]
    assert len(bought) == 2
    assert free_places(ec2, reservation) == 0
    calls = Counter(aws.calls("ec2"))
    assert calls["RunInstances"] == 1  # one call for the reservation's four places
    assert calls["CreateFleet"] >= 1  # the two bought as the pool's offerings are

    # The same snapshot again launches nothing: the reserved machines count.
    aws.clear_calls()
    send(pending=SIX)
    assert not {"RunInstances", "CreateFleet"} & set(aws.calls("ec2"))


def test_a_pool_of_one_type_uses_its_reservation_and_buys_beside_it(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    reservation = aws.create_capacity_reservation("p4d.24xlarge", f"{aws.region}a", 1)
    send = Pass(sqs, functions_for(ec2, reservations=[reservation]))

    send(pending=SIX[:2])

    assert len(managed_instances(ec2)) == 2
    assert len(in_reservation(ec2, reservation)) == 1


def test_when_demand_falls_the_bought_machines_go_and_the_reserved_stay(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    reservation, send = two_subnet_pool(aws, ec2, sqs, in_subnet=0)
    send(pending=SIX)
    agents = [(m["InstanceId"], 8, 0) for m in managed_instances(ec2)]
    send(agents=agents)
    for instance_id, _, _ in agents:
        idle_for(ec2, instance_id, minutes=30)

    send(agents=agents)

    left = sorted(m["InstanceId"] for m in managed_instances(ec2))
    assert left == in_reservation(ec2, reservation)
    assert len(left) == 4


def test_a_launch_beside_another_pool_s_free_open_reservation_does_not_take_it(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    theirs = aws.create_capacity_reservation("p4d.24xlarge", f"{aws.region}a", 2, match="open")
    send = Pass(sqs, functions_for(ec2))

    send(pending=SIX[:1])

    (machine,) = managed_instances(ec2)
    assert "CapacityReservationId" not in machine
    assert machine["CapacityReservationSpecification"] == {"CapacityReservationPreference": "none"}
    assert free_places(ec2, theirs) == 2


def test_a_capacity_block_is_used_from_its_start_and_its_work_moves_before_its_end(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    zone = f"{aws.region}a"
    starts = datetime.now(UTC) + timedelta(seconds=2)
    block = aws.create_capacity_block("p4d.24xlarge", zone, 2, starts, starts + timedelta(days=1))
    functions = functions_for(ec2, reservations=[block])
    send = Pass(sqs, functions)

    # Before its start, the work launches elsewhere.
    send(pending=SIX[:1])
    (first,) = managed_instances(ec2)
    assert "CapacityReservationId" not in first

    # From its start, the next pass launches into it, in the capacity-block market (the
    # local AWS refuses a block's launch in any other).
    time.sleep(max(0.0, (starts - datetime.now(UTC)).total_seconds()) + 0.2)
    send(pending=SIX[:3])
    assert len(in_reservation(ec2, block)) == 2
    in_block = in_reservation(ec2, block)

    # Its agents run work; the block's end comes within drain_before_reservation_end.
    running = [(first["InstanceId"], 8, 8)] + [(i, 8, 8) for i in in_block]
    send(agents=running)
    aws.set_capacity_reservation_end(block, datetime.now(UTC) + timedelta(minutes=35))
    # A cold function reads the reservation again (a warm one within a minute).
    send.functions = AwsFunctions(
        functions.config, ec2_for_region=lambda _: ec2, sleep=lambda _: None
    )
    aws.clear_calls()
    send(pending=[("late", 8)], agents=running)
    late = [m for m in managed_instances(ec2) if m["InstanceId"] not in in_block]
    assert len(late) == 2  # the first machine and one for the late task
    assert all("CapacityReservationId" not in m for m in late)
    # Not terminated by dynagent: their tasks run until EC2 takes the machines back.
    assert set(in_block) <= {m["InstanceId"] for m in managed_instances(ec2)}
    assert "TerminateInstances" not in aws.calls("ec2")

    # EC2 takes the block's machines back; their tasks are queued again and get machines
    # elsewhere in the next pass.
    aws.set_capacity_reservation_end(block, datetime.now(UTC) + timedelta(minutes=20))
    requeued = [(f"exp-{n}", 8) for n in (1, 2)]
    send(pending=[*requeued, ("late", 8)], agents=[(first["InstanceId"], 8, 8)])
    machines = managed_instances(ec2)
    assert not set(in_block) & {m["InstanceId"] for m in machines}
    assert all("CapacityReservationId" not in m for m in machines)
    assert len(machines) == 4  # the first, the late task's, and two for the requeued


def test_status_lists_each_reservation_with_the_pool_s_machines_in_it(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    reservation = aws.create_capacity_reservation("p4d.24xlarge", f"{aws.region}a", 4)
    functions = functions_for(ec2, reservations=[reservation])
    send = Pass(sqs, functions)
    send(pending=SIX[:3])

    source = AwsSource(functions.config, lambda _: ec2, sqs, send.queue)
    pools = list(functions.config.pools.values())
    (view,) = statuses(functions.config, pools, {"aws": source}, datetime.now(UTC))

    (shown,) = view["reservations"]
    assert (shown["id"], shown["kind"], shown["total"], shown["free"]) == (
        reservation,
        "targeted",
        4,
        1,
    )
    assert shown["pool_machines"] == 3 and shown["usable"]
    text = io.StringIO()
    write([view], as_json=False, out=text)
    (line,) = [ln for ln in text.getvalue().splitlines() if ln.startswith("  reservation ")]
    assert line == (
        f"  reservation {reservation} (targeted, 4 x p4d.24xlarge in {aws.region}a, 1 free): "
        "3 of the pool's machines"
    )
