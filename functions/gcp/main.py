"""Cloud Functions (gen2) entry points: ``reconcile`` (snapshot topic) and ``sweep``.

Both take the CloudEvent Eventarc delivers for a Pub/Sub message. They parse, call the
shared reconcile code, and report; no logic of their own.
"""

from __future__ import annotations

from typing import Any

import functions_framework

from dynagent.gcp.functions import GcpFunctions
from dynagent.gcp.logs import StructuredLogger

logger = StructuredLogger()
_functions: GcpFunctions | None = None


def _current() -> GcpFunctions:
    # Built on first use and kept while the instance is warm.
    global _functions
    if _functions is None:
        _functions = GcpFunctions.from_environment(logger)
    return _functions


@functions_framework.cloud_event
def reconcile(cloud_event: Any) -> None:
    _current().reconcile_event(cloud_event)


@functions_framework.cloud_event
def sweep(cloud_event: Any) -> None:
    failed = [outcome.pool for outcome in _current().sweep() if outcome.error]
    if failed:
        # Fail the invocation so it shows in the function's error count; pools are logged.
        raise RuntimeError(f"sweep failed for pool(s): {', '.join(failed)}")
