"""End to end from Determined's own CLI: ``det`` submits a notebook, commands of 1 and 8
slots, a shell and a 16-slot experiment to pools with no agent; the local master,
restarted with what ``dynagent master-config`` prints, admits them as a stock master
does; the bridge publishes them, the reconcile function launches, the agents register,
and every task runs. Without the fragment the same submissions are refused, as a stock
master refuses them, and the bridge will not run.

``det`` runs from ``.venv-det`` (``make test`` builds it first); elsewhere these tests
skip, saying why, and fail with ``DYNAGENT_REQUIRE_EMULATORS=1``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dynagent.bridge.client import Credentials, MasterClient
from dynagent.bridge.loop import BridgeRefused
from dynagent.files.config import load_config
from dynagent.testing.aws.local_aws import LocalAws
from dynagent.testing.determined.det_cli import DET, DetCli, command, experiment, notebook, shell
from dynagent.testing.determined.master import DEFAULT_PASSWORD, LocalDetermined

from ..aws.helpers import image_id, pool_document, write_config
from .aws_side import AwsSide
from .cluster import Cluster, Recorder, VirtualClock

REFUSED = "request unfulfillable, please try requesting less slots"
EXCEEDS = "slots requested exceeds cluster capacity"


@pytest.fixture
def det(master: LocalDetermined, tmp_path: Path) -> DetCli:
    if not DET.exists():
        if os.environ.get("DYNAGENT_REQUIRE_EMULATORS") == "1":
            pytest.fail(f"{DET} is missing: `make test` builds .venv-det")
        pytest.skip(f"Determined's CLI is not installed ({DET}): `make test` builds .venv-det")
    return DetCli(DET, master.url, tmp_path / "home")


@pytest.fixture
def pools_file(ec2: Any, tmp_path: Path) -> Path:
    """dynagent's pools: a100 (8 GPUs a machine, drained when idle) and t4 (4 GPUs)."""
    return write_config(
        tmp_path / "pools.yaml",
        pool_document(image_id(ec2), "a100", drain_idle_agents=True, max_idle_agent_period="5m"),
        pool_document(image_id(ec2), "t4", instance_type="g4dn.12xlarge", max_instances=3),
    )


@pytest.fixture
def cluster(aws: LocalAws, master: LocalDetermined, pools_file: Path) -> Cluster:
    """The master, the bridge, the queue, the functions and EC2 for those pools."""
    config = load_config(pools_file)
    clock, log = VirtualClock(), Recorder()
    return Cluster(master, AwsSide(aws, config, clock, log), config, clock, log)


def master_config_command(pools: Path) -> str:
    """``dynagent master-config --config POOLS``, the command an admin runs."""
    done = subprocess.run(
        [sys.executable, "-m", "dynagent.cli.main", "master-config", "--config", str(pools)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def submissions(directory: Path) -> list[list[str]]:
    return [
        notebook("a100"),
        command("a100", 1),
        command("a100", 8),
        shell("a100"),
        experiment(directory, 16, "a100"),
        command("t4", 4),
    ]


def test_work_det_submits_to_agentless_pools_is_admitted_scales_them_and_runs(
    cluster: Cluster, master: LocalDetermined, det: DetCli, pools_file: Path, tmp_path: Path
) -> None:
    master.configure(master_config_command(pools_file))  # the master restarts with it

    for args in submissions(tmp_path):
        ran = det(*args)
        assert ran.returncode == 0, f"det {' '.join(args[:2])}: {ran.stderr}"
    client = MasterClient(master.url, Credentials("admin", DEFAULT_PASSWORD))
    queued = {a["taskId"]: (a["resourcePool"], a["slotsNeeded"]) for a in client.allocations()}
    assert sorted(queued.values()) == [("a100", 1)] * 3 + [("a100", 8), ("a100", 16), ("t4", 4)]
    assert cluster.all_agents == set()

    cluster.run_until(
        lambda: all(master.task_state(task) == "RUNNING" for task in queued),
        "every task det submitted running",
    )
    # What the master placed: the 16-slot trial on two whole p4d agents, the 8-slot command
    # on a third, the three 1-slot tasks together on a fourth; the t4 command on one VM.
    on = {task: master.placement(task) for task in queued}
    trial = next(t for t, (_, slots) in queued.items() if slots == 16)
    assert sorted(len(devices) for devices in on[trial].values()) == [8, 8]
    assert len(cluster.neighbour_agents("a100")) == 4 and len(cluster.neighbour_agents("t4")) == 1
    assert len(cluster.launched) == 5  # one machine for each agent: nothing launched twice
    small = {agent for t, (_, slots) in queued.items() if slots == 1 for agent in on[t]}
    assert len(small) == 1
    assert all(master.task_state(task) != "KILLED" for task in queued)
    cluster.check_no_snapshot_lost()


def test_without_the_fragment_the_master_refuses_them_and_the_bridge_will_not_run(
    cluster: Cluster, master: LocalDetermined, det: DetCli, tmp_path: Path
) -> None:
    # The pools as a stock master has them once their provider is removed.
    master.configure("resource_pools:\n  - pool_name: a100\n  - pool_name: t4\n")

    for args in submissions(tmp_path):
        ran = det(*args)
        expected = EXCEEDS if args[0] == "experiment" else REFUSED
        assert ran.returncode == 1 and expected in ran.stderr, ran.stderr
    assert MasterClient(master.url, Credentials("admin", DEFAULT_PASSWORD)).allocations() == []
    with pytest.raises(BridgeRefused, match="has no provider in the master's config"):
        cluster.bridge_pass()
    assert cluster.sink.sent == []
