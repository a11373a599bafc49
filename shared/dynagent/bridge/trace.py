"""``dynagent trace``: the master's own records of recent work, as a job trace that
``dynagent simulate`` replays (the plain form of ``dynagent.simulate.trace``).

What it reads, all through the master's REST API, as any user may (no cloud credentials):

- the allocations CSV of the period (``core.go`` getResourceAllocations): one row per
  allocation with its task type, slots, pool, start and end: the one record of every
  kind of work (trials, commands, notebooks, shells, TensorBoards, checkpoint GCs);
- each task (``GET /api/v1/tasks/{taskId}``): its ``startTime`` is when it was
  submitted, the job's arrival. An allocation's id is its task's id, a dot and its
  number (``trial.go``, ``command.go``, ``checkpoint_gc.go``: ``"%s.%d"``);
- each experiment of a trial (``GET /api/v1/experiments/{id}``), once: its config's
  ``resources.priority`` and ``resources.is_single_node``. A trial's task id starts with
  its experiment's id (experiment.go trialTaskID, ``"%d.%s"``). Commands, notebooks,
  shells and TensorBoards have no such record once they exit: the master keeps their
  configs only while they run (command_service.go unregisterCommand);
- the raw resource allocation (``GET /api/v1/resources/allocation/raw``): each agent's
  stay with its slots, for the GPU-hours the master's agents were up, their pool from
  ``GET /api/v1/agents`` (only the agents still connected list one).

How far back: as far as the master's database goes. Determined deletes none of these
records (its ``retention_policy`` covers task logs only); deleting an experiment removes
its config, so its trials fall back to the defaults below.

What the trace approximates, as its summary says: a task's allocations are one job, their
run times summed (a restarted trial's gaps dropped) at its first allocation's slots;
a command's, notebook's, shell's or TensorBoard's priority is left empty (Determined's
default), as is a trial's whose experiment cannot be read; where a task cannot be read,
its arrival is its start and the replay's waits are a lower bound; an allocation still
running at ``--until`` is cut there, one that began before ``--since`` counts from
``--since``.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from dynagent.core.durations import parse_duration

from .client import MasterClient, MasterUnavailable
from .command import add_master_options, master_client

# The plain trace form's columns (dynagent/simulate/trace.py), with the optional ones a
# reader of the file wants: where the job ran, what it was, and which task it is.
TRACE_COLUMNS = (
    "arrival_s",
    "duration_s",
    "gpus",
    "priority",
    "single_agent",
    "pool",
    "task_type",
    "task_id",
)
# Task types the master places on one agent: every task but a trial's (an experiment's
# trial may span agents unless its config says is_single_node). model/task.go TaskType.
SINGLE_AGENT_TYPES = frozenset({"COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD", "CHECKPOINT_GC"})
# The CSV's query times: core.go parses them with this layout, whole seconds in UTC.
_QUERY_TIME = "%Y-%m-%dT%H:%M:%SZ"
# Determined's bounds on a priority (experiment_config.go ValidatePrioritySetting).
_PRIORITIES = range(1, 100)
# Reads of tasks and experiments in flight at once: one call each, so a month of a busy
# master is minutes one by one; a handful at once is what a user's client may ask.
READERS = 8
_DAYS = re.compile(r"(\d+(?:\.\d*)?)d")


def add_parser(commands: Any) -> None:
    trace = commands.add_parser(
        "trace",
        help="your own cluster's recent work, read from its master, as a trace to simulate",
        description="Read a Determined master's records of the work it ran (its allocations "
        "CSV, its tasks and its agents' stays) and write a job trace that dynagent "
        "simulate replays. Reads only, as any user may. Credentials: DET_USER and DET_PASS, "
        "or --token-file.",
    )
    add_master_options(trace)
    trace.add_argument(
        "--since",
        required=True,
        metavar="DURATION",
        help="how far back before --until, like 30d, 12h or 1d12h; or a time, 2026-01-31T00:00:00Z",
    )
    trace.add_argument(
        "--until",
        metavar="TIME",
        help="the period's end, like 2026-01-31T00:00:00Z (default: now)",
    )
    trace.add_argument("--out", required=True, metavar="FILE", help="the trace CSV to write")
    trace.set_defaults(run=run)


def run(args: argparse.Namespace, err: TextIO | None = None) -> int:
    err = err or sys.stderr
    until = parse_time(args.until, "--until") if args.until else datetime.now(UTC)
    since = period_start(args.since, until)
    master = master_client(args)  # after the period: a bad one is said before credentials
    try:
        traced = read_trace(master, since, until)
    except MasterUnavailable as error:
        print(
            f"dynagent trace: the master at {master.url} could not be read ({error}): no "
            "trace written; check that --master (or DET_MASTER) is the master's URL and "
            "that DET_USER and DET_PASS, or --token-file, may log in to it",
            file=err,
        )
        return 1
    with open(args.out, "w", newline="") as handle:
        handle.write(traced.csv_text())
    for line in traced.summary():
        print(line, file=err)
    print(f"wrote {len(traced.jobs)} jobs to {args.out}", file=err)
    return 0


# -- the period ------------------------------------------------------------------------


def parse_time(text: str, flag: str) -> datetime:
    """An ISO 8601 time (``Z`` or an offset; UTC if none), or ValueError naming the flag."""
    try:
        return _utc(text.strip().replace("z", "Z"))
    except ValueError:
        raise ValueError(
            f"{flag} {text!r} is not a time: write it like 2026-01-31T00:00:00Z"
        ) from None


def _utc(text: str) -> datetime:
    # fromisoformat reads Z, offsets and Go's nine fraction digits (truncated to six).
    when = datetime.fromisoformat(text)
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def period_start(since: str, until: datetime) -> datetime:
    """--since: a duration back from ``until`` (days as ``d``, then Go's units), or a time."""
    text = since.strip()
    if "T" in text or text.count("-") >= 2:
        start = parse_time(text, "--since")
    else:
        try:
            start = until - _duration(text)
        except OverflowError:
            raise ValueError(
                f"--since {since!r} reaches back before the year 1: write a shorter period"
            ) from None
    if start >= until:
        raise ValueError(f"--since {since!r} is not before --until {_query_time(until)}")
    return start


def _duration(text: str) -> timedelta:
    days = _DAYS.match(text)
    rest = text[days.end() :] if days else text
    try:
        length = timedelta(days=float(days.group(1))) if days else timedelta(0)
        if rest or not days:
            length += parse_duration(rest)
    except ValueError:
        raise ValueError(
            f"--since {text!r} is not a duration: write it like 30d, 12h or 1d12h, or a time "
            "like 2026-01-31T00:00:00Z"
        ) from None
    if length <= timedelta(0):
        raise ValueError(f"--since {text!r}: the period must be longer than 0")
    return length


def _query_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime(_QUERY_TIME)


def _csv_time(text: str) -> datetime | None:
    """A time of the CSV (RFC 3339, Go's nanoseconds at most), or None when empty."""
    return _utc(text) if text else None


# -- the records, as jobs --------------------------------------------------------------


@dataclass
class TracedJob:
    """One task of the period: its allocations' run times summed, at its first's slots."""

    task_id: str
    task_type: str
    pool: str
    gpus: int
    first_start: datetime
    run_seconds: float = 0.0
    allocations: int = 0
    arrival: datetime | None = None  # when it was submitted, if the master says
    priority: int | None = None  # a trial's, from its experiment's config
    single_node: bool = False  # a trial's resources.is_single_node

    @property
    def single_agent(self) -> bool:
        return self.task_type in SINGLE_AGENT_TYPES or self.single_node

    @property
    def experiment_id(self) -> str | None:
        """A trial's experiment: its task id's first part (experiment.go trialTaskID)."""
        head = self.task_id.split(".", 1)[0]
        return head if self.task_type == "TRIAL" and head.isdigit() else None


@dataclass
class Traced:
    """What ``dynagent trace`` read: the jobs, and the counts its summary reports."""

    since: datetime
    until: datetime
    jobs: list[TracedJob]
    cut_at_until: int = 0
    began_before: int = 0
    never_started: int = 0
    without_arrival: list[str] = field(default_factory=list)
    configured_trials: int = 0  # trials whose experiment's config was read
    unread_experiments: dict[str, int] = field(default_factory=dict)  # id: its trials
    agents_up: dict[str, float] = field(default_factory=dict)  # pool: GPU-seconds
    unattributed_agents: dict[str, float] = field(default_factory=dict)  # agent: GPU-s
    agents_unread: str = ""  # why the agents' stays could not be read, if so

    def arrival_s(self, job: TracedJob) -> float:
        arrival = job.arrival if job.arrival is not None else job.first_start
        return max(0.0, (arrival - self.since).total_seconds())

    def csv_text(self) -> str:
        out = io.StringIO()
        out.write(
            f"# dynagent trace: the master's records from {_query_time(self.since)} to "
            f"{_query_time(self.until)}; dynagent simulate reads the records below\n"
        )
        preamble = csv.writer(out, lineterminator="\n")
        for record in self.as_it_ran():
            out.write("# ")
            preamble.writerow(record)
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(TRACE_COLUMNS)
        for job in sorted(self.jobs, key=lambda j: (self.arrival_s(j), j.task_id)):
            writer.writerow(
                [
                    _seconds(self.arrival_s(job)),
                    _seconds(job.run_seconds),
                    job.gpus,
                    "" if job.priority is None else job.priority,  # empty: the default
                    "true" if job.single_agent else "false",
                    job.pool,
                    job.task_type,
                    job.task_id,
                ]
            )
        return out.getvalue()

    def as_it_ran(self) -> list[list[str]]:
        """The preamble's records (simulate/trace.py): the period, each pool's agents' up."""
        records = [["period_s", _seconds((self.until - self.since).total_seconds())]]
        for pool, gpu_seconds in sorted(self.agents_up.items()):
            records.append(["agents_up_gpu_hours", pool, f"{gpu_seconds / 3600:.3f}"])
        return records

    def summary(self) -> list[str]:
        length = self.until - self.since
        lines = [
            f"dynagent trace: {_query_time(self.since)} to {_query_time(self.until)} "
            f"({length.total_seconds() / 86400:.1f} days), {len(self.jobs)} jobs"
        ]
        by_pool: dict[str, list[TracedJob]] = defaultdict(list)
        for job in self.jobs:
            by_pool[job.pool].append(job)
        for pool in sorted(set(by_pool) | set(self.agents_up)):
            jobs = by_pool.get(pool, [])
            busy = sum(job.gpus * job.run_seconds for job in jobs) / 3600
            line = f"  pool {pool}: {len(jobs)} jobs, {busy:.2f} busy GPU-hours"
            if pool in self.agents_up:
                line += f"; its agents were up {self.agents_up[pool] / 3600:.2f} GPU-hours"
            lines.append(line)
        if self.unattributed_agents:
            up = sum(self.unattributed_agents.values()) / 3600
            names = ", ".join(sorted(self.unattributed_agents))
            lines.append(
                f"  agents no longer connected, so of no known pool ({names}): up {up:.2f} "
                "GPU-hours"
            )
        if self.agents_unread:
            lines.append(f"  the agents' up time could not be read: {self.agents_unread}")
        lines.append("approximated:")
        lines.append(
            f"  priority and single_agent: {self.configured_trials} trials' from their "
            "experiments' configs"
        )
        lines.append(
            "  commands, notebooks, shells, TensorBoards: Determined's default priority "
            "(the master keeps their configs only while they run)"
        )
        if self.unread_experiments:
            names = ", ".join(sorted(self.unread_experiments, key=int))
            trials = sum(self.unread_experiments.values())
            lines.append(
                f"  {len(self.unread_experiments)} experiments could not be read (deleted?: "
                f"{names}): their {trials} trials at the default priority, free to span agents"
            )
        lines.append(
            "  a task of several allocations is one job: their run times summed, its first "
            "allocation's slots"
        )
        if self.without_arrival:
            lines.append(
                f"  {len(self.without_arrival)} tasks could not be read: their arrival is "
                "their start, so the replay's waits for them are a lower bound"
            )
        else:
            lines.append("  arrivals: when each task was submitted (the master's task records)")
        if self.cut_at_until:
            lines.append(f"  {self.cut_at_until} allocations still running at --until: cut there")
        if self.began_before:
            lines.append(
                f"  {self.began_before} allocations began before --since: counted from --since"
            )
        if self.never_started:
            lines.append(f"  {self.never_started} allocations never started: left out")
        return lines


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


def read_trace(
    master: MasterClient, since: datetime, until: datetime, readers: int = READERS
) -> Traced:
    """The period's jobs from the master's records; MasterUnavailable if they cannot be
    read. ``readers``: how many reads of tasks and experiments are in flight at once."""
    # The CSV's times are whole seconds: widen the query to take in the whole period.
    after = since.replace(microsecond=0)
    before = until + timedelta(seconds=1) if until.microsecond else until
    rows = list(
        csv.DictReader(io.StringIO(master.allocations_csv(*map(_query_time, (after, before)))))
    )
    traced = Traced(since, until, [])
    jobs: dict[str, TracedJob] = {}
    for row in rows:
        _add_allocation(traced, jobs, row)
    traced.jobs = list(jobs.values())
    _read_tasks(master, traced, readers)
    _read_experiments(master, traced, readers)
    _read_agents(master, traced)
    return traced


def _add_allocation(traced: Traced, jobs: dict[str, TracedJob], row: Mapping[str, str]) -> None:
    start, end = _csv_time(row.get("start_time", "")), _csv_time(row.get("end_time", ""))
    if start is None:
        traced.never_started += 1
        return
    if start >= traced.until or (end is not None and end <= traced.since):
        return  # the CSV's ranges are whole seconds: this one is outside the period
    if end is None or end > traced.until:
        traced.cut_at_until += 1
        end = traced.until
    if start < traced.since:
        traced.began_before += 1
        start = traced.since
    # An allocation's id is its task's id and its number (trial.go "%s.%d").
    task_id = row["allocation_id"].rsplit(".", 1)[0]
    job = jobs.get(task_id)
    if job is None:
        job = jobs[task_id] = TracedJob(
            task_id=task_id,
            task_type=row.get("task_type", ""),
            pool=row.get("resource_pool", ""),
            gpus=int(row.get("slots") or 0),
            first_start=start,
        )
    job.first_start = min(job.first_start, start)
    job.run_seconds += (end - start).total_seconds()
    job.allocations += 1


def _read_tasks(master: MasterClient, traced: Traced, readers: int) -> None:
    """Each job's arrival (its task's submission) and, where the CSV lacks it, its type."""

    def read(job: TracedJob) -> dict[str, Any] | None:
        try:
            return master.task(job.task_id)
        except MasterUnavailable:
            return None

    for job, task in zip(traced.jobs, _read_each(traced.jobs, read, readers), strict=True):
        submitted = _csv_time(str(task.get("startTime") or "")) if task else None
        if submitted is None:
            traced.without_arrival.append(job.task_id)
        else:
            job.arrival = min(submitted, job.first_start)
        if task and not job.task_type:  # the CSV names the type only within the period
            job.task_type = str(task.get("taskType") or "").removeprefix("TASK_TYPE_")


def _read_experiments(master: MasterClient, traced: Traced, readers: int) -> None:
    """Each trial's priority and is_single_node, from its experiment's config, read once."""
    trials: dict[str, list[TracedJob]] = defaultdict(list)
    for job in traced.jobs:
        if job.experiment_id is not None:
            trials[job.experiment_id].append(job)

    def read(experiment_id: str) -> dict[str, Any] | None:
        try:
            return master.experiment_config(experiment_id)
        except MasterUnavailable:
            return None

    for experiment_id, config in zip(trials, _read_each(list(trials), read, readers), strict=True):
        if config is None:
            traced.unread_experiments[experiment_id] = len(trials[experiment_id])
            continue
        resources = config.get("resources")
        resources = resources if isinstance(resources, dict) else {}
        priority = resources.get("priority")
        for job in trials[experiment_id]:
            if isinstance(priority, int) and priority in _PRIORITIES:
                job.priority = priority
            job.single_node = resources.get("is_single_node") is True
        traced.configured_trials += len(trials[experiment_id])


def _read_each(items: list[Any], read: Callable[[Any], Any], readers: int) -> list[Any]:
    """``read`` of each item, in order, ``readers`` at a time: each call waits on the master."""
    if len(items) <= 1 or readers <= 1:
        return [read(item) for item in items]
    with ThreadPoolExecutor(max_workers=readers) as pool:
        return list(pool.map(read, items))


def _read_agents(master: MasterClient, traced: Traced) -> None:
    """Each agent's GPU-seconds up in the period, by its pool where it is still connected."""
    try:
        entries = master.raw_allocation(
            traced.since.isoformat().replace("+00:00", "Z"),
            traced.until.isoformat().replace("+00:00", "Z"),
        )
        pools = {
            str(agent.get("id")): str((agent.get("resourcePools") or [""])[0])
            for agent in master.agents()
        }
    except MasterUnavailable as error:
        traced.agents_unread = str(error)
        return
    for entry in _agent_entries(entries):
        agent, gpu_seconds = str(entry.get("username")), _agent_gpu_seconds(entry)
        pool = pools.get(agent)
        into = traced.agents_up if pool else traced.unattributed_agents
        key = pool or agent
        into[key] = into.get(key, 0.0) + gpu_seconds


def _agent_entries(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    # get_raw_allocation.sql: kind 'agent' rows, the agent's id in the username column.
    return [entry for entry in entries if entry.get("kind") == "agent"]


def _agent_gpu_seconds(entry: Mapping[str, Any]) -> float:
    return float(entry.get("seconds") or 0) * int(entry.get("slots") or 0)
