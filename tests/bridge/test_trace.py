"""``dynagent trace`` against the local master: a scripted day of work on two pools (an
experiment of two trials, a command, a notebook, a checkpoint GC, and a shell still
running at the end) on the master's fake clock, read back as a trace, loaded by the
simulator's own loader and replayed one pool at a time."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from dynagent.cli import main as cli
from dynagent.simulate.trace import load_trace
from dynagent.testing.determined.master import DEFAULT_PASSWORD, LocalDetermined

HOUR = 3600.0


class Ran(NamedTuple):
    """A task the script ran: its pool, type, slots, when submitted, placed and ended."""

    pool: str
    task_type: str
    slots: int
    submitted: datetime
    started: datetime
    ended: datetime


class Day(NamedTuple):
    ran: dict[str, Ran]  # by task id
    gpu_1_up: datetime  # when gpu-1 (default, 4 slots, connected all day) came
    done: datetime


def run_day(master: LocalDetermined) -> Day:
    """default (gpu-1, 4 slots) and aws-a100 (cloud-1, 8 slots): experiment 1 of two
    2-slot trials and a checkpoint GC in default, a 1-slot command and a 4-slot notebook
    in aws-a100, each a minute in the queue, ended hours later; then a 1-slot shell in
    default that is still running when the day is read."""
    master.add_pool("aws-a100", "AWS", slots_per_agent=8, instance_type="p4d.24xlarge")
    master.add_agent("gpu-1", slots=4)
    gpu_1_up = master.now()
    master.add_agent("cloud-1", "aws-a100", slots=8)
    placed: dict[str, tuple[str, str, int, datetime, datetime]] = {}

    def place(task_id: str, pool: str, task_type: str, slots: int) -> None:
        submitted = master.now()
        master.advance(60)
        assert master.schedule() == [task_id]
        placed[task_id] = (pool, task_type, slots, submitted, master.now())

    trial_1 = master.launch("TRIAL", 2)
    place(trial_1.task_id, "default", "TRIAL", 2)
    trial_2 = master.create_trial(1)
    place(trial_2.task_id, "default", "TRIAL", 2)
    command = master.launch("COMMAND", 1, "aws-a100")
    place(command.task_id, "aws-a100", "COMMAND", 1)
    notebook = master.launch("NOTEBOOK", 4, "aws-a100")
    place(notebook.task_id, "aws-a100", "NOTEBOOK", 4)
    gc = master.submit("Checkpoint GC", 0, "default", type="CHECKPOINT_GC")
    place(gc.task_id, "default", "CHECKPOINT_GC", 0)
    ended: dict[str, datetime] = {}
    for task_id, hours in [
        (gc.task_id, 0.25),
        (command.task_id, 0.75),
        (trial_1.task_id, 1),
        (notebook.task_id, 0.5),
        (trial_2.task_id, 2),
    ]:
        master.advance(hours * HOUR)
        master.finish(task_id)
        ended[task_id] = master.now()
    shell = master.launch("SHELL", 1, "default")
    place(shell.task_id, "default", "SHELL", 1)
    master.advance(HOUR)
    master.remove_agent("cloud-1")
    master.advance(HOUR)
    done = master.now()
    ended[shell.task_id] = done  # cut at --until
    ran = {task_id: Ran(*placed[task_id], ended[task_id]) for task_id in placed}
    return Day(ran, gpu_1_up, done)


@pytest.fixture
def logged_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DET_MASTER", raising=False)
    monkeypatch.setenv("DET_USER", "admin")
    monkeypatch.setenv("DET_PASS", DEFAULT_PASSWORD)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def test_the_trace_of_a_day_has_its_tasks_slots_and_busy_hours(
    master: LocalDetermined,
    logged_in: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ran, gpu_1_up, done = run_day(master)
    out = tmp_path / "mine.csv"
    argv = ["trace", "--master", master.url, "--since", "1d", "--until", iso(done)]
    assert cli.main([*argv, "--out", str(out)]) == 0
    summary = capsys.readouterr().err

    trace = load_trace(out)
    since = done - timedelta(days=1)
    assert {job.id for job in trace.jobs} == set(ran)
    for job in trace.jobs:
        task = ran[job.id]
        assert (job.pool, job.task_type, job.gpus) == (task.pool, task.task_type, task.slots)
        assert job.arrival == round((task.submitted - since).total_seconds())
        assert job.duration == round((task.ended - task.started).total_seconds())
        assert job.single_agent == (task.task_type != "TRIAL")
        assert job.priority == 42  # not in the records: Determined's default
    for pool in ("default", "aws-a100"):
        replayed = trace.of_pool(pool)
        script = [task for task in ran.values() if task.pool == pool]
        assert len(replayed.jobs) == len(script)
        busy = sum(t.slots * (t.ended - t.started).total_seconds() for t in script) / HOUR
        assert replayed.busy_gpu_seconds / HOUR == pytest.approx(busy, abs=0.01)
        assert f"pool {pool}: {len(script)} jobs, {busy:.2f} busy GPU-hours" in summary

    assert "1 allocations still running at --until: cut there" in summary
    assert "priority: not in the master's records" in summary
    # gpu-1 is still connected: its pool is known; cloud-1 left, so its pool is not.
    up = (done - gpu_1_up).total_seconds() * 4 / HOUR
    assert f"its agents were up {up:.2f} GPU-hours" in summary
    assert "agents no longer connected, so of no known pool (cloud-1)" in summary


def test_simulate_replays_one_pool_of_the_trace(
    master: LocalDetermined,
    logged_in: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ran, _, done = run_day(master)
    out = tmp_path / "mine.csv"
    argv = ["trace", "--master", master.url, "--since", "1d", "--until", iso(done)]
    assert cli.main([*argv, "--out", str(out)]) == 0
    config = tmp_path / "pools.yaml"
    pool = {
        "pool_name": "aws-a100",
        "provider": {
            "type": "aws",
            "region": "us-east-1",
            "image_id": "ami-00000000000000000",
            "instance_type": "p4d.24xlarge",
            "max_instances": 2,
        },
    }
    config.write_text(yaml.safe_dump({"resource_pools": [pool]}))
    capsys.readouterr()
    simulate = ["simulate", str(out), "--config", str(config), "--no-progress"]
    assert cli.main([*simulate, "--pool", "aws-a100", "--policy", "dynagent"]) == 0
    said = capsys.readouterr().out
    assert "replaying the 2 jobs of pool aws-a100; left out 4 jobs of other pools (default)" in (
        said
    )
    # Without --pool, the config's one pool picks its rows the same way.
    assert cli.main([*simulate, "--policy", "dynagent"]) == 0
    assert "replaying the 2 jobs of pool aws-a100" in capsys.readouterr().out
    assert len([task for task in ran.values() if task.pool == "aws-a100"]) == 2
