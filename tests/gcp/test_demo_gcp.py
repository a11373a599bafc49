"""``dynagent demo --cloud gcp``: the same day on the Compute fake and the Pub/Sub emulator."""

from __future__ import annotations

import io
import re

import pytest

from dynagent.demo.run import run_demo
from dynagent.testing.gcp import pubsub

from . import emulators


def test_the_gcp_demo_tells_the_same_story(pytestconfig: pytest.Config) -> None:
    emulators.require(pubsub.available())
    out = io.StringIO()
    assert run_demo(out=out, cloud="gcp") == 0
    text = out.getvalue()

    assert "Pub/Sub emulator on 127.0.0.1:" in text
    launch = "launch 1 n1-standard-32 + 4 x nvidia-tesla-t4 on-demand in us-central1-a ($2.92/h)"
    assert f"reconcile {launch}: pending tasks: trial-1" in text
    assert re.search(r"agent +det-agent-gpu-t4-\S+ registered", text)
    assert "unschedulable trial-odd (6 slots)" in text
    assert "never registered (max_agent_starting_period 10m)" in text
    assert "pool gpu-t4: n1-standard-32 + 4 x nvidia-tesla-t4 (4 GPUs, $2.92/h" in text
    assert "does not register: the broken boot, on purpose" in text
    assert re.search(r"Bill: [\d.]+ machine-hours at \$2\.92/h", text)
    assert "dead-letter topic: version 9 is not one this function knows" in text
    assert re.search(r"sweep +terminate det-agent-gpu-t4-\S+: idle for 11m ", text)
    table = text.split("Fleet at the end")[1].split("Dead letters")[0]
    rows = [line for line in table.splitlines() if line.strip().startswith("det-agent-")]
    assert len(rows) == 6 and all(" deleted " in row for row in rows)
    assert text.rstrip().endswith("local GCP stopped.")
