"""AWS Lambda entry points: ``app.reconcile`` (SQS FIFO batches), ``app.sweep`` (schedule)
and ``app.interruption`` (EC2 spot notices from EventBridge).

They parse, call the shared reconcile code, and report; no logic of their own. Metrics
go to the log as CloudWatch embedded metric format (``dynagent.aws.emf``). Tracer records
each invocation and its AWS calls in X-Ray; outside Lambda, or with
POWERTOOLS_TRACE_DISABLED=true, it disables itself and patches nothing.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer

from dynagent.aws.functions import AwsFunctions

logger = Logger(service="dynagent")
tracer = Tracer(service="dynagent")
_functions: AwsFunctions | None = None


def _current() -> AwsFunctions:
    # Built on first use and kept while the Lambda environment is warm.
    global _functions
    if _functions is None:
        _functions = AwsFunctions.from_environment(logger)
    return _functions


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def reconcile(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _current().reconcile_batch(event, context)


@logger.inject_lambda_context
# Its response reports every pool's actions: more than a trace segment should carry.
@tracer.capture_lambda_handler(capture_response=False)
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
