"""The local master's history, read through Determined's own bindings and CLI: experiments,
their trials, a task with its allocation and the raw resource allocation, after a scripted
piece of work on two pools (an experiment of two trials, a command, a notebook and a
checkpoint GC) run and finished on the master's fake clock."""

from __future__ import annotations

import csv
import io
import subprocess
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import pytest
import requests

pytest.importorskip("determined", reason="Determined's client: run in .venv-det")
from determined.common.api import bindings, errors

from dynagent.testing.determined.master import LocalDetermined

RunDet = Callable[..., subprocess.CompletedProcess[str]]
HOUR = 3600.0


class Ran(NamedTuple):
    """A task the script ran: its ids, when it was submitted, placed and ended."""

    task_id: str
    allocation_id: str
    submitted: datetime
    started: datetime
    ended: datetime


class Day(NamedTuple):
    trials: list[Ran]
    command: Ran
    notebook: Ran
    gc: Ran
    began: datetime
    cloud_left: datetime  # when cloud-1 went away
    done: datetime


def run_day(master: LocalDetermined) -> Day:
    """Two pools: default (gpu-1, 4 slots) and aws-a100 (cloud-1, 8 slots). Experiment 1
    (two trials of 2 slots, default pool), a 1-slot command and a 4-slot notebook in
    aws-a100, a checkpoint GC in default; each placed as it comes, ended hours later."""
    master.add_pool("aws-a100", "AWS", slots_per_agent=8, instance_type="p4d.24xlarge")
    began = master.now()
    master.add_agent("gpu-1", slots=4)
    master.add_agent("cloud-1", "aws-a100", slots=8)
    started: dict[str, tuple[str, str, datetime, datetime]] = {}

    def placed(task_id: str, allocation_id: str) -> None:
        submitted = master.now()
        master.advance(60)  # a minute in the queue
        assert master.schedule() == [task_id]
        started[task_id] = (task_id, allocation_id, submitted, master.now())

    trial_1 = master.launch("TRIAL", 2)
    placed(trial_1.task_id, trial_1.allocation_id)
    trial_2 = master.create_trial(1)
    placed(trial_2.task_id, trial_2.allocation_id)
    command = master.launch("COMMAND", 1, "aws-a100")
    placed(command.task_id, command.allocation_id)
    notebook = master.launch("NOTEBOOK", 4, "aws-a100")
    placed(notebook.task_id, notebook.allocation_id)
    gc = master.submit("Checkpoint GC", 0, type="CHECKPOINT_GC")
    placed(gc.task_id, gc.allocation_id)

    ended = master.finish_in_turn(
        [
            (gc.task_id, 0.25),
            (command.task_id, 0.75),
            (trial_1.task_id, 1),
            (notebook.task_id, 0.5),
            (trial_2.task_id, 2),
        ]
    )
    master.advance(HOUR)
    master.remove_agent("cloud-1")
    cloud_left = master.now()
    master.advance(HOUR)

    def ran(task_id: str) -> Ran:
        return Ran(*started[task_id], ended[task_id])

    return Day(
        trials=[ran(trial_1.task_id), ran(trial_2.task_id)],
        command=ran(command.task_id),
        notebook=ran(notebook.task_id),
        gc=ran(gc.task_id),
        began=began,
        cloud_left=cloud_left,
        done=master.now(),
    )


def when(text: str | None) -> datetime | None:
    """A timestamp the API wrote (RFC 3339, or PostgreSQL's to_json form), as a datetime."""
    return None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00"))


def rfc3339(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def get(master: LocalDetermined, session: Any, path: str, **params: Any) -> requests.Response:
    return requests.get(
        master.url + path,
        params=params,
        headers={"Authorization": f"Bearer {session.token}"},
        timeout=10,
    )


def test_every_history_answer_parses_with_the_bindings_and_round_trips(
    master: LocalDetermined, session: Any
) -> None:
    day = run_day(master)
    window = {"timestamp_after": rfc3339(day.began), "timestamp_before": rfc3339(day.done)}
    answers = [
        ("/api/v1/experiments", {}, bindings.v1GetExperimentsResponse),
        ("/api/v1/experiments/1", {}, bindings.v1GetExperimentResponse),
        ("/api/v1/experiments/1/trials", {}, bindings.v1GetExperimentTrialsResponse),
        ("/api/v1/resources/allocation/raw", window, bindings.v1ResourceAllocationRawResponse),
    ] + [
        (f"/api/v1/tasks/{ran.task_id}", {}, bindings.v1GetTaskResponse)
        for ran in [*day.trials, day.command, day.notebook, day.gc]
    ]
    for path, params, binding in answers:
        answer = get(master, session, path, **params)
        assert answer.status_code == 200, (path, answer.text)
        body = answer.json()
        assert binding.from_json(body).to_json(omit_unset=True) == body, path


def test_a_finished_experiment_and_its_trials(master: LocalDetermined, session: Any) -> None:
    day = run_day(master)
    listed = bindings.get_GetExperiments(session)
    assert listed.pagination is not None
    assert (listed.pagination.total, listed.pagination.endIndex) == (1, 1)
    (experiment,) = listed.experiments
    assert experiment.state == bindings.experimentv1State.COMPLETED
    assert experiment.resourcePool == "default"
    assert experiment.numTrials == 2
    assert experiment.trialIds == []  # the list leaves them out, as the master's does
    assert when(experiment.endTime) == day.trials[1].ended
    assert experiment.duration == round(
        (day.trials[1].ended - when(experiment.startTime)).total_seconds()
    )

    one = bindings.get_GetExperiment(session, experimentId=1)
    assert one.experiment.trialIds == [1, 2]
    assert one.jobSummary is None  # no longer active
    assert one.config is not None and one.config["resources"]["slots_per_trial"] == 2

    trials = bindings.get_GetExperimentTrials(session, experimentId=1).trials
    assert [t.id for t in trials] == [1, 2]
    for trial, ran in zip(trials, day.trials, strict=True):
        assert trial.state == bindings.trialv1State.COMPLETED
        assert trial.taskIds == [ran.task_id]
        assert when(trial.startTime) == ran.submitted
        assert when(trial.endTime) == ran.ended
        assert trial.wallClockTime == (ran.ended - ran.started).total_seconds()


def test_experiments_filter_sort_and_page_as_the_database_does(
    master: LocalDetermined, session: Any
) -> None:
    master.add_agent("gpu-1", slots=2)
    for _ in range(3):
        master.launch("TRIAL", 2)  # experiments 1 to 3, each one trial of 2 slots
    master.schedule()  # experiment 1 runs, 2 and 3 wait
    master.finish(master.launch("TRIAL", 2).task_id)  # experiment 4: done before it ran

    def ids(**params: Any) -> list[int]:
        return [e.id for e in bindings.get_GetExperiments(session, **params).experiments]

    assert ids() == [1, 2, 3, 4]
    assert ids(orderBy=bindings.v1OrderBy.DESC) == [4, 3, 2, 1]
    assert ids(limit=2, offset=1) == [2, 3]
    assert ids(offset=-1) == [4]
    assert ids(offset=9) == []  # past the end: an empty page, not an error
    # The filter reads the stored state: ACTIVE, which the answer shows as RUNNING/QUEUED.
    assert ids(states=[bindings.experimentv1State.ACTIVE]) == [1, 2, 3]
    assert ids(states=[bindings.experimentv1State.RUNNING]) == []
    assert ids(states=[bindings.experimentv1State.COMPLETED]) == [4]
    shown = {e.id: e.state for e in bindings.get_GetExperiments(session).experiments}
    assert shown[1] == bindings.experimentv1State.RUNNING
    assert shown[2] == bindings.experimentv1State.QUEUED
    by_end = bindings.get_GetExperiments(
        session, sortBy=bindings.v1GetExperimentsRequestSortBy.END_TIME
    )
    assert [e.id for e in by_end.experiments] == [4, 1, 2, 3]  # NULL ends last
    assert ids(users=["determined"]) == ids(userIds=[2]) == []
    assert ids(userIds=[1]) == [1, 2, 3, 4]
    assert ids(users=["admin"], archived=False) == [1, 2, 3, 4]
    summary = bindings.get_GetExperiment(session, experimentId=2).jobSummary
    assert summary is not None and summary.state == bindings.jobv1State.QUEUED
    assert summary.jobsAhead == 1
    with pytest.raises(errors.NotFoundException):
        bindings.get_GetExperiment(session, experimentId=9)


def test_each_task_keeps_its_allocation_times_and_type(
    master: LocalDetermined, session: Any
) -> None:
    day = run_day(master)
    kinds = [
        (day.trials[0], "TRIAL"),
        (day.command, "COMMAND"),
        (day.notebook, "NOTEBOOK"),
        (day.gc, "CHECKPOINT_GC"),
    ]
    for ran, kind in kinds:
        task = bindings.get_GetTask(session, taskId=ran.task_id).task
        assert task.taskType == bindings.v1TaskType[kind]
        assert when(task.startTime) == ran.submitted
        assert when(task.endTime) == ran.ended
        (allocation,) = task.allocations
        assert allocation.allocationId == ran.allocation_id
        assert allocation.state == bindings.taskv1State.TERMINATED
        # PostgreSQL's to_json text, as get_task.sql aggregates allocations with JSONB_AGG
        assert allocation.startTime is not None and allocation.startTime.endswith("+00:00")
        assert when(allocation.startTime) == ran.started
        assert when(allocation.endTime) == ran.ended
        assert allocation.slots == 0  # get_task.sql selects none
    with pytest.raises(errors.NotFoundException):
        bindings.get_GetTask(session, taskId="no-such-task")


def test_a_queued_then_running_task_has_no_end_yet(master: LocalDetermined, session: Any) -> None:
    master.add_agent("gpu-1", slots=1)
    queued = master.submit("Command (waiting)", 2, type="COMMAND")  # more than gpu-1 has
    master.schedule()
    task = bindings.get_GetTask(session, taskId=queued.task_id).task
    (allocation,) = task.allocations
    assert (task.endTime, allocation.startTime) == (None, None)
    assert allocation.state == bindings.taskv1State.QUEUED
    master.add_agent("gpu-2", slots=2)
    master.schedule()
    (allocation,) = bindings.get_GetTask(session, taskId=queued.task_id).task.allocations
    assert allocation.state == bindings.taskv1State.RUNNING
    assert when(allocation.startTime) == master.now()
    assert allocation.endTime is None


def test_the_raw_allocation_has_trials_and_agents_clipped_to_the_period(
    master: LocalDetermined, session: Any
) -> None:
    day = run_day(master)
    raw = bindings.get_ResourceAllocationRaw(
        session, timestampAfter=rfc3339(day.began), timestampBefore=rfc3339(day.done)
    ).resourceEntries
    assert raw is not None
    trials = [e for e in raw if e.kind == "training"]
    agents = {e.username: e for e in raw if e.kind == "agent"}
    assert [(e.experimentId, e.slots, e.username) for e in trials] == [(1, 2, "admin")] * 2
    for entry, ran in zip(trials, day.trials, strict=True):
        assert (when(entry.startTime), when(entry.endTime)) == (ran.started, ran.ended)
        assert entry.seconds == (ran.ended - ran.started).total_seconds()
    assert (agents["gpu-1"].slots, agents["cloud-1"].slots) == (4, 8)
    assert agents["gpu-1"].endTime is None  # still connected
    assert when(agents["cloud-1"].endTime) == day.cloud_left
    gpu_start = when(agents["gpu-1"].startTime)
    assert gpu_start is not None
    assert agents["gpu-1"].seconds == (day.done - gpu_start).total_seconds()
    starts = [when(e.startTime) for e in raw]
    assert starts == sorted(starts)  # type: ignore[type-var]

    # A period that ends half an hour into the first trial: both trials, cut at its end.
    cut = day.trials[0].started + timedelta(minutes=30)
    clipped = bindings.get_ResourceAllocationRaw(
        session, timestampAfter=rfc3339(day.began), timestampBefore=rfc3339(cut)
    ).resourceEntries
    assert clipped is not None
    assert [e.seconds for e in clipped if e.kind == "training"] == [
        (cut - ran.started).total_seconds() for ran in day.trials
    ]
    # and one that begins after the trials ended has only the agents
    later = bindings.get_ResourceAllocationRaw(
        session, timestampAfter=rfc3339(day.trials[1].ended), timestampBefore=rfc3339(day.done)
    ).resourceEntries
    assert later is not None
    assert sorted(e.username for e in later) == ["cloud-1", "gpu-1"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"timestamp_before": "2025-01-02T00:00:00Z"}, "no start time provided"),
        ({"timestamp_after": "2025-01-01T00:00:00Z"}, "no end time provided"),
        (
            {"timestamp_after": "2025-01-02T00:00:00Z", "timestamp_before": "2025-01-01T00:00:00Z"},
            "start time cannot be after end time",
        ),
    ],
)
def test_the_raw_allocation_refuses_a_period_as_the_master_does(
    master: LocalDetermined, session: Any, params: dict[str, str], message: str
) -> None:
    answer = get(master, session, "/api/v1/resources/allocation/raw", **params)
    assert answer.status_code == 400
    assert answer.json() == {"error": {"code": 3, "reason": "InvalidArgument", "error": message}}


def test_det_lists_the_experiment_and_its_trials(master: LocalDetermined, det: RunDet) -> None:
    day = run_day(master)
    listed = det("experiment", "list", "--csv")
    assert listed.returncode == 0, listed.stderr
    header, row = (line.split(",") for line in listed.stdout.splitlines())
    assert header[:2] == ["ID", "Owner"]
    assert (row[0], row[1], row[4], row[-1]) == ("1", "admin", "COMPLETED", "default")

    trials = det("experiment", "list-trials", "1", "--csv")
    assert trials.returncode == 0, trials.stderr
    rows = list(csv_rows(trials.stdout))
    assert [(r["Trial ID"], r["State"]) for r in rows] == [("1", "COMPLETED"), ("2", "COMPLETED")]
    # the CLI prints whole seconds
    assert [when(r["Ended"]) for r in rows] == [r.ended.replace(microsecond=0) for r in day.trials]


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def allocations_csv(
    master: LocalDetermined, session: Any | None, **params: str
) -> requests.Response:
    headers = {} if session is None else {"Authorization": f"Bearer {session.token}"}
    return requests.get(
        master.url + "/resources/allocation/allocations-csv",
        params=params,
        headers=headers,
        timeout=10,
    )


def whole_second(moment: datetime, up: bool = False) -> str:
    """The CSV endpoint takes whole seconds only."""
    if up and moment.microsecond:
        moment += timedelta(seconds=1)
    return rfc3339(moment.replace(microsecond=0))


def test_the_allocations_csv_has_every_kind_of_work_with_slots_and_pool(
    master: LocalDetermined, session: Any
) -> None:
    day = run_day(master)
    waiting = master.submit("Command (waiting)", 8, type="COMMAND")  # more than gpu-1 has
    answer = allocations_csv(
        master,
        session,
        timestamp_after=whole_second(day.began),
        timestamp_before=whole_second(day.done, up=True),
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"].startswith("text/csv")
    rows = csv_rows(answer.text)
    ran = [*day.trials, day.command, day.notebook, day.gc]
    assert [r["allocation_id"] for r in rows] == [
        *(r.allocation_id for r in ran),
        waiting.allocation_id,  # never started: no start, so last, and in every period
    ]
    assert [
        (r["task_type"], r["username"], r["workspace_name"], r["experiment_id"], r["slots"])
        for r in rows
    ] == [
        ("TRIAL", "admin", "Uncategorized", "1", "2"),
        ("TRIAL", "admin", "Uncategorized", "1", "2"),
        ("COMMAND", "admin", "Uncategorized", "", "1"),
        ("NOTEBOOK", "admin", "Uncategorized", "", "4"),
        ("CHECKPOINT_GC", "", "", "", "0"),  # no job, so no owner; no workspace
        ("COMMAND", "admin", "Uncategorized", "", "8"),
    ]
    assert [r["resource_pool"] for r in rows] == [
        "default",
        "default",
        "aws-a100",
        "aws-a100",
        "default",
        "default",
    ]
    for row, task in zip(rows, ran, strict=False):
        assert (when(row["start_time"]), when(row["end_time"])) == (task.started, task.ended)
        hours = (task.ended - task.started).total_seconds() / HOUR * int(row["slots"])
        assert row["slot_hours"] == (f"{hours:f}" if hours else "0.0")
        assert row["imagepulling_time"] == "0.0"
    assert (rows[-1]["start_time"], rows[-1]["end_time"], rows[-1]["slot_hours"]) == ("", "", "0.0")

    # An hour from the first trial's start: its slot-hours are cut to the period.
    first = day.trials[0]
    hour = allocations_csv(
        master,
        session,
        timestamp_after=whole_second(first.started, up=True),
        timestamp_before=whole_second(first.started + timedelta(hours=1), up=True),
    )
    cut = csv_rows(hour.text)[0]
    assert cut["allocation_id"] == first.allocation_id
    assert cut["slot_hours"] == f"{2 * 1.0:f}"


@pytest.mark.parametrize(
    ("params", "status", "message"),
    [
        (
            {"timestamp_before": "2025-01-02T00:00:00Z"},
            500,
            'invalid start time: parsing time "" as "2006-01-02T15:04:05Z": '
            'cannot parse "" as "2006"',
        ),
        (
            {"timestamp_after": "2025-01-02T00:00:00Z", "timestamp_before": "2025-01-01T00:00:00Z"},
            500,
            "start time cannot be after end time",
        ),
    ],
)
def test_the_allocations_csv_refuses_as_echo_does(
    master: LocalDetermined, session: Any, params: dict[str, str], status: int, message: str
) -> None:
    answer = allocations_csv(master, session, **params)
    assert (answer.status_code, answer.json()) == (status, {"message": message})
    anonymous = allocations_csv(master, None, **params)
    assert (anonymous.status_code, anonymous.json()) == (401, {"message": "Unauthorized"})
