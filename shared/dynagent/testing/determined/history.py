"""The master's records of the work it ran, as its history endpoints answer from its
database: experiments (``api_experiment.go`` GetExperiments, GetExperiment), their trials
(``api_trials.go`` GetExperimentTrials, ``proto_get_trials_plus.sql``), a task with its
allocations (``api_task.go`` GetTask, ``get_task.sql``), the raw resource allocation
(``api_master.go`` ResourceAllocationRaw, ``get_raw_allocation.sql``) and the allocations
CSV (``core.go`` getResourceAllocations), the one record of every kind of work with its
slots and pool (GetTask's allocations carry no slots, and no task carries its pool).

Simpler than Determined: a trial reports no workloads, so its raw allocation is one
``training`` entry spanning its allocation, start to end, as if its one report came at its
end (the real query cuts a trial's time into training, validation, checkpointing and image
pulling spans between its reports, and has no entry for a trial that has not reported
yet); there are no provisioner ``instance`` entries (no provisioner here) and no image
pulls (the CSV's ``imagepulling_time`` is 0.0). A trial never restarts (``restarts`` 0):
a trial the master killed (its agent disabled or gone) ends in ERROR where Determined
would restart it up to ``max_restarts``. Every allocation is in workspace 1,
``Uncategorized``."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final

from werkzeug.wrappers import Request, Response

from dynagent.testing.determined.gateway import (
    ORDER_BY,
    ApiError,
    JsonObject,
    QueryParams,
    json_response,
    not_found,
    page_info,
    timestamp,
)
from dynagent.testing.determined.messages import experiment_json
from dynagent.testing.determined.state import Experiment, MasterState, Task, User

# experimentv1.State, which the request's ``states`` filters use for trials too.
EXPERIMENT_STATES: Final = (
    "STATE_UNSPECIFIED",
    "STATE_ACTIVE",
    "STATE_PAUSED",
    "STATE_STOPPING_COMPLETED",
    "STATE_STOPPING_CANCELED",
    "STATE_STOPPING_ERROR",
    "STATE_COMPLETED",
    "STATE_CANCELED",
    "STATE_ERROR",
    "STATE_DELETED",
    "STATE_DELETING",
    "STATE_DELETE_FAILED",
    "STATE_STOPPING_KILLED",
    "STATE_QUEUED",
    "STATE_PULLING",
    "STATE_STARTING",
    "STATE_RUNNING",
)
# GetExperimentsRequest.SortBy and GetExperimentTrialsRequest.SortBy by number ("" where
# the enum skips one).
EXPERIMENT_SORT_BY: Final = (
    "SORT_BY_UNSPECIFIED",
    "SORT_BY_ID",
    "SORT_BY_DESCRIPTION",
    "",
    "SORT_BY_START_TIME",
    "SORT_BY_END_TIME",
    "SORT_BY_STATE",
    "",
    "SORT_BY_NUM_TRIALS",
    "SORT_BY_PROGRESS",
    "SORT_BY_USER",
    "SORT_BY_NAME",
    "SORT_BY_FORKED_FROM",
    "SORT_BY_RESOURCE_POOL",
    "SORT_BY_PROJECT_ID",
    "SORT_BY_CHECKPOINT_SIZE",
    "SORT_BY_CHECKPOINT_COUNT",
    "SORT_BY_SEARCHER_METRIC_VAL",
)
TRIAL_SORT_BY: Final = (
    "SORT_BY_UNSPECIFIED",
    "SORT_BY_ID",
    "",
    "",
    "SORT_BY_START_TIME",
    "SORT_BY_END_TIME",
    "SORT_BY_STATE",
    "SORT_BY_BEST_VALIDATION_METRIC",
    "SORT_BY_LATEST_VALIDATION_METRIC",
    "SORT_BY_BATCHES_PROCESSED",
    "SORT_BY_DURATION",
    "SORT_BY_RESTARTS",
    "SORT_BY_CHECKPOINT_SIZE",
    "SORT_BY_LOG_RETENTION_DAYS",
)
# How a task's end shows as a trial's state (the trials table's trial_state).
_TRIAL_END: Final = {"FINISHED": "COMPLETED", "KILLED": "ERROR", "ERROR": "ERROR"}


# -- experiments -----------------------------------------------------------------------


def _experiment_db_state(experiment: Experiment) -> str:
    """experiments.state: ACTIVE or PAUSED until its last trial ends, then its outcome."""
    if experiment.outcome is not None:
        return experiment.outcome
    return "ACTIVE" if experiment.active else "PAUSED"


def _experiment_state(state: MasterState, experiment: Experiment) -> str:
    """enrichExperimentStateTx: an active experiment shows RUNNING when an allocation of
    its job runs, else QUEUED."""
    db_state = _experiment_db_state(experiment)
    if db_state != "ACTIVE":
        return f"STATE_{db_state}"
    live = [state.tasks[t] for t in experiment.task_ids if t in state.tasks]
    return "STATE_RUNNING" if any(t.placed for t in live) else "STATE_QUEUED"


def experiment_record_json(
    state: MasterState, experiment: Experiment, *, listed: bool
) -> JsonObject:
    """An experiment as GetExperiments (``listed``: getExperimentColumns, no trial ids, a
    duration, the owner's display name) or GetExperiment (getExperimentTx) answers it."""
    out = experiment_json(experiment)
    out["state"] = _experiment_state(state, experiment)
    out["endTime"] = None if experiment.ended is None else timestamp(experiment.ended)
    if listed:
        # "Intentionally not sending trial_ids due to performance."
        out["trialIds"] = []
        out["displayName"] = experiment.user.username  # COALESCE(display_name, username)
        until = experiment.ended or state.now
        out["duration"] = round((until - experiment.started).total_seconds())
    return out


def _sort_key(
    items: list[Any], key: Callable[[Any], Any], descending: bool, nulls_last: bool
) -> list[Any]:
    """ORDER BY key, id: None sorts as PostgreSQL's NULL (last ascending, first descending
    unless ``NULLS LAST``)."""
    present = sorted((i for i in items if key(i) is not None), key=key, reverse=descending)
    absent = [i for i in items if key(i) is None]
    return present + absent if nulls_last or not descending else absent + present


def _experiment_keys() -> dict[str, Callable[[Experiment], Any]]:
    return {
        "SORT_BY_UNSPECIFIED": lambda e: e.id,
        "SORT_BY_ID": lambda e: e.id,
        "SORT_BY_DESCRIPTION": lambda e: str(e.config.get("description") or ""),
        "SORT_BY_NAME": lambda e: e.name,
        "SORT_BY_START_TIME": lambda e: e.started,
        "SORT_BY_END_TIME": lambda e: e.ended,
        "SORT_BY_STATE": _experiment_db_state,
        "SORT_BY_NUM_TRIALS": lambda e: len(e.trial_ids),
        "SORT_BY_USER": lambda e: e.user.username,
        "SORT_BY_RESOURCE_POOL": lambda e: e.pool,
        "SORT_BY_PROJECT_ID": lambda e: 1,
    }


def get_experiments(state: MasterState, request: Request, _: User | None) -> Response:
    """GET /api/v1/experiments: filters ``name``, ``description`` (substring, any case),
    ``labels`` (all of them), ``archived``, ``states`` (the stored state: ACTIVE, not the
    QUEUED or RUNNING it is shown as), ``users``, ``userIds``, ``projectId``; sorted by
    ``sortBy`` then id, ``orderBy`` (descending with nulls last); paged as the database
    pages. Not modelled: ``experimentIdFilter``, ``showTrialData``."""
    if any(key.startswith(("experimentIdFilter", "experiment_id_filter")) for key in request.args):
        raise ApiError(12, "experimentIdFilter is not modelled by LocalDetermined")
    params = QueryParams(request)
    sort_by = params.enum("sortBy", EXPERIMENT_SORT_BY)
    order_by = params.enum("orderBy", ORDER_BY)
    offset, limit = params.int32("offset"), params.int32("limit")
    name, description = params.string("name").lower(), params.string("description").lower()
    labels = params.strings("labels")
    archived = params.optional_bool("archived")
    states = {s.removeprefix("STATE_") for s in params.enums("states", EXPERIMENT_STATES)}
    users = set(params.strings("users"))
    user_ids = set(params.int32s("userIds"))
    project_id = params.int32("projectId")
    if project_id not in (0, 1):
        raise not_found("project", str(project_id))
    experiments = [
        e
        for e in state.records.values()
        if name in e.name.lower()
        and description in str(e.config.get("description") or "").lower()
        and set(labels) <= set(e.config.get("labels") or [])
        and archived in (None, False)  # nothing here is archived
        and (not states or _experiment_db_state(e) in states)
        and (not users or e.user.username in users)
        and (not user_ids or e.user.id in user_ids)
    ]
    keys = _experiment_keys()
    if sort_by not in keys:
        raise ApiError(12, f"sorting experiments by {sort_by} is not modelled by LocalDetermined")
    descending = order_by == "ORDER_BY_DESC"
    experiments = _sort_key(
        sorted(experiments, key=lambda e: e.id, reverse=descending),
        keys[sort_by],
        descending,
        nulls_last=True,
    )
    page, pagination = page_info(experiments, offset, limit)
    return json_response(
        {
            "experiments": [experiment_record_json(state, e, listed=True) for e in page],
            "pagination": pagination,
        }
    )


def _experiment(state: MasterState, experiment_id: str) -> Experiment:
    if not re.fullmatch(r"-?\d+", experiment_id):  # the gateway's path parameter, int32
        raise ApiError(
            3,
            f"type mismatch, parameter: experiment_id, error: strconv.ParseInt: "
            f'parsing "{experiment_id}": invalid syntax',
        )
    found = state.records.get(int(experiment_id))
    if found is None:
        raise not_found("experiment", experiment_id)
    return found


def get_experiment(state: MasterState, _: Request, __: User | None, experiment_id: str) -> Response:
    """GET /api/v1/experiments/{id}: the experiment, its config, and while it is active its
    job's summary (the job service's: queued or scheduled, jobs ahead)."""
    experiment = _experiment(state, experiment_id)
    summary = None
    if _experiment_db_state(experiment) == "ACTIVE":
        queue = state.visible_tasks(experiment.pool)
        for ahead, task in enumerate(queue):
            if task.job_id == experiment.job_id:
                scheduled = any(t.placed for t in queue if t.job_id == experiment.job_id)
                state_name = "STATE_SCHEDULED" if scheduled else "STATE_QUEUED"
                summary = {"state": state_name, "jobsAhead": ahead}
                break
    return json_response(
        {
            "experiment": experiment_record_json(state, experiment, listed=False),
            "jobSummary": summary,
            "config": experiment.config,
        }
    )


# -- trials ----------------------------------------------------------------------------


def _trial_db_state(task: Task) -> str:
    return "ACTIVE" if task.end_state is None else _TRIAL_END[task.end_state]


def trial_json(state: MasterState, experiment: Experiment, task: Task) -> JsonObject:
    """A trial as proto_get_trials_plus.sql and enrichTrialState make it: started when the
    searcher created it, its one task, its wall-clock time the allocation's run so far."""
    db_state = _trial_db_state(task)
    shown = f"STATE_{db_state}"
    if db_state == "ACTIVE":
        shown = "STATE_RUNNING" if task.placed else "STATE_QUEUED"
    wall = 0.0
    if task.started is not None:
        wall = ((task.ended or state.now) - task.started).total_seconds()
    return {
        "id": task.trial_id,
        "experimentId": experiment.id,
        "startTime": timestamp(task.submitted),
        "endTime": None if task.ended is None else timestamp(task.ended),
        "state": shown,
        "restarts": 0,
        "hparams": dict(experiment.config.get("hyperparameters") or {}),
        "totalBatchesProcessed": 0,
        "bestValidation": None,
        "latestValidation": None,
        "bestCheckpoint": None,
        "runnerState": "",
        "wallClockTime": _number(wall),
        "warmStartCheckpointUuid": "",
        "taskId": task.task_id,
        "totalCheckpointSize": "0",
        "checkpointCount": 0,
        "summaryMetrics": {},
        "taskIds": [task.task_id],
        "searcherMetricValue": 0,
    }


def get_experiment_trials(
    state: MasterState, request: Request, __: User | None, experiment_id: str
) -> Response:
    """GET /api/v1/experiments/{id}/trials: ``states`` (the stored state: ACTIVE while it
    runs), ``sortBy`` (id, start or end time, state) then id, ``orderBy``, paged as the
    database pages (page_info)."""
    experiment = _experiment(state, experiment_id)
    params = QueryParams(request)
    sort_by = params.enum("sortBy", TRIAL_SORT_BY)
    order_by = params.enum("orderBy", ORDER_BY)
    offset, limit = params.int32("offset"), params.int32("limit")
    states = {s.removeprefix("STATE_") for s in params.enums("states", EXPERIMENT_STATES)}
    trials = [state.any_task(t) for t in experiment.task_ids]
    found = [t for t in trials if t is not None and (not states or _trial_db_state(t) in states)]
    keys: dict[str, Callable[[Task], Any]] = {
        "SORT_BY_UNSPECIFIED": lambda t: t.trial_id,
        "SORT_BY_ID": lambda t: t.trial_id,
        "SORT_BY_START_TIME": lambda t: t.submitted,
        "SORT_BY_END_TIME": lambda t: t.ended,
        "SORT_BY_STATE": _trial_db_state,
    }
    if sort_by not in keys:
        raise ApiError(12, f"sorting trials by {sort_by} is not modelled by LocalDetermined")
    descending = order_by == "ORDER_BY_DESC"
    found = sorted(found, key=lambda t: t.trial_id or 0, reverse=descending)
    found = _sort_key(found, keys[sort_by], descending, nulls_last=False)  # plain DESC
    page, pagination = page_info(found, offset, limit)
    return json_response(
        {"trials": [trial_json(state, experiment, t) for t in page], "pagination": pagination}
    )


# -- a task and its allocations --------------------------------------------------------


def postgres_json_time(when: datetime) -> str:
    """A timestamptz as PostgreSQL's to_json writes it (get_task.sql aggregates allocations
    with JSONB_AGG, so Allocation's times are these strings): fraction trimmed, +00:00."""
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    if when.microsecond:
        text += f".{when.microsecond:06d}".rstrip("0")
    return text + "+00:00"


def task_json(task: Task) -> JsonObject:
    """get_task.sql: the task's type, its start (creation) and end, and its allocation.
    The allocation's ``slots`` is 0 as the query selects none (the column exists: the
    allocations CSV reads it); its times are its run's, absent if it never started; its
    state QUEUED before it is placed (PENDING and ASSIGNED), RUNNING, then TERMINATED."""
    allocation: JsonObject = {
        "taskId": task.task_id,
        "state": "STATE_QUEUED",
        "allocationId": task.allocation_id,
        "slots": 0,
    }
    if task.started is not None:
        allocation["isReady"] = True
        allocation["startTime"] = postgres_json_time(task.started)
        allocation["state"] = "STATE_RUNNING"
    if task.ended is not None:
        allocation["state"] = "STATE_TERMINATED"
        if task.started is not None:  # markResourcesReleased: no end without a start
            allocation["endTime"] = postgres_json_time(task.ended)
    out: JsonObject = {
        "taskId": task.task_id,
        "taskType": f"TASK_TYPE_{task.type}",
        "allocations": [allocation],
        "startTime": timestamp(task.submitted),
    }
    if task.ended is not None:  # proto3 optional
        out["endTime"] = timestamp(task.ended)
    return out


def get_task(state: MasterState, _: Request, __: User | None, task_id: str) -> Response:
    """GET /api/v1/tasks/{taskId}: a task queued, running or ended."""
    task = state.any_task(task_id)
    if task is None:
        raise not_found("task", task_id)
    return json_response({"task": task_json(task)})


# -- the raw resource allocation -------------------------------------------------------


def _overlap(start: datetime, end: datetime | None, after: datetime, before: datetime) -> float:
    """PostgreSQL's ``period && tstzrange(start, end)`` and the seconds of ``period *
    range``; -1 when they do not overlap (an open end runs forever)."""
    upper = before if end is None else min(end, before)
    lower = max(start, after)
    return (upper - lower).total_seconds() if lower < upper else -1.0


def _number(seconds: float) -> float | int:
    return int(seconds) if seconds.is_integer() else seconds


def raw_allocation_entries(
    state: MasterState, after: datetime, before: datetime
) -> list[JsonObject]:
    """get_raw_allocation.sql's rows for the period: each ended trial's allocation (one
    ``training`` span here) and each agent's stay (``agent``, its id as the username), in
    start order."""
    entries: list[tuple[datetime, JsonObject]] = []
    for experiment in state.records.values():
        for task_id in experiment.task_ids:
            task = state.history.get(task_id)
            if task is None or task.started is None or task.ended is None:
                continue
            seconds = _overlap(task.started, task.ended, after, before)
            if seconds < 0:
                continue
            entry = {
                "kind": "training",
                "startTime": timestamp(task.started),
                "endTime": timestamp(task.ended),
                "experimentId": experiment.id,
                "username": experiment.user.username,
                "userId": experiment.user.id,
                "labels": list(experiment.config.get("labels") or []),
                "seconds": _number(seconds),
                "slots": task.slots,  # the config's resources.slots_per_trial
            }
            entries.append((task.started, entry))
    for stay in state.agent_stats:
        seconds = _overlap(stay.start, stay.end, after, before)
        if seconds < 0:
            continue
        entry = {
            "kind": "agent",
            "startTime": timestamp(stay.start),
            "endTime": None if stay.end is None else timestamp(stay.end),
            "experimentId": 0,
            "username": stay.agent_id,
            "userId": 0,
            "labels": [],
            "seconds": _number(seconds),
            "slots": stay.slots,
        }
        entries.append((stay.start, entry))
    entries.sort(key=lambda e: e[0])
    return [entry for _, entry in entries]


def resource_allocation_raw(state: MasterState, request: Request, _: User | None) -> Response:
    """GET /api/v1/resources/allocation/raw?timestamp_after=&timestamp_before= (any user:
    CanGetUsageDetails allows all), with api_master.go's checks in its order."""
    params = QueryParams(request)
    after, before = params.timestamp("timestampAfter"), params.timestamp("timestampBefore")
    if after is None:
        raise ApiError(3, "no start time provided")
    if before is None:
        raise ApiError(3, "no end time provided")
    if after > before:
        raise ApiError(3, "start time cannot be after end time")
    return json_response({"resourceEntries": raw_allocation_entries(state, after, before)})


# -- the allocations CSV ---------------------------------------------------------------

ALLOCATIONS_CSV: Final = "/resources/allocation/allocations-csv"
_CSV_HEADER: Final = (
    "allocation_id",
    "task_type",
    "username",
    "workspace_name",
    "experiment_id",
    "slots",
    "start_time",
    "end_time",
    "imagepulling_time",
    "slot_hours",
    "resource_pool",
)
_CSV_TIME: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


def echo_error(status: int, message: str) -> Response:
    """api.JSONErrorHandler: an echo route's error, ``{"message": ...}`` and a newline."""
    body = json.dumps({"message": message}) + "\n"
    return Response(body, status=status, content_type="application/json")


def _csv_time(raw: str, which: str) -> datetime:
    """time.Parse("2006-01-02T15:04:05Z", raw): whole seconds and a literal Z only."""
    if not _CSV_TIME.fullmatch(raw):
        raise ValueError(
            f'invalid {which} time: parsing time "{raw}" as "2006-01-02T15:04:05Z": '
            f'cannot parse "{raw}" as "2006"'
        )
    return datetime.fromisoformat(raw[:-1] + "+00:00")


def _ranges_meet(
    lower: datetime | None, upper: datetime, after: datetime, before: datetime
) -> bool:
    """PostgreSQL's ``tstzrange(lower, upper) && tstzrange(after, before)`` (a NULL lower is
    unbounded, an empty range meets nothing)."""
    if lower is not None and lower >= upper:
        return False
    return (lower is None or lower < before) and after < upper


def _go_time(when: datetime | None) -> str:
    """time.RFC3339Nano: trailing zeros of the fraction dropped; empty for no time."""
    if when is None:
        return ""
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    if when.microsecond:
        text += f".{when.microsecond:06d}".rstrip("0")
    return text + "Z"


def allocation_rows(state: MasterState, after: datetime, before: datetime) -> list[list[str]]:
    """core.go getResourceAllocations' rows: each allocation whose run (an allocation that
    never started: everything up to now, as its NULL start makes the range unbounded)
    meets the period, in start order (never started last), with its task's type if the
    task meets the period too (a minute before its start on), its owner (none for a
    checkpoint GC, which has no job), its workspace (trials and commands, notebooks,
    shells, TensorBoards have one), its slots, pool and slot-hours within the period.
    Image pulls are not modelled (0.0)."""
    now = state.now
    tasks = sorted(
        [*state.history.values(), *state.tasks.values()],
        key=lambda t: (t.started is None, t.started or now, t.allocation_id),
    )
    rows: list[list[str]] = []
    for task in tasks:
        start = task.started
        lower = None if start is None else start - timedelta(microseconds=1)
        # markResourcesReleased records no end for an allocation that never started
        upper = now if start is None else max(start, task.ended or now)
        if not _ranges_meet(lower, upper, after, before):
            continue
        task_upper = max(task.submitted, task.ended or now)
        in_range = _ranges_meet(task.submitted - timedelta(minutes=1), task_upper, after, before)
        slot_seconds = 0.0
        if start is not None:
            run_end = min(max(task.ended or now, start), before)
            slot_seconds = (run_end - max(start, after)).total_seconds() * task.slots
        with_workspace = task.type != "CHECKPOINT_GC"
        experiment_id = int(task.entity_id) if task.type == "TRIAL" else 0
        rows.append(
            [
                task.allocation_id,
                task.type if in_range else "",
                task.username if task.job_id is not None else "",
                "Uncategorized" if with_workspace else "",
                str(experiment_id) if experiment_id else "",
                str(task.slots),
                _go_time(start),
                _go_time(task.ended if start is not None else None),
                "0.0",
                f"{slot_seconds / 3600:f}" if slot_seconds else "0.0",
                task.pool,
            ]
        )
    return rows


def allocations_csv(state: MasterState, request: Request) -> Response:
    """GET /resources/allocation/allocations-csv?timestamp_after=&timestamp_before= (echo,
    not the gateway): a bad or missing time, or a start after the end, is a plain Go error,
    so HTTP 500 ``{"message": ...}``."""
    try:
        after = _csv_time(request.args.get("timestamp_after", ""), "start")
        before = _csv_time(request.args.get("timestamp_before", ""), "end")
    except ValueError as exc:
        return echo_error(500, str(exc))
    if after > before:
        return echo_error(500, "start time cannot be after end time")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_CSV_HEADER)
    writer.writerows(allocation_rows(state, after, before))
    return Response(out.getvalue(), status=200, content_type="text/csv")
