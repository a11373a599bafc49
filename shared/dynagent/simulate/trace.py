"""A job trace: what a cluster's users asked for, and when.

Two CSV forms are read, told apart by their header:

- the ITP form of the shared traces: ``job_id,submission_time,duration,num_gpu``;
- a plain form: ``arrival_s,duration_s,gpus`` (job ids are made up, ``job-1``...).

Times are whole seconds from the start of the trace, as the ITP traces give them.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# The columns of each accepted form, in file order: id (if any), arrival, duration, GPUs.
ITP_COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")
PLAIN_COLUMNS = ("arrival_s", "duration_s", "gpus")
_FORMS = {frozenset(form): form for form in (ITP_COLUMNS, PLAIN_COLUMNS)}


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


@dataclass(frozen=True)
class Trace:
    """The jobs of one trace, in arrival order."""

    name: str
    jobs: tuple[Job, ...]

    @property
    def busy_gpu_seconds(self) -> int:
        """GPU-seconds the jobs use: what a perfect fleet would bill (the physical limit)."""
        return sum(job.gpus * job.duration for job in self.jobs)

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
            reader = csv.DictReader(handle)
            rows = list(reader)
            header = frozenset(name.strip() for name in reader.fieldnames or ())
    except OSError as error:
        raise TraceError(f"cannot read trace {source!r}: {error.strerror}") from None
    return trace_from_rows(Path(source).stem, rows, header, source)


def trace_from_rows(
    name: str,
    rows: Iterable[Mapping[str, str]],
    header: frozenset[str] | None = None,
    source: str = "<trace>",
) -> Trace:
    rows = list(rows)
    if header is None:
        header = frozenset(key.strip() for key in rows[0]) if rows else frozenset()
    form = _FORMS.get(header)
    if form is None:
        expected = " or ".join(",".join(form) for form in _FORMS.values())
        raise TraceError(f"{source}: unknown columns {sorted(header)}; expected {expected}")
    if not rows:
        raise TraceError(f"{source}: no jobs")
    jobs = [_job(row, line, form, source) for line, row in enumerate(rows, start=2)]
    # A stable sort keeps the file's order among jobs that arrive together.
    jobs.sort(key=lambda job: job.arrival)
    return Trace(name, tuple(jobs))


def _job(row: Mapping[str, str], line: int, form: tuple[str, ...], source: str) -> Job:
    *id_column, arrival, duration, gpus = form
    values = {key.strip(): (value or "").strip() for key, value in row.items() if key}
    try:
        job = Job(
            id=values[id_column[0]] if id_column else f"job-{line - 1}",
            arrival=_seconds(values[arrival]),
            duration=_seconds(values[duration]),
            gpus=int(values[gpus]),
        )
    except ValueError as error:
        raise TraceError(f"{source}: line {line}: {error}") from None
    if job.arrival < 0 or job.duration < 0:
        raise TraceError(f"{source}: line {line}: a negative time in {dict(values)}")
    if job.gpus < 1:
        raise TraceError(f"{source}: line {line}: a job needs at least one GPU, got {job.gpus}")
    return job


def _seconds(text: str) -> int:
    """Whole seconds; a fraction is rounded, since the simulation's clock ticks in seconds."""
    return round(float(text))
