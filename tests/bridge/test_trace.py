"""``dynagent trace`` against the local master: a scripted day of work on two pools (an
experiment of two trials, another of priority 10 on one agent, a command, a notebook, a
TensorBoard, a checkpoint GC, and a shell still running at the end) on the master's fake clock, read
back as a trace, loaded by the simulator's own loader and replayed one pool at a time;
and the records the local master cannot make (a task of two allocations, one it will not
show, a deleted experiment), answered by hand."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from dynagent.bridge.client import Credentials, MasterClient, MasterUnavailable
from dynagent.bridge.trace import read_trace
from dynagent.cli import main as cli
from dynagent.simulate.trace import load_trace
from dynagent.testing.determined.master import DEFAULT_PASSWORD, LocalDetermined
from tests.builders import config_document, pool_entry

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
    2-slot trials and a checkpoint GC in default; a 1-slot command, a 4-slot notebook and
    experiment 2's 2-slot trial (priority 10, is_single_node) and a TensorBoard in
    aws-a100; each a minute in the queue, ended hours later; then a 1-slot shell in
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
    trial_3 = master.launch("TRIAL", 2, "aws-a100", priority=10, single_node=True)
    place(trial_3.task_id, "aws-a100", "TRIAL", 2)
    tensorboard = master.launch("TENSORBOARD", None, "aws-a100")
    place(tensorboard.task_id, "aws-a100", "TENSORBOARD", 0)
    gc = master.submit("Checkpoint GC", 0, "default", type="CHECKPOINT_GC")
    place(gc.task_id, "default", "CHECKPOINT_GC", 0)
    ended = master.finish_in_turn(
        [
            (gc.task_id, 0.25),
            (command.task_id, 0.75),
            (trial_1.task_id, 1),
            (notebook.task_id, 0.5),
            (trial_3.task_id, 0.5),
            (tensorboard.task_id, 0.25),
            (trial_2.task_id, 2),
        ]
    )
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


def traced_day(master: LocalDetermined, tmp_path: Path) -> tuple[Day, Path]:
    """The scripted day, then ``dynagent trace`` of the day before its end."""
    day = run_day(master)
    out = tmp_path / "mine.csv"
    argv = ["trace", "--master", master.url, "--since", "1d", "--until", iso(day.done)]
    assert cli.main([*argv, "--out", str(out)]) == 0
    return day, out


def pools_file(tmp_path: Path, name: str, instance_type: str) -> Path:
    config = tmp_path / "pools.yaml"
    entry = pool_entry(name, instance_type=instance_type, max_instances=2)
    config.write_text(yaml.safe_dump(config_document(entry)))
    return config


def test_the_trace_of_a_day_has_its_tasks_slots_and_busy_hours(
    master: LocalDetermined,
    logged_in: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (ran, gpu_1_up, done), out = traced_day(master, tmp_path)
    summary = capsys.readouterr().err

    trace = load_trace(out)
    since = done - timedelta(days=1)
    assert {job.id for job in trace.jobs} == set(ran)
    for job in trace.jobs:
        task = ran[job.id]
        assert (job.pool, job.task_type, job.gpus) == (task.pool, task.task_type, task.slots)
        assert job.arrival == round((task.submitted - since).total_seconds())
        assert job.duration == round((task.ended - task.started).total_seconds())
        # Experiment 2's from its config; the others' by type, at the default priority.
        assert job.single_agent == (task.task_type != "TRIAL" or task.pool == "aws-a100")
        assert job.priority == (10 if task.task_type == "TRIAL" and task.pool == "aws-a100" else 42)
    for pool in ("default", "aws-a100"):
        replayed = trace.of_pool(pool)
        script = [task for task in ran.values() if task.pool == pool]
        assert len(replayed.jobs) == len(script)
        busy = sum(t.slots * (t.ended - t.started).total_seconds() for t in script) / HOUR
        assert replayed.busy_gpu_seconds / HOUR == pytest.approx(busy, abs=0.01)
        assert f"pool {pool}: {len(script)} jobs, {busy:.2f} busy GPU-hours" in summary

    assert "1 allocations still running at --until: cut there" in summary
    assert "priority and single_agent: 3 trials' from their experiments' configs" in summary
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
    (ran, _, _), out = traced_day(master, tmp_path)
    config = pools_file(tmp_path, "aws-a100", "p4d.24xlarge")
    capsys.readouterr()
    simulate = ["simulate", str(out), "--config", str(config), "--no-progress"]
    assert cli.main([*simulate, "--pool", "aws-a100", "--policy", "dynagent"]) == 0
    said = capsys.readouterr().out
    assert "replaying the 4 jobs of pool aws-a100; left out 4 jobs of other pools (default)" in (
        said
    )
    # aws-a100's agent has gone, so its pool is not known: nothing to set beside.
    assert "As it ran" not in said
    # Without --pool, the config's one pool picks its rows the same way.
    assert cli.main([*simulate, "--policy", "dynagent"]) == 0
    assert "replaying the 4 jobs of pool aws-a100" in capsys.readouterr().out
    assert len([task for task in ran.values() if task.pool == "aws-a100"]) == 4


def test_simulate_sets_its_figures_beside_the_agents_as_they_ran(
    master: LocalDetermined,
    logged_in: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (ran, gpu_1_up, done), out = traced_day(master, tmp_path)
    up = (done - gpu_1_up).total_seconds() * 4 / HOUR  # gpu-1, default's agent, 4 slots
    trace = load_trace(out)
    assert trace.period_s == 86400
    assert trace.agents_up_gpu_hours == {"default": pytest.approx(up, abs=0.001)}
    config = pools_file(tmp_path, "default", "g4dn.12xlarge")
    capsys.readouterr()
    json_out = tmp_path / "replay.json"
    simulate = ["simulate", str(out), "--config", str(config), "--no-progress"]
    assert cli.main([*simulate, "--json", str(json_out)]) == 0
    said = capsys.readouterr().out
    beside = f"As it ran: pool default's own agents were up {up:,.1f} GPU-hours in its 1.0 days"
    assert beside in said.replace("\n", " ")
    document = json.loads(json_out.read_text())
    billed = {name: column["gpu_hours"] for name, column in document["columns"].items()}
    ratios = ", ".join(f"{name} {hours / up:.3f}" for name, hours in billed.items())
    assert f"Replayed ÷ as it ran: {ratios}." in said
    assert document["as_it_ran"]["agents_up_gpu_hours"] == {"default": round(up, 3)}
    # The replay ran the day's tasks of the pool, with their slots, for as long.
    script = [task for task in ran.values() if task.pool == "default"]
    busy = sum(t.slots * (t.ended - t.started).total_seconds() for t in script) / HOUR
    assert document["trace"]["jobs"] == len(script)
    for name in ("dynagent", "determined"):
        assert document["columns"][name]["busy_gpu_hours"] == pytest.approx(busy, abs=0.01)
        assert document["columns"][name]["never_scheduled"] == 0


class RecordsOnly(MasterClient):
    """A master's records as the API would answer them, where the local master cannot
    make them: a task of two allocations, one read before the period, one still running,
    one that never started, and one task the master will not show."""

    CSV = (
        "allocation_id,task_type,username,workspace_name,experiment_id,slots,start_time,"
        "end_time,imagepulling_time,slot_hours,resource_pool\n"
        "1.a.1,TRIAL,u,W,1,4,2026-01-01T00:00:00Z,2026-01-01T01:00:00Z,0.0,4,gpu\n"
        "1.a.2,TRIAL,u,W,1,4,2026-01-01T02:00:00Z,2026-01-01T02:30:00Z,0.0,2,gpu\n"
        "b.1,COMMAND,u,W,,1,2025-12-31T23:00:00Z,2026-01-01T00:30:00Z,0.0,0.5,gpu\n"
        "c.1,NOTEBOOK,u,W,,2,2026-01-01T03:00:00.5Z,,0.0,2,gpu\n"
        "d.1,SHELL,u,W,,1,,,0.0,0.0,gpu\n"
    )

    def __init__(self) -> None:
        super().__init__("http://records.invalid", Credentials(token="t"))

    def allocations_csv(self, after: str, before: str) -> str:
        assert (after, before) == ("2026-01-01T00:00:00Z", "2026-01-01T04:00:00Z")
        return self.CSV

    def task(self, task_id: str) -> dict[str, Any]:
        if task_id == "c":
            raise MasterUnavailable("GET /api/v1/tasks/c: HTTP 403: forbidden")
        submitted = {"1.a": "2025-12-31T23:59:00Z", "b": "2025-12-31T22:00:00Z"}[task_id]
        return {"taskId": task_id, "startTime": submitted}

    def experiment_config(self, experiment_id: str) -> dict[str, Any]:
        assert experiment_id == "1"  # of the trial; the others are no experiment's
        raise MasterUnavailable("GET /api/v1/experiments/1: HTTP 404: experiment not found")

    def raw_allocation(self, after: str, before: str) -> list[dict[str, Any]]:
        raise MasterUnavailable("GET /api/v1/resources/allocation/raw: HTTP 404: not found")


def test_what_the_records_leave_open_is_approximated_and_said() -> None:
    since = datetime(2026, 1, 1, tzinfo=UTC)
    traced = read_trace(RecordsOnly(), since, since + timedelta(hours=4))
    preamble, table = traced.csv_text().split("\narrival_s,", 1)
    assert preamble.splitlines()[1:] == ["# period_s,14400"]  # no agents' up: not read
    rows = list(csv.DictReader(io.StringIO("arrival_s," + table)))
    by_task = {row["task_id"]: row for row in rows}
    assert set(by_task) == {"1.a", "b", "c"}  # d never started
    # Two allocations, one job: 1 h + 30 min, arriving when submitted (before the period).
    assert by_task["1.a"]["duration_s"] == "5400"
    assert by_task["1.a"]["arrival_s"] == "0"
    assert by_task["b"]["duration_s"] == "1800"  # counted from --since
    # Unread task: arrives at its start; still running at --until: cut there.
    assert (by_task["c"]["arrival_s"], by_task["c"]["duration_s"]) == ("10800.500", "3599.500")
    assert {row["priority"] for row in rows} == {""}
    summary = "\n".join(traced.summary())
    for said in (
        "1 tasks could not be read: their arrival is their start, so the replay's waits "
        "for them are a lower bound",
        "1 allocations still running at --until: cut there",
        "1 allocations began before --since: counted from --since",
        "1 allocations never started: left out",
        "1 experiments could not be read (deleted?: 1): their 1 trials at the default "
        "priority, free to span agents",
        "the agents' up time could not be read: GET /api/v1/resources/allocation/raw",
    ):
        assert said in summary
