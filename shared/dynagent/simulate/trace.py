"""A job trace: what a cluster's users asked for, and when.

Two CSV forms are read, told apart by their header:

- the ITP form of the shared traces: ``job_id,submission_time,duration,num_gpu``;
- a plain form: ``arrival_s,duration_s,gpus[,priority][,single_agent][,pool]
  [,task_type][,task_id]``. ``priority`` is the job's scheduling priority, 1 to 99 as
  Determined accepts it, a lower number first (empty: Determined's default, 42);
  ``single_agent`` (true/false, empty: false) keeps it on one agent. ``pool`` is the
  resource pool the job ran in: ``dynagent simulate`` replays one pool's jobs
  (Trace.of_pool). ``task_type`` (TRIAL, COMMAND...) and ``task_id`` are for the reader;
  ``task_id`` is the job's id (else ids are made up, ``job-1``...). ``dynagent trace``
  writes this form from a master's own records.

Times are whole seconds from the start of the trace, as the ITP traces give them. A
job of 0 GPUs is a zero-slot task (a command, a checkpoint GC): it uses no slot.

Lines before the header that start with ``#`` are the trace's preamble: free text, and
CSV records that ``dynagent trace`` writes of the period as it ran: ``# period_s,N``
(the period's length) and ``# agents_up_gpu_hours,POOL,H`` (the GPU-hours the master's
own agents of that pool were up in it), which ``dynagent simulate`` sets beside its
figures.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# The columns of each accepted form, in file order: id (if any), arrival, duration, GPUs.
ITP_COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")
PLAIN_COLUMNS = ("arrival_s", "duration_s", "gpus")
# Columns a form may add; the ITP traces have none.
OPTIONAL_COLUMNS: dict[tuple[str, ...], tuple[str, ...]] = {
    PLAIN_COLUMNS: ("priority", "single_agent", "pool", "task_type", "task_id")
}
_FORMS = (ITP_COLUMNS, PLAIN_COLUMNS)
# Determined's bounds on a priority (experiment_config.go ValidatePrioritySetting).
MIN_PRIORITY, MAX_PRIORITY = 1, 99
_BOOLEANS = {
    "": False,
    "false": False,
    "0": False,
    "no": False,
    "true": True,
    "1": True,
    "yes": True,
}


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message names the file and row."""


# Determined's default scheduling priority (scheduler_config.go DefaultSchedulingPriority).
DEFAULT_PRIORITY = 42


@dataclass(frozen=True)
class Job:
    """One job of the trace: it arrives, asks for ``gpus`` slots, and runs ``duration`` s.

    ``priority`` is its priority in the master's priority scheduler (a lower number goes
    first); ``single_agent`` keeps it on one agent (a command, a notebook, or an
    experiment with ``resources.is_single_node``)."""

    id: str
    arrival: int
    duration: int
    gpus: int
    priority: int = DEFAULT_PRIORITY
    single_agent: bool = False
    pool: str = ""  # the resource pool it ran in, where the trace says
    task_type: str = ""  # Determined's task type, where the trace says


@dataclass(frozen=True)
class Trace:
    """The jobs of one trace, in arrival order."""

    name: str
    jobs: tuple[Job, ...]
    # The period as it ran, where the trace's preamble says (dynagent trace): its length,
    # and the GPU-hours the master's own agents were up, by pool.
    period_s: float | None = None
    agents_up_gpu_hours: Mapping[str, float] = field(default_factory=dict)

    @property
    def busy_gpu_seconds(self) -> int:
        """GPU-seconds the jobs use: what a perfect fleet would bill (the physical limit)."""
        return sum(job.gpus * job.duration for job in self.jobs)

    @property
    def pools(self) -> list[str]:
        """The pools the trace's jobs name, in order (none: a trace without pools)."""
        return sorted({job.pool for job in self.jobs if job.pool})

    def of_pool(self, pool: str) -> Trace:
        """The jobs of one pool; a trace that names no pools is all one pool's."""
        if not self.pools:
            return self
        up = {pool: self.agents_up_gpu_hours[pool]} if pool in self.agents_up_gpu_hours else {}
        jobs = tuple(job for job in self.jobs if job.pool == pool)
        return Trace(self.name, jobs, self.period_s, up)

    @property
    def start(self) -> int:
        return self.jobs[0].arrival if self.jobs else 0

    @property
    def end(self) -> int:
        """When the last job would finish, had every job started on arrival."""
        return max((job.arrival + job.duration for job in self.jobs), default=0)


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a trace CSV in either form; raise TraceError naming what is wrong."""
    source = os.fspath(path)
    try:
        with open(source, newline="") as handle:
            preamble = []
            line = handle.readline()
            while line.startswith("#"):
                preamble.append(line)
                line = handle.readline()
            reader = csv.DictReader([line, *handle])
            rows = list(reader)
            header = frozenset(name.strip() for name in reader.fieldnames or ())
    except OSError as error:
        raise TraceError(f"cannot read trace {source!r}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise TraceError(f"{source}: not a text CSV (byte {error.start}): {error.reason}") from None
    trace = trace_from_rows(Path(source).stem, rows, header, source, len(preamble) + 2)
    return _as_it_ran(trace, preamble, source)


def trace_from_rows(
    name: str,
    rows: Iterable[Mapping[str, str]],
    header: frozenset[str] | None = None,
    source: str = "<trace>",
    first_line: int = 2,
) -> Trace:
    rows = list(rows)
    if header is None:
        header = frozenset(key.strip() for key in rows[0]) if rows else frozenset()
    form = _form(header)
    if form is None:
        expected = " or ".join(_describe(form) for form in _FORMS)
        raise TraceError(f"{source}: unknown columns {sorted(header)}; expected {expected}")
    if not rows:
        raise TraceError(f"{source}: no jobs")
    jobs = [
        _job(row, line, line - first_line + 1, form, source)
        for line, row in enumerate(rows, start=first_line)
    ]
    # A stable sort keeps the file's order among jobs that arrive together.
    jobs.sort(key=lambda job: job.arrival)
    return Trace(name, tuple(jobs))


def _form(header: frozenset[str]) -> tuple[str, ...] | None:
    """The form whose columns the header has, with none but its optional ones besides."""
    for form in _FORMS:
        if set(form) <= header and header - set(form) <= set(OPTIONAL_COLUMNS.get(form, ())):
            return form
    return None


def _describe(form: tuple[str, ...]) -> str:
    return ",".join(form) + "".join(f"[,{column}]" for column in OPTIONAL_COLUMNS.get(form, ()))


def _job(row: Mapping[str, str], line: int, number: int, form: tuple[str, ...], source: str) -> Job:
    *id_column, arrival, duration, gpus = form
    values = {key.strip(): (value or "").strip() for key, value in row.items() if key}
    try:
        job = Job(
            id=values[id_column[0]] if id_column else values.get("task_id") or f"job-{number}",
            arrival=_seconds(values[arrival]),
            duration=_seconds(values[duration]),
            gpus=int(values[gpus]),
            priority=int(values.get("priority") or DEFAULT_PRIORITY),
            single_agent=_boolean(values.get("single_agent", "")),
            pool=values.get("pool", ""),
            task_type=values.get("task_type", ""),
        )
    except ValueError as error:
        raise TraceError(f"{source}: line {line}: {error}") from None
    if job.arrival < 0 or job.duration < 0:
        raise TraceError(f"{source}: line {line}: a negative time in {dict(values)}")
    if job.gpus < 0:
        raise TraceError(f"{source}: line {line}: a negative number of GPUs, {job.gpus}")
    if not MIN_PRIORITY <= job.priority <= MAX_PRIORITY:
        raise TraceError(
            f"{source}: line {line}: priority {job.priority} is not within "
            f"{MIN_PRIORITY}..{MAX_PRIORITY}"
        )
    return job


def _as_it_ran(trace: Trace, preamble: list[str], source: str) -> Trace:
    """The trace with its preamble's records of the period as it ran (others are text)."""
    period_s, up = None, {}
    for line, text in enumerate(preamble, start=1):
        record = next(csv.reader(io.StringIO(text[1:].strip())), [])
        key = record[0].strip() if record else ""
        try:
            if key == "period_s" and len(record) == 2:
                period_s = float(record[1])
            elif key == "agents_up_gpu_hours" and len(record) == 3:
                up[record[1]] = float(record[2])
        except ValueError:
            raise TraceError(
                f"{source}: line {line}: {key} is not a number: {text.strip()}"
            ) from None
    return Trace(trace.name, trace.jobs, period_s, up)


def _boolean(text: str) -> bool:
    try:
        return _BOOLEANS[text.lower()]
    except KeyError:
        raise ValueError(f"single_agent must be true or false, got {text!r}") from None


def _seconds(text: str) -> int:
    """Whole seconds; a fraction is rounded, since the simulation's clock ticks in seconds."""
    return round(float(text))
