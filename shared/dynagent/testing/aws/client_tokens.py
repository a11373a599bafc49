"""ClientToken idempotency, which moto ignores: a launch or a template is made once per
token, and a retry gets the first call's answer (RunInstances, RequestSpotInstances,
CreateFleet, CreateLaunchTemplate and CreateLaunchTemplateVersion)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError

from dynagent.testing.aws.knobs import STATE_LOCK

# EC2: "A client token is a unique, case-sensitive string of up to 64 ASCII characters."
CLIENT_TOKEN_MAX_CHARS: Final = 64
# CreateLaunchTemplate(Version)'s own documented limit: "Maximum 128 ASCII characters."
LAUNCH_TEMPLATE_TOKEN_MAX_CHARS: Final = 128


class _IdempotentParameterMismatch(EC2ClientError):
    def __init__(self) -> None:
        super().__init__(
            "IdempotentParameterMismatch",
            "Arguments on this idempotent request are inconsistent with arguments used in "
            "previous request(s).",
        )


@dataclass(frozen=True)
class _TokenUse:
    """What a client token launched: its request's fingerprint and the ids to replay."""

    fingerprint: str
    ids: tuple[str, ...]


def _token_ledger(backend: Any) -> dict[tuple[str, str], _TokenUse]:
    """Tokens live on moto's per-account, per-region backend object: reset() drops them with
    everything else, and a token reused in another region launches anew, as in EC2."""
    ledger: dict[tuple[str, str], _TokenUse] | None = getattr(
        backend, "_dynagent_client_tokens", None
    )
    if ledger is None:
        ledger = {}
        backend._dynagent_client_tokens = ledger
    return ledger


def _fingerprint(params: Mapping[str, Any]) -> str:
    """Every request parameter but the token itself.

    EC2 documents that changing *another request parameter* under the same token fails,
    without listing which parameters count. Judging only the ones that obviously matter
    (image, type, counts, tags, user data) would let through retries that EC2 may refuse;
    judging all of them is the strict reading, so code that replays cleanly here replays
    cleanly on EC2. The price is that a retry must rebuild its request exactly: a value
    computed from the clock at call time (a spot request's ValidUntil, say) makes a retry a
    mismatch here, as it may in EC2. DryRun never reaches here (see idempotent)."""
    relevant = {name: value for name, value in params.items() if name != "ClientToken"}
    return json.dumps(relevant, sort_keys=True, default=str)


def _check_token(token: str, max_chars: int) -> None:
    # EC2's limit. The error code for breaking it is not documented; InvalidParameterValue
    # is EC2's generic 400, and what matters is that the double refuses what EC2 refuses.
    if len(token) > max_chars or not token.isascii():
        raise EC2ClientError(
            "InvalidParameterValue",
            f"Value ({token}) for parameter clientToken is invalid: "
            f"up to {max_chars} ASCII characters.",
        )


def idempotent(
    response: Any,
    action: str,
    launch: Callable[[], ActionResult],
    ids_of: Callable[[Any], tuple[str, ...]],
    replay: Callable[[Any, tuple[str, ...]], ActionResult],  # (response, ids)
    max_token_chars: int = CLIENT_TOKEN_MAX_CHARS,
) -> ActionResult:
    """Run ``launch`` once per client token; answer a retry with what the first call made.

    Why this exists: moto ignores ``ClientToken``, so every retry launches again, while EC2
    makes RunInstances and RequestSpotInstances idempotent by it (see "Ensuring idempotency
    in Amazon EC2 API requests"): the same token with the same parameters returns the
    original reservation or requests, with current state, and launches nothing; the same
    token with other parameters fails with ``IdempotentParameterMismatch`` (HTTP 400).
    Tokens are up to 64 ASCII characters and stay valid for at least 24 hours after the
    instance terminates; here they last until reset(). dynagent's launches are idempotent
    *because* of this (a re-delivered snapshot retries with the same token), so a double
    that ignored tokens would hide double launches instead of proving there are none.

    A request without a token is never deduplicated (moto would default it to "ABCDE").
    boto3 fills a random token into RunInstances when the caller gives none, as the EC2
    model marks it an idempotency token; RequestSpotInstances gets none unless given.
    """
    token = response._get_param("ClientToken")
    if not token or response._get_param("DryRun"):
        return launch()
    _check_token(token, max_token_chars)
    fingerprint = _fingerprint(response.params)
    ledger = _token_ledger(response.ec2_backend)
    with STATE_LOCK:
        earlier = ledger.get((action, token))
        if earlier is None:
            result = launch()
            ledger[(action, token)] = _TokenUse(fingerprint, ids_of(result.result))
            return result
    if earlier.fingerprint != fingerprint:
        raise _IdempotentParameterMismatch()
    return replay(response, earlier.ids)


def idempotent_reply(
    response: Any,
    action: str,
    make: Callable[[], dict[str, Any]],
    max_token_chars: int = CLIENT_TOKEN_MAX_CHARS,
) -> ActionResult:
    """``idempotent`` for actions whose whole first reply is what a retry gets back
    (CreateFleet, CreateLaunchTemplate, CreateLaunchTemplateVersion): the reply is kept
    on the backend, next to the token ledger, and replayed as it was."""
    replies = _stored_replies(response.ec2_backend)

    def ids_of(reply: Any) -> tuple[str, ...]:
        key = str(len(replies))
        replies[key] = copy.deepcopy(reply)
        return (key,)

    def replay(_: Any, ids: tuple[str, ...]) -> ActionResult:
        return ActionResult(copy.deepcopy(replies[ids[0]]))

    return idempotent(
        response, action, lambda: ActionResult(make()), ids_of, replay, max_token_chars
    )


def _stored_replies(backend: Any) -> dict[str, Any]:
    replies: dict[str, Any] | None = getattr(backend, "_dynagent_replies", None)
    if replies is None:
        replies = {}
        backend._dynagent_replies = replies
    return replies
