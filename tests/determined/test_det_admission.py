"""Determined's own CLI submitting work to the local master, which admits it as a stock
master does: refused for a pool with no agents, accepted when the pool has a provider
(dynagent's master.yaml fragment), by the provider's numbers. Each ``det`` run is a
subprocess (about a second), so each test runs only the commands its point needs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from dynagent.files.master_config import master_config
from dynagent.testing.determined import det_cli
from dynagent.testing.determined.master import DEFAULT_PASSWORD, LocalDetermined

pytest.importorskip("determined", reason="Determined's CLI: run in .venv-det")
from determined.common.api import bindings

RunDet = Callable[..., subprocess.CompletedProcess[str]]

# dynagent's own config of the pool: an EC2 pool of p4d.24xlarge, at most 4.
DYNAGENT_POOLS = """\
resource_pools:
  - pool_name: a100
    provider:
      type: aws
      region: us-west-2
      image_id: ami-0123456789abcdef0
      instance_type: p4d.24xlarge
      max_instances: 4
"""
# The same pool as a stock master has it: no provider.
STOCK = "resource_pools:\n  - pool_name: a100\n"
# A pool Determined's provisioner scales beside it: GCE, 4 GPUs a VM, max_instances 5.
T4_POOL = {
    "pool_name": "t4",
    "provider": {
        "type": "gcp",
        "project": "det-project",
        "zone": "us-west1-b",
        "instance_type": {
            "machine_type": "n1-standard-16",
            "gpu_type": "nvidia-tesla-t4",
            "gpu_num": 4,
        },
    },
}
REFUSED = (
    "failed to prepare launch params: validating resources: "
    "request unfulfillable, please try requesting less slots"
)
EXCEEDS = "invalid resource configuration: slots requested exceeds cluster capacity"


@pytest.fixture
def fragment(tmp_path: Path) -> str:
    """What ``dynagent master-config`` prints for dynagent's a100 pool: a provider, for
    the slot counts, whose region fails aws-sdk-go's check, so its provisioner never acts."""
    pools = tmp_path / "pools.yaml"
    pools.write_text(DYNAGENT_POOLS)
    return master_config(pools)


def two_pools(fragment: str) -> dict[str, Any]:
    document = yaml.safe_load(fragment)
    return {"resource_pools": [*document["resource_pools"], T4_POOL]}


def notebook(pool: str = "a100") -> list[str]:
    return det_cli.notebook(pool)


def command(pool: str = "a100", slots: int | None = None) -> list[str]:
    return det_cli.command(pool, slots)


def shell(pool: str = "a100") -> list[str]:
    return det_cli.shell(pool)


def experiment(tmp_path: Path, slots: int, pool: str = "a100") -> list[str]:
    return det_cli.experiment(tmp_path, slots, pool)


def jobs(det: RunDet, pool: str) -> list[tuple[str, str, str]]:
    """(type, slots acquired/needed, state) of each job in the pool's queue, as det lists."""
    listed = det("job", "list", "--resource-pool", pool, "--csv")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split(",") for line in listed.stdout.splitlines()[1:]]
    return [(r[2], r[6], r[7]) for r in rows]


def launches(master: LocalDetermined) -> list[tuple[str, str, int]]:
    kinds = ("commands", "notebooks", "shells", "tensorboards", "experiments")
    return [
        (c.method, c.path, c.status)
        for c in master.calls()
        if c.path.removeprefix("/api/v1/") in kinds
    ]


def test_the_fragment_admits_work_for_a_pool_with_no_agent(
    master: LocalDetermined, det: RunDet, tmp_path: Path, fragment: str
) -> None:
    master.configure(fragment)
    ids = []
    for args in (notebook(), command(), command(slots=8), shell()):
        ran = det(*args)
        assert ran.returncode == 0, ran.stderr
        ids.append(ran.stdout.strip())  # --detach prints the task's id
    created = det(*experiment(tmp_path, 16))
    assert created.returncode == 0, created.stderr
    assert created.stdout.splitlines()[-1] == "Created experiment 1"
    assert created.stderr == ""  # no launch warning
    assert [master.task_state(i) for i in ids] == ["QUEUED"] * 4
    assert jobs(det, "a100") == [
        ("TYPE_NOTEBOOK", "0/1", "STATE_QUEUED"),
        ("TYPE_COMMAND", "0/1", "STATE_QUEUED"),
        ("TYPE_COMMAND", "0/8", "STATE_QUEUED"),
        ("TYPE_SHELL", "0/1", "STATE_QUEUED"),
        ("TYPE_EXPERIMENT", "0/16", "STATE_QUEUED"),
    ]
    assert launches(master) == [
        ("POST", "/api/v1/notebooks", 200),
        ("POST", "/api/v1/commands", 200),
        ("POST", "/api/v1/commands", 200),
        ("POST", "/api/v1/shells", 200),
        ("POST", "/api/v1/experiments", 200),
    ]
    # No agent joined: the pool accepted on its provider's numbers alone.
    assert master.placement(ids[0]) == {}


def test_a_stock_master_refuses_work_for_a_pool_with_no_agent(
    master: LocalDetermined, det: RunDet, tmp_path: Path
) -> None:
    master.configure(STOCK)
    expected = {
        "notebook": f"Failed to start a new notebook: {REFUSED}",
        "cmd": f"Failed to create command: {REFUSED}",
        "shell": f"Failed to start a new shell: {REFUSED}",
    }
    for args in (notebook(), command(), command(slots=8), shell()):
        ran = det(*args)
        assert (ran.returncode, ran.stderr.strip()) == (1, expected[args[0]])
    refused = det(*experiment(tmp_path, 16))
    assert (refused.returncode, refused.stderr.strip()) == (
        1,
        f"Failed to create experiment: {EXCEEDS}",
    )
    assert [status for _, _, status in launches(master)] == [400, 400, 400, 400, 500]
    assert jobs(det, "a100") == []


def test_launch_error_false_admits_the_experiment_but_not_single_node_work(
    master: LocalDetermined, det: RunDet, tmp_path: Path
) -> None:
    master.configure("launch_error: false\n" + STOCK)
    created = det(*experiment(tmp_path, 16))
    assert created.returncode == 0, created.stderr
    # The CLI prints the answer's LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED.
    assert "requires more slots than currently available" in created.stderr
    refused = det(*command())
    assert (refused.returncode, refused.stderr.strip()) == (
        1,
        f"Failed to create command: {REFUSED}",
    )
    assert jobs(det, "a100") == [("TYPE_EXPERIMENT", "0/16", "STATE_QUEUED")]


def test_each_pool_admits_by_its_own_provider(
    master: LocalDetermined, det: RunDet, tmp_path: Path, fragment: str
) -> None:
    master.configure(two_pools(fragment))
    outcomes = {
        "9 slots, one p4d holds 8": det(*command(slots=9)).returncode,
        "33 slots, 4 p4d hold 32": det(*experiment(tmp_path, 33)).returncode,
        "32 slots": det(*experiment(tmp_path, 32)).returncode,
        "4 slots, one VM holds 4": det(*command("t4", slots=4)).returncode,
        "5 slots": det(*command("t4", slots=5)).returncode,
        "20 slots, 5 VMs hold 20": det(*experiment(tmp_path, 20, "t4")).returncode,
        "21 slots": det(*experiment(tmp_path, 21, "t4")).returncode,
    }
    assert outcomes == {
        "9 slots, one p4d holds 8": 1,
        "33 slots, 4 p4d hold 32": 1,
        "32 slots": 0,
        "4 slots, one VM holds 4": 0,
        "5 slots": 1,
        "20 slots, 5 VMs hold 20": 0,
        "21 slots": 1,
    }
    assert jobs(det, "a100") == [("TYPE_EXPERIMENT", "0/32", "STATE_QUEUED")]
    assert jobs(det, "t4") == [
        ("TYPE_COMMAND", "0/4", "STATE_QUEUED"),
        ("TYPE_EXPERIMENT", "0/20", "STATE_QUEUED"),
    ]


def test_a_launch_error_prunes_only_where_the_provisioner_can_list(
    master: LocalDetermined, det: RunDet, tmp_path: Path, fragment: str
) -> None:
    master.configure(two_pools(fragment))
    for args in (command("t4", slots=4), experiment(tmp_path, 8, "t4"), experiment(tmp_path, 16)):
        ran = det(*args)
        assert ran.returncode == 0, ran.stderr
    # One VM listed: 4 slots. The 8-slot trial cannot be held and fails; the command stays.
    master.provisioner_launch_error("t4", "ZONE_RESOURCE_POOL_EXHAUSTED", listed_instances=1)
    with pytest.raises(ValueError, match="cannot list instances"):
        master.provisioner_launch_error("a100", "InsufficientInstanceCapacity")
    master.schedule()
    assert jobs(det, "t4") == [("TYPE_COMMAND", "0/4", "STATE_QUEUED")]
    assert jobs(det, "a100") == [("TYPE_EXPERIMENT", "0/16", "STATE_QUEUED")]


def test_det_master_config_shows_the_provider_with_determined_defaults(
    master: LocalDetermined, det: RunDet, fragment: str
) -> None:
    master.configure(fragment)
    shown = det("master", "config", "--json")
    assert shown.returncode == 0, shown.stderr
    config = json.loads(shown.stdout)
    assert config["launch_error"] is True
    (pool,) = config["resource_pools"]
    assert pool["pool_name"] == "a100"
    provider = pool["provider"]
    assert {k: provider[k] for k in ("type", "region", "instance_type", "max_instances")} == {
        "type": "aws",
        "region": "scaled by dynagent",
        "instance_type": "p4d.24xlarge",
        "max_instances": 4,
    }
    assert (provider["min_instances"], provider["root_volume_size"]) == (0, 200)
    master.add_user("viewer", DEFAULT_PASSWORD)
    denied = det("master", "config", user="viewer")
    assert denied.returncode == 1
    assert "user does not have permission" in denied.stderr


def post(master: LocalDetermined, session: Any, path: str, body: dict[str, Any]) -> Any:
    answer = requests.post(
        master.url + path,
        json=body,
        headers={"Authorization": f"Bearer {session.token}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_every_launch_answer_parses_with_the_bindings_and_round_trips(
    master: LocalDetermined, session: Any, fragment: str
) -> None:
    master.configure("launch_error: false\n" + fragment)
    master.add_pool("default")  # the default aux pool, for the TensorBoard
    config = {"resources": {"resource_pool": "a100"}}
    answers = [
        (binding, post(master, session, path, {"config": config}))
        for binding, path in (
            (bindings.v1LaunchCommandResponse, "/api/v1/commands"),
            (bindings.v1LaunchNotebookResponse, "/api/v1/notebooks"),
            (bindings.v1LaunchShellResponse, "/api/v1/shells"),
        )
    ]
    created = post(
        master,
        session,
        "/api/v1/experiments",
        {"config": "entrypoint: x\nresources: {slots_per_trial: 64, resource_pool: a100}\n",
         "activate": True},
    )  # fmt: skip
    assert created["warnings"] == ["LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED"]
    answers.append((bindings.v1CreateExperimentResponse, created))
    board = {"experimentIds": [created["experiment"]["id"]]}
    answers.append(
        (bindings.v1LaunchTensorboardResponse, post(master, session, "/api/v1/tensorboards", board))
    )
    validated = post(
        master, session, "/api/v1/experiments", {"config": "entrypoint: x", "validateOnly": True}
    )
    answers.append((bindings.v1CreateExperimentResponse, validated))
    preview = {"config": config, "preview": True}
    answers.append(
        (bindings.v1LaunchNotebookResponse, post(master, session, "/api/v1/notebooks", preview))
    )
    answers.append(
        (bindings.v1GetMasterConfigResponse, bindings.get_GetMasterConfig(session).to_json())
    )
    for binding, body in answers:
        assert binding.from_json(body).to_json(omit_unset=True) == body
