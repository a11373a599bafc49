"""What LocalAws reads off a request at the wire, and the faults it answers there.

The middleware in front of moto's app (local_aws.py) names each call by its signing
service and action, records it, and may answer it with an injected EC2 error or late
(``LocalAws.inject_errors``, ``LocalAws.answer_late``).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, NamedTuple
from urllib.parse import parse_qs


class ApiCall(NamedTuple):
    """One request the server handled: the signing service ('ec2', 'sqs') and action."""

    service: str
    action: str


def signing_service(authorization: str) -> str:
    """The service of a SigV4 ``Credential=KEY/DATE/REGION/SERVICE/aws4_request`` scope."""
    _, _, credential = authorization.partition("Credential=")
    scope = credential.split(",", 1)[0].split("/")
    return scope[3] if len(scope) >= 5 else "unknown"


def _buffered_body(environ: dict[str, Any]) -> bytes:
    """Read the body once and put a fresh stream back, so moto can still read it."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body: bytes = environ["wsgi.input"].read(length) if length > 0 else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def action_of(environ: dict[str, Any]) -> str | None:
    """JSON protocol (SQS today) names the action in X-Amz-Target; query (EC2) in ``Action``."""
    target = environ.get("HTTP_X_AMZ_TARGET")
    if target:
        return str(target).rsplit(".", 1)[-1]
    query = parse_qs(str(environ.get("QUERY_STRING", "")))
    if "Action" in query:
        return query["Action"][0]
    if environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded"):
        form = parse_qs(_buffered_body(environ).decode("utf-8", "replace"))
        if "Action" in form:
            return form["Action"][0]
    return None


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def ec2_error(start_response: Callable[..., Any], status: int, code: str) -> list[bytes]:
    """An EC2 (query protocol) error response, as EC2 sends throttling and server errors."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{code} (injected by the "
        "local AWS)</Message></Error></Errors><RequestID>injected</RequestID></Response>"
    ).encode()
    reason = HTTPStatus(status).phrase
    start_response(
        f"{status} {reason}",
        [("Content-Type", "text/xml"), ("Content-Length", str(len(body)))],
    )
    return [body]


@dataclass
class WireFault:
    """Every ``every``-th call of ``service`` (and ``action``, if set) is answered with an
    error, or answered ``delay`` seconds late; ``seen`` counts the matching calls."""

    service: str
    action: str | None
    every: int
    code: str = ""
    status: int = 0
    delay: float = 0.0
    seen: int = 0

    def strikes(self, call: ApiCall) -> bool:
        if call.service != self.service or self.action not in (None, call.action):
            return False
        self.seen += 1
        return self.seen % self.every == 0
