"""Structured logs for Cloud Functions: one JSON object per line on stdout.

Cloud Logging reads ``severity`` and ``message`` from such lines and keeps the other
fields as the entry's JSON payload, so every action and its reason is searchable.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from datetime import datetime
from typing import Any, TextIO

from dynagent.report.metrics import Point


class StructuredLogger:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    def _write(self, severity: str, message: str, extra: dict[str, Any] | None) -> None:
        entry = {"severity": severity, "message": message, **(extra or {})}
        print(json.dumps(entry, default=str), file=self.stream or sys.stdout, flush=True)

    def info(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._write("INFO", message, extra)

    def warning(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._write("WARNING", message, extra)

    def error(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._write("ERROR", message, extra)


METRIC_MESSAGE = "dynagent metric"


def metric_entry(point: Point, at: datetime) -> dict[str, Any]:
    """The structured log entry of one metric point; log-based metrics read these.

    One entry per point, one JSON object per line on stdout::

        {"severity": "INFO", "message": "dynagent metric", "time": "2024-05-01T12:00:30+00:00",
         "metric": "Instances", "value": 2, "unit": "Count", "pool": "a100", "state": "running"}

    Fields, stable (infra/gcp/deploy.sh's log-based metrics name them):

    - ``metric``: a name from ``dynagent.report.metrics.CATALOG``;
    - ``value``: a number (an int when whole); ``unit``: the catalog's (CloudWatch's names);
    - ``pool``, and the metric's other catalog dimensions, each its own field: ``state``
      (Agents, Instances), ``reason`` (Launches, Terminations), ``code`` (LaunchErrors,
      StartsRefused), ``kind`` (Interruptions), ``instance_type`` (StoppedInstances).

    A log-based metric for one name: filter ``jsonPayload.message="dynagent metric" AND
    jsonPayload.metric="Instances"``, value extractor ``EXTRACT(jsonPayload.value)``
    (a distribution metric), label extractors ``EXTRACT(jsonPayload.pool)`` and
    ``EXTRACT(jsonPayload.state)``. ``time`` (RFC 3339) is the pass's clock, which
    Cloud Logging's agent reads as the entry's timestamp; filters and extractors never
    need it.
    """
    value = point.value
    return {
        "severity": "INFO",
        "message": METRIC_MESSAGE,
        "time": at.isoformat(),
        "metric": point.name,
        "value": int(value) if float(value).is_integer() else value,
        "unit": point.unit,
        **point.labels(),
    }


class MetricLog:
    """Writes metric points as structured entries, stdout by default (as StructuredLogger)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    def write(self, points: Iterable[Point], at: datetime) -> None:
        stream = self.stream or sys.stdout
        for item in points:
            print(json.dumps(metric_entry(item, at)), file=stream, flush=True)
