"""Determined's own CLI against the local master: if ``det`` reads it, a real master's
client does. Each run is a subprocess (about a second), so these are few."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from dynagent.testing.determined.master import LocalDetermined

pytest.importorskip("determined", reason="Determined's CLI: run in .venv-det")

RunDet = Callable[..., subprocess.CompletedProcess[str]]


def paths(master: LocalDetermined) -> list[tuple[str, str, int]]:
    return [(c.method, c.path, c.status) for c in master.calls()]


def test_det_lists_agents_slots_and_tasks(master: LocalDetermined, det: RunDet) -> None:
    master.add_agent("gpu-1", slots=4)
    master.add_agent("gpu-2", slots=2, hostname="gpu-2.internal")
    trial = master.submit("Trial 1 (Experiment 1)", 2)  # best fit: gpu-2
    gc = master.submit("Checkpoint GC", 0, type="CHECKPOINT_GC")  # first agent: gpu-1
    queued = master.submit("Trial 2 (Experiment 2)", 8)  # two idle 4-slot agents needed
    assert master.schedule() == [trial.task_id, gc.task_id]

    agents = det("agent", "list", "--csv")
    assert agents.returncode == 0, agents.stderr
    rows = [line.split(",") for line in agents.stdout.splitlines()]
    assert rows[0][0] == "Agent ID"
    # id, version, ..., slots, containers, pool, enabled, draining, address
    assert [(r[0], r[3], r[4], r[5], r[6], r[8]) for r in rows[1:]] == [
        ("gpu-1", "4", "0", "default", "True", "10.0.0.2"),
        ("gpu-2", "2", "1", "default", "True", "gpu-2.internal"),
    ]
    assert agents.stderr == ""  # no version or password warning

    slots = det("slot", "list", "--csv")
    assert slots.returncode == 0, slots.stderr
    by_slot = {tuple(r[:3]): r for r in (line.split(",") for line in slots.stdout.splitlines())}
    assert by_slot["gpu-2", "default", "1"][5:7] == [trial.allocation_id, "Trial 1 (Experiment 1)"]
    assert [by_slot["gpu-1", "default", str(n)][5] for n in range(4)] == ["FREE"] * 4
    assert by_slot["gpu-1", "default", "3"][7] == "cuda"

    tasks = det("task", "list", "--csv")
    assert tasks.returncode == 0, tasks.stderr
    task_rows = {r[0]: r for r in (line.split(",") for line in tasks.stdout.splitlines()[1:])}
    assert task_rows[trial.task_id][5] == "gpu-2"
    # The zero-slot task runs on gpu-1, which the agent and slot lists show idle.
    assert task_rows[gc.task_id][5] == "gpu-1"
    assert task_rows[queued.task_id][3] == "8"
    # One login, then the cached token, checked with /api/v1/me on each later run.
    assert [p for p in paths(master) if p[1] == "/api/v1/auth/login"] == [
        ("POST", "/api/v1/auth/login", 200)
    ]
    assert paths(master).count(("GET", "/api/v1/me", 200)) == 2


def test_det_job_list_pages_past_one_hundred(master: LocalDetermined, det: RunDet) -> None:
    master.add_agent("gpu", slots=8)
    jobs = [master.submit(f"job-{n:03d}", 1, type="COMMAND").job_id for n in range(120)]
    master.schedule()

    listed = det("job", "list", "--csv")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split(",") for line in listed.stdout.splitlines()[1:]]
    assert [r[1] for r in rows] == jobs
    assert [r[6] for r in rows[:9]] == ["1/1"] * 8 + ["0/1"]
    assert [r[7] for r in rows[7:9]] == ["STATE_SCHEDULED", "STATE_QUEUED"]
    queues = [c for c in master.calls() if c.path == "/api/v1/job-queues-v2"]
    assert [dict(c.query)["offset"] for c in queues] == ["0", "100"]


def test_det_drains_and_enables_after_its_token_expired(
    master: LocalDetermined, det: RunDet
) -> None:
    master.add_agent("gpu-1", slots=2)
    master.add_agent("gpu-2", slots=2)
    trial = master.submit("Trial 1 (Experiment 1)", 2)
    master.schedule()

    drained = det("agent", "disable", "--drain", "gpu-1")
    assert drained.returncode == 0, drained.stderr
    assert "Disabled agent gpu-1." in drained.stderr
    assert "Tasks still in progress on draining nodes." in drained.stdout
    assert trial.task_id in drained.stdout
    assert master.agent_state("gpu-1") == (False, True)
    assert master.task_state(trial.task_id) == "RUNNING"

    master.expire_tokens()  # the cached token now gets 401: det must log in again
    enabled = det("agent", "enable", "gpu-1")
    assert enabled.returncode == 0, enabled.stderr
    assert master.agent_state("gpu-1") == (True, False)
    logins = [p for p in paths(master) if p[1] in ("/api/v1/me", "/api/v1/auth/login")]
    assert logins == [
        ("POST", "/api/v1/auth/login", 200),
        ("GET", "/api/v1/me", 401),
        ("POST", "/api/v1/auth/login", 200),
    ]

    master.reconnecting("gpu-2")
    refused = det("agent", "disable", "gpu-2")
    assert refused.returncode != 0
    assert "agent disconnected, wait for recovery" in refused.stderr
    assert master.agent_state("gpu-2") == (False, True)
