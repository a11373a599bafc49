"""``dynagent demo`` end to end: its own local AWS, the real publisher, queue and functions."""

from __future__ import annotations

import io
import re
import socket
from urllib.parse import urlsplit

from dynagent.demo.run import run_demo


def test_the_demo_tells_the_whole_story_and_cleans_up() -> None:
    out = io.StringIO()
    assert run_demo(out=out) == 0
    text = out.getvalue()

    assert "reconcile launch 1 p3.8xlarge on-demand ($12.24/h): pending tasks: trial-1" in text
    # Two whole agents, and a third in place of the one that never registers.
    assert text.count("launch 1 p3.8xlarge on-demand ($12.24/h): pending tasks: trial-2") == 3
    assert re.search(r"agent +i-[0-9a-f]+ registered", text)
    assert "unschedulable trial-odd (6 slots)" in text
    assert "never registered (max_agent_starting_period 10m)" in text
    # It says what it shows: the pool first, the broken boot as meant, the bill last.
    assert "pool gpu-a: p3.8xlarge (4 GPUs, $12.24/h on-demand), 0 to 4 machines" in text
    assert "machine number 3 is broken on purpose" in text
    assert re.search(r"agent +i-[0-9a-f]+ does not register: the broken boot, on purpose", text)
    assert "(launch key: the snapshot a launch answered, pool:seq;" in text
    bill = re.search(
        r"Bill: ([\d.]+) machine-hours at \$12\.24/h = \$([\d,.]+) .*ran ([\d.]+) of", text
    )
    assert bill, text
    hours, dollars, used = float(bill[1]), float(bill[2].replace(",", "")), float(bill[3])
    assert abs(dollars - hours * 12.24) <= 0.05 * 12.24  # hours are printed to 0.1
    assert 0 < used < hours * 4
    assert "dead-letter queue: version 9 is not one this function knows" in text
    # The master went quiet: the sweep alone reaps the last idle agent, at its first
    # minute past the idle period.
    assert re.search(r"sweep +terminate i-[0-9a-f]+: idle for 11m ", text)

    table = text.split("Fleet at the end")[1].split("Dead-letter queue")[0]
    rows = [line for line in table.splitlines() if line.strip().startswith("i-")]
    assert len(rows) == 6
    assert all(" terminated " in row for row in rows)

    # Every process and port it started is gone.
    assert text.rstrip().endswith("local AWS stopped.")
    endpoint = re.search(r"local AWS \(moto\) on (\S+)", text)
    assert endpoint
    port = urlsplit(endpoint.group(1)).port
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port or 0)) != 0
