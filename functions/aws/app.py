"""AWS Lambda entry points: ``app.reconcile`` (SQS FIFO batches), ``app.sweep`` (schedule)
and ``app.interruption`` (EC2 spot notices from EventBridge).

They parse, call the shared reconcile code, and report; no logic of their own. Metrics
go to the log as CloudWatch embedded metric format (``dynagent.aws.emf``). With tracing
on, Powertools' Tracer records each invocation and its AWS calls in X-Ray (outside
Lambda it disables itself); POWERTOOLS_TRACE_DISABLED=true leaves it out altogether.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger

from dynagent.aws.functions import AwsFunctions

logger = Logger(service="dynagent")
_functions: AwsFunctions | None = None
# The X-Ray SDK costs some 0.2 s of every cold start (make bench): it is imported only
# when tracing is on (the stack's Tracing parameter sets POWERTOOLS_TRACE_DISABLED).
TRACED = os.environ.get("POWERTOOLS_TRACE_DISABLED", "false").strip().lower() not in ("1", "true")
Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


def _traced(capture_response: bool = True) -> Callable[[Handler], Handler]:
    if not TRACED:
        return lambda handler: handler
    from aws_lambda_powertools import Tracer

    tracer = Tracer(service="dynagent")
    return tracer.capture_lambda_handler(capture_response=capture_response)


def _current() -> AwsFunctions:
    # Built on first use and kept while the Lambda environment is warm.
    global _functions
    if _functions is None:
        _functions = AwsFunctions.from_environment(logger)
    return _functions


@logger.inject_lambda_context
@_traced()
def reconcile(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _current().reconcile_batch(event, context)


@logger.inject_lambda_context
# Its response reports every pool's actions: more than a trace segment should carry.
@_traced(capture_response=False)
def sweep(event: dict[str, Any], context: Any) -> dict[str, Any]:
    outcomes = _current().sweep()
    failed = [outcome.pool for outcome in outcomes if outcome.error]
    if failed:
        # Fail the invocation so the function's Errors metric shows it; pools are logged.
        raise RuntimeError(f"sweep failed for pool(s): {', '.join(failed)}")
    return {"pools": [outcome.report() for outcome in outcomes]}


@logger.inject_lambda_context
def interruption(event: dict[str, Any], context: Any) -> dict[str, Any]:
    outcome = _current().handle_notice(event)
    return {"pools": [outcome.report()] if outcome is not None else []}
