"""Metric points as CloudWatch embedded metric format: JSON lines on the function's log.

CloudWatch Logs turns each line holding an ``_aws`` object into metrics, so no
PutMetricData call (nor its permission, nor its latency) is needed. Powertools builds
and checks each document (``EphemeralMetrics``: units, names, the schema); this module
writes it to a stream, stdout by default, so tests read exactly what Lambda would log.

One document per pool and dimension values, holding every metric that shares them::

    {"_aws": {"Timestamp": 1714564830000,
              "CloudWatchMetrics": [{"Namespace": "dynagent",
                                     "Dimensions": [["pool", "state"]],
                                     "Metrics": [{"Name": "Instances", "Unit": "Count"}]}]},
     "pool": "a100", "state": "running", "Instances": [2.0]}

No ``service`` dimension: Powertools would add one from POWERTOOLS_SERVICE_NAME, and
then every dashboard and alarm would have to name it; the namespace says the service.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from datetime import datetime
from typing import Any, TextIO

from aws_lambda_powertools.metrics import EphemeralMetrics
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from dynagent.report.metrics import NAMESPACE, Point


class EmfWriter:
    def __init__(self, stream: TextIO | None = None) -> None:
        # None: sys.stdout as it is when writing, which is what a test's capture replaces.
        self.stream = stream

    def documents(self, points: Iterable[Point], at: datetime) -> list[dict[str, Any]]:
        """The EMF documents of these points, stamped ``at``."""
        groups: dict[tuple[tuple[str, str], ...], list[Point]] = {}
        for item in points:
            groups.setdefault(tuple(item.labels().items()), []).append(item)
        documents = []
        for labels, group in groups.items():
            # An empty service keeps Powertools from adding the service dimension.
            emf = EphemeralMetrics(namespace=NAMESPACE, service="")
            for name, value in labels:
                emf.add_dimension(name=name, value=value)
            for item in group:
                emf.add_metric(name=item.name, unit=item.unit, value=item.value)
            # Not set_timestamp: it warns on a time CloudWatch would drop (over 14 days
            # old), which a demo on a virtual clock writes on purpose.
            emf.timestamp = int(at.timestamp() * 1000)
            documents.append(dict(emf.serialize_metric_set()))
        return documents

    def write(self, points: Iterable[Point], at: datetime) -> None:
        if is_metrics_disabled():  # POWERTOOLS_METRICS_DISABLED, as Powertools' own flush
            return
        stream = self.stream or sys.stdout
        for document in self.documents(points, at):
            print(json.dumps(document, separators=(",", ":")), file=stream, flush=True)
