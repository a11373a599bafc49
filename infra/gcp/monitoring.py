"""The GCP monitoring deploy.sh creates, written as the files gcloud reads.

    monitoring.py DIR NAME [CHANNEL]

Writes into DIR, from the metrics CATALOG (shared/dynagent/report/metrics.py):

- one log-based metric per catalog metric (``gcloud logging metrics create ID
  --config-from-file``): the functions log each point as a JSON entry with
  ``message: "dynagent metric"``, ``metric``, ``value``, ``pool`` and the metric's other
  dimension; the log-based metric extracts the value into a distribution (log-based
  metrics are DELTA only, and a counter would count entries, not values) and the
  dimensions into labels;
- the alert policies (``gcloud alpha monitoring policies create --policy-from-file``);
- the dashboard (``gcloud monitoring dashboards create --config-from-file``).

and prints one tab-separated line per file for the shell, without evaluating anything:

    metric     ID            FILE
    policy     DISPLAY_NAME  FILE
    dashboard  DISPLAY_NAME  FILE

Policies and the dashboard have no name of their own to look up, so deploy.sh finds
them by display name, which therefore carries NAME; they are labelled
``dynagent-deployment=NAME`` too, which ``deploy.sh --delete`` requires before deleting
one (log-based metrics have no labels: it requires their description's prefix).
CHANNEL, a notification channel's resource name, is where every policy notifies (none
without it).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from dynagent.report.metrics import CATALOG, MetricSpec

# Cloud Monitoring units (UCUM) of CATALOG's CloudWatch units.
UNITS = {"Count": "1", "Seconds": "s", "Milliseconds": "ms", "None": "1"}
LOG_MESSAGE = "dynagent metric"
# deploy.sh's OWNER_KEY: what deploy.sh made for NAME carries OWNER_KEY=NAME.
OWNER_KEY = "dynagent-deployment"


def metric_id(name: str, metric: str) -> str:
    return f"{name}_{metric}"


def metric_type(name: str, metric: str) -> str:
    return f"logging.googleapis.com/user/{metric_id(name, metric)}"


def promql_name(name: str, metric: str) -> str:
    """Monitoring's rule: the first / becomes :, other special characters _."""
    domain, _, path = metric_type(name, metric).partition("/")
    return re.sub(r"[^A-Za-z0-9_]", "_", domain) + ":" + re.sub(r"[^A-Za-z0-9_]", "_", path)


def functions_filter(name: str) -> str:
    """The two functions' logs: a gen2 function runs as the Cloud Run service of its name."""
    return (
        'resource.type="cloud_run_revision" AND '
        f'resource.labels.service_name=("{name}-reconcile" OR "{name}-sweep")'
    )


def log_metric(name: str, spec: MetricSpec) -> dict[str, Any]:
    return {
        "name": metric_id(name, spec.name),
        "description": f"dynagent ({name}): {spec.description}",
        "filter": (
            f'{functions_filter(name)} AND jsonPayload.message="{LOG_MESSAGE}" '
            f'AND jsonPayload.metric="{spec.name}"'
        ),
        "metricDescriptor": {
            "metricKind": "DELTA",
            "valueType": "DISTRIBUTION",
            "unit": UNITS[spec.unit],
            "labels": [{"key": d, "valueType": "STRING"} for d in spec.dimensions],
        },
        "valueExtractor": "EXTRACT(jsonPayload.value)",
        "labelExtractors": {d: f"EXTRACT(jsonPayload.{d})" for d in spec.dimensions},
        # 0.01 .. some 1.4e17 in 64 doubling buckets: counts, seconds, milliseconds and
        # dollars alike; charts and alerts read the mean or sum, not the buckets.
        "bucketOptions": {
            "exponentialBuckets": {"numFiniteBuckets": 64, "growthFactor": 2, "scale": 0.01}
        },
    }


def _on_metric(name: str, metric: str) -> str:
    return f'metric.type="{metric_type(name, metric)}" AND resource.type="cloud_run_revision"'


def policies(name: str, channel: str = "") -> list[dict[str, Any]]:
    """The alert policies, each with one condition; the same alarms as on AWS."""
    functions = f'"{name}-reconcile" OR "{name}-sweep"'

    def policy(title: str, doc: str, condition: dict[str, Any]) -> dict[str, Any]:
        return {
            "displayName": f"{name}: {title}",
            "documentation": {"content": doc, "mimeType": "text/markdown"},
            "combiner": "OR",
            "enabled": True,
            "conditions": [{"displayName": title, **condition}],
            "notificationChannels": [channel] if channel else [],
            "userLabels": {OWNER_KEY: name},
        }

    def mean_above(metric: str, threshold: float, duration: int) -> dict[str, Any]:
        # ALIGN_MEAN turns a window's distribution into the mean of its points, per pool.
        return {
            "conditionThreshold": {
                "filter": _on_metric(name, metric),
                "aggregations": [
                    {
                        "alignmentPeriod": "300s",
                        "perSeriesAligner": "ALIGN_MEAN",
                        "crossSeriesReducer": "REDUCE_MAX",
                        "groupByFields": ["metric.label.pool"],
                    }
                ],
                "comparison": "COMPARISON_GT",
                "thresholdValue": threshold,
                "duration": f"{duration}s",
                "trigger": {"count": 1},
            }
        }

    return [
        policy(
            "dead letters",
            f"The dead-letter subscription {name}-dead-letters holds messages: snapshots "
            "that are invalid or kept failing. Pull them to see why.",
            {
                "conditionThreshold": {
                    "filter": (
                        'metric.type="pubsub.googleapis.com/subscription/num_undelivered_messages"'
                        ' AND resource.type="pubsub_subscription"'
                        f' AND resource.labels.subscription_id="{name}-dead-letters"'
                    ),
                    "aggregations": [{"alignmentPeriod": "300s", "perSeriesAligner": "ALIGN_MAX"}],
                    "comparison": "COMPARISON_GT",
                    "thresholdValue": 0,
                    "duration": "0s",
                    "trigger": {"count": 1},
                }
            },
        ),
        policy(
            "function errors",
            "A reconcile or sweep invocation failed (a 5xx answer to its event): see the "
            "function's logs.",
            {
                "conditionThreshold": {
                    "filter": (
                        'metric.type="run.googleapis.com/request_count"'
                        ' AND resource.type="cloud_run_revision"'
                        f" AND resource.labels.service_name=({functions})"
                        ' AND metric.labels.response_code_class="5xx"'
                    ),
                    "aggregations": [
                        {
                            "alignmentPeriod": "300s",
                            "perSeriesAligner": "ALIGN_SUM",
                            "crossSeriesReducer": "REDUCE_SUM",
                            "groupByFields": ["resource.label.service_name"],
                        }
                    ],
                    "comparison": "COMPARISON_GT",
                    "thresholdValue": 0,
                    "duration": "0s",
                    "trigger": {"count": 1},
                }
            },
        ),
        policy(
            "no snapshots",
            "A pool that had snapshots applied has had none for 10 minutes: its master, "
            "or the bridge, stopped publishing.",
            {
                # Absence is judged per pool: each pool that ever reported is a series.
                "conditionAbsent": {
                    "filter": _on_metric(name, "SnapshotsApplied"),
                    "aggregations": [
                        {
                            "alignmentPeriod": "60s",
                            "perSeriesAligner": "ALIGN_DELTA",
                            "crossSeriesReducer": "REDUCE_SUM",
                            "groupByFields": ["metric.label.pool"],
                        }
                    ],
                    "duration": "600s",
                    "trigger": {"count": 1},
                }
            },
        ),
        policy(
            "launch errors",
            "A pool's launches have been refused (capacity, quota, throttling) in every "
            "5 minutes for 15 minutes: see LaunchErrors by code on the dashboard.",
            mean_above("LaunchErrors", 0, 900),
        ),
        policy(
            "pending at max",
            "A pool's demand has waited at max_instances for 30 minutes: raise "
            "max_instances or accept the wait.",
            mean_above("PendingAtMax", 0, 1800),
        ),
    ]


def dashboard(name: str) -> dict[str, Any]:
    """One chart per question, PromQL over the log-based metrics (a distribution reads
    as a Prometheus histogram: _sum and _count)."""

    def mean(metric: str, by: str) -> str:
        m = promql_name(name, metric)
        return f"sum by ({by}) (rate({m}_sum[5m])) / sum by ({by}) (rate({m}_count[5m]))"

    def total(metric: str, by: str) -> str:
        return f"sum by ({by}) (increase({promql_name(name, metric)}_sum[5m]))"

    charts = [
        ("Instances by state", mean("Instances", "pool, state"), "STACKED_AREA"),
        ("Agents by state", mean("Agents", "pool, state"), "STACKED_AREA"),
        ("Pending slots (demand)", mean("PendingSlots", "pool"), "LINE"),
        ("Cost per hour ($)", mean("CostPerHour", "pool"), "STACKED_AREA"),
        ("Launches by reason (5 min)", total("Launches", "pool, reason"), "STACKED_BAR"),
        ("Terminations by reason (5 min)", total("Terminations", "pool, reason"), "STACKED_BAR"),
        ("Launch errors by code (5 min)", total("LaunchErrors", "pool, code"), "STACKED_BAR"),
        ("Snapshot age (s)", mean("SnapshotAge", "pool"), "LINE"),
        ("Pending at max_instances", mean("PendingAtMax", "pool"), "LINE"),
        ("Snapshots applied (5 min)", total("SnapshotsApplied", "pool"), "LINE"),
        (
            "Stopped machines by type (warm pool)",
            mean("StoppedInstances", "pool, instance_type"),
            "STACKED_AREA",
        ),
        ("Stopped machines' disks ($ per hour)", mean("StoppedDiskCost", "pool"), "STACKED_AREA"),
        ("Stops (5 min)", total("Stops", "pool"), "STACKED_BAR"),
        ("Starts (5 min)", total("Starts", "pool"), "STACKED_BAR"),
        ("Refused starts by code (5 min)", total("StartsRefused", "pool, code"), "STACKED_BAR"),
    ]
    tiles = []
    for index, (title, query, plot) in enumerate(charts):
        tiles.append(
            {
                "xPos": (index % 2) * 24,
                "yPos": (index // 2) * 16,
                "width": 24,
                "height": 16,
                "widget": {
                    "title": title,
                    "xyChart": {
                        "dataSets": [
                            {"timeSeriesQuery": {"prometheusQuery": query}, "plotType": plot}
                        ]
                    },
                },
            }
        )
    return {
        "displayName": f"{name}: fleet, demand and cost",
        "labels": {OWNER_KEY: name},
        "mosaicLayout": {"columns": 48, "tiles": tiles},
    }


def write(directory: Path, name: str, channel: str = "") -> list[tuple[str, str, Path]]:
    directory.mkdir(parents=True, exist_ok=True)
    made = []
    for spec in CATALOG:
        path = directory / f"metric-{spec.name}.json"
        path.write_text(json.dumps(log_metric(name, spec), indent=2) + "\n")
        made.append(("metric", metric_id(name, spec.name), path))
    for index, body in enumerate(policies(name, channel)):
        path = directory / f"policy-{index}.json"
        path.write_text(json.dumps(body, indent=2) + "\n")
        made.append(("policy", str(body["displayName"]), path))
    path = directory / "dashboard.json"
    body = dashboard(name)
    path.write_text(json.dumps(body, indent=2) + "\n")
    made.append(("dashboard", str(body["displayName"]), path))
    return made


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: monitoring.py DIR NAME [CHANNEL]", file=sys.stderr)
        return 2
    for kind, key, path in write(Path(argv[0]), *argv[1:]):
        print(f"{kind}\t{key}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
