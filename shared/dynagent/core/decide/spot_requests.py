"""Spot requests: the instance of an active request is adopted, that of a cancelled one
terminated; a request open past max_agent_starting_period, or one the cloud says will not
turn into an instance (``SpotRequest.unfulfillable``) past the grace, is cancelled.
"""

from __future__ import annotations

from dynagent.core.decide.context import Context
from dynagent.core.durations import format_duration
from dynagent.core.fleet import RequestState, SpotRequest
from dynagent.core.plan import (
    Adoption,
)


def review_spot_requests(ctx: Context) -> None:
    if not ctx.fleet.spot_requests:
        return
    managed = ctx.by_id
    for request in ctx.fleet.spot_requests:
        if request.state is RequestState.CANCELLED_INSTANCE_RUNNING and request.instance_id:
            if request.instance_id not in managed:
                ctx.adoptions.append(Adoption(request.id, request.instance_id))
            ctx.terminate(
                request.instance_id,
                f"its spot request {request.id} was cancelled",
                "spot_cancelled",
            )
        elif request.state is RequestState.OPEN:
            reason = stale_request_reason(ctx, request)
            if reason:
                ctx.cancel(request.id, reason)
        elif (
            request.state is RequestState.ACTIVE
            and request.instance_id
            and request.instance_id not in managed
        ):
            ctx.adoptions.append(Adoption(request.id, request.instance_id))


def stale_request_reason(ctx: Context, request: SpotRequest) -> str | None:
    waited = ctx.now - request.created_at
    # The starting period bounds how long capacity may take to arrive, request or not.
    limit = ctx.provider.max_agent_starting_period
    if waited >= limit:
        return (
            f"open for {format_duration(waited)} "
            f"(max_agent_starting_period {format_duration(limit)})"
        )
    if request.unfulfillable:
        stuck = ctx.now - (request.status_updated_at or request.created_at)
        if stuck >= ctx.settings.spot_request_grace:
            return f"status {request.status_code} for {format_duration(stuck)}"
    return None
