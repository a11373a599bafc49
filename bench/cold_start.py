"""Cold start: importing each function's module in a fresh interpreter, beside a baseline.

A Lambda or Cloud Function pays its module's import on every cold start. Each entry is
timed as a whole ``python -c`` run (interpreter start included), the median of several
fresh interpreters, with its baseline timed in turn in the same rounds: for AWS,
``import boto3`` and creating an EC2 client, the least any boto3 function does; for
GCP, ``import functions_framework``. An empty interpreter is timed too, for scale. On
GCP, ``google.cloud.compute_v1`` alone is timed as well: it is what the function must
keep off its import path (it loads only when a pass reaches Compute Engine).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUNS = 9
TARGET_RATIO = 1.3


@dataclass(frozen=True)
class Entry:
    """A function's module (or None, to time the baseline alone) and its baseline."""

    name: str
    directory: str | None  # put on sys.path, as the platform does
    module: str | None
    baseline: str
    target: float | None = None  # the most module/baseline may be, where the issue sets one
    # Other imports timed in the same rounds, for scale: (label, code).
    also: tuple[tuple[str, str], ...] = ()
    # Environment the platform sets, as code run before the import.
    setup: str = ""


ENTRIES = (
    Entry(
        "aws",
        "functions/aws",
        "app",
        "import boto3; boto3.client('ec2', region_name='us-west-2')",
        target=TARGET_RATIO,
        # As deployed by default (template.yaml's Tracing: PassThrough); with tracing on,
        # the X-Ray SDK's import comes on top, timed beside it.
        setup="import os; os.environ['POWERTOOLS_TRACE_DISABLED'] = 'true'; ",
        also=(
            (
                "traced",
                "import os, sys; os.environ['POWERTOOLS_TRACE_DISABLED'] = 'false'; "
                f"sys.path.insert(0, {str(ROOT / 'functions/aws')!r}); import app",
            ),
        ),
    ),
    Entry(
        "gcp",
        "functions/gcp",
        "main",
        "import functions_framework",
        also=(("compute_v1", "from google.cloud import compute_v1"),),
    ),
)


def import_code(entry: Entry) -> str | None:
    if entry.module is None or entry.directory is None:
        return None
    return (
        f"{entry.setup}import sys; sys.path.insert(0, {str(ROOT / entry.directory)!r}); "
        f"import {entry.module}"
    )


def timed_run(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    return (time.perf_counter() - start) * 1000


def measure(entry: Entry) -> dict[str, Any]:
    code = import_code(entry)
    times: dict[str, list[float]] = {"module": [], "baseline": [], "empty": []}
    for _ in range(RUNS):
        if code is not None:
            times["module"].append(timed_run(code))
        times["baseline"].append(timed_run(entry.baseline))
        times["empty"].append(timed_run("pass"))
        for label, extra in entry.also:
            times.setdefault(label, []).append(timed_run(extra))
    result: dict[str, Any] = {
        "module": f"{entry.directory}/{entry.module}.py" if code else None,
        "baseline": entry.baseline,
        "runs": RUNS,
        "baseline_ms": round(statistics.median(times["baseline"]), 1),
        "empty_interpreter_ms": round(statistics.median(times["empty"]), 1),
    }
    for label, _ in entry.also:
        result[f"{label}_ms"] = round(statistics.median(times[label]), 1)
    if code is not None:
        module_ms = statistics.median(times["module"])
        result["module_ms"] = round(module_ms, 1)
        result["ratio_to_baseline"] = round(module_ms / result["baseline_ms"], 2)
        if entry.target is not None:
            result["ratio_met"] = result["ratio_to_baseline"] <= entry.target
    return result


def run() -> dict[str, Any]:
    results = {}
    for entry in ENTRIES:
        results[entry.name] = found = measure(entry)
        if "module_ms" in found:
            print(
                f"  {entry.name}: import {found['module']} {found['module_ms']} ms, "
                f"baseline {found['baseline_ms']} ms: {found['ratio_to_baseline']}x"
                + "".join(f", {label} {found[f'{label}_ms']} ms" for label, _ in entry.also),
                flush=True,
            )
        else:
            print(f"  {entry.name}: baseline only, {found['baseline_ms']} ms", flush=True)
    return {"functions": results, "target_ratio_at_most": TARGET_RATIO}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
