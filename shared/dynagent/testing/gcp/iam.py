"""A local Google IAM: who may act as a service account, and what it may do.

``LocalGcpIam`` serves, over REST on 127.0.0.1, the three calls ``dynagent doctor``
makes to test a service account's permissions as that account:

* IAM Credentials ``projects.serviceAccounts.generateAccessToken``
  (``POST /v1/projects/-/serviceAccounts/EMAIL:generateAccessToken``): the caller, named
  by its bearer token, gets a token standing for EMAIL when ``allow_impersonation`` let
  it (Google's ``roles/iam.serviceAccountTokenCreator``), else 403 PERMISSION_DENIED
  with Google's message. The token is ``local-token-for-EMAIL``.
* Resource Manager ``projects.testIamPermissions`` (``POST /v1/projects/P:testIamPermissions``)
  and IAM ``projects.serviceAccounts.testIamPermissions``
  (``POST /v1/projects/-/serviceAccounts/EMAIL:testIamPermissions``): of the permissions
  asked, those ``grant`` gave the caller on that resource; with none, an empty object,
  as Google answers.

It is also the OAuth 2.0 token endpoint (``POST /token``) a service account key file can
name as its ``token_uri``: a JWT-bearer grant gets a token standing for the key's
``client_email``, so google-auth's application default credentials work against it.

Principals are ``serviceAccount:EMAIL`` for tokens this server issued and ``user:TOKEN``
for any other bearer token (tests sign as ``google.oauth2.credentials.Credentials(
token="admin@example.com")``). Simpler than Google: four APIs on four hosts are one
server; grants are a flat table (no roles, conditions, inheritance or deny policies);
the token endpoint does not verify the JWT's signature; tokens never expire.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from werkzeug.wrappers import Request, Response

from dynagent.testing.loopback import CallLog, GoogleRefusal, LoopbackApp

TOKEN_PREFIX: Final = "local-token-for-"
_ACCOUNT: Final = re.compile(r"/v1/projects/-/serviceAccounts/(?P<email>[^/:]+):(?P<verb>\w+)")
_PROJECT: Final = re.compile(r"/v1/projects/(?P<project>[a-z][-a-z0-9]*):testIamPermissions")


def account_resource(email: str) -> str:
    return f"projects/-/serviceAccounts/{email}"


class LocalGcpIam(LoopbackApp):
    server_name = "local-gcp-iam"

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._grants: dict[tuple[str, str], set[str]] = {}  # (principal, resource) -> perms
        self._impersonators: set[tuple[str, str]] = set()  # (principal, service account)
        self.calls = CallLog[str]()

    # -- what tests arrange ----------------------------------------------------------

    def grant(self, principal: str, resource: str, permissions: Iterable[str]) -> None:
        """``principal`` (``serviceAccount:EMAIL``, ``user:NAME``) holds ``permissions``
        on ``resource`` (``projects/P``, or ``account_resource(EMAIL)``)."""
        with self._lock:
            self._grants.setdefault((principal, resource), set()).update(permissions)

    def revoke(self, principal: str, resource: str, permissions: Iterable[str]) -> None:
        with self._lock:
            self._grants.get((principal, resource), set()).difference_update(permissions)

    def allow_impersonation(self, principal: str, email: str) -> None:
        with self._lock:
            self._impersonators.add((principal, email))

    def reset(self) -> None:
        with self._lock:
            self._grants.clear()
            self._impersonators.clear()
        self.calls.clear()

    # -- the API ---------------------------------------------------------------------

    def _app(self, environ: Any, start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        self.calls.record(f"{request.method} {request.path}")
        try:
            payload = self._handle(request, _principal(request))
            response = Response(json.dumps(payload), 200, content_type="application/json")
        except GoogleRefusal as refused:
            response = refused.response()
        return response(environ, start_response)

    def _handle(self, request: Request, principal: str) -> dict[str, Any]:
        if request.method != "POST":
            raise GoogleRefusal(405, "UNIMPLEMENTED", f"{request.method} is not served")
        if request.path == "/token":
            return _oauth_token(request.form.get("assertion", ""))
        body = json.loads(request.get_data() or b"{}")
        account = _ACCOUNT.fullmatch(request.path)
        if account and account["verb"] == "generateAccessToken":
            return self._token(principal, account["email"])
        if account and account["verb"] == "testIamPermissions":
            return self._test(principal, account_resource(account["email"]), body)
        project = _PROJECT.fullmatch(request.path)
        if project:
            return self._test(principal, f"projects/{project['project']}", body)
        raise GoogleRefusal(404, "NOT_FOUND", f"{request.path} is not served by the local IAM")

    def _token(self, principal: str, email: str) -> dict[str, Any]:
        with self._lock:
            allowed = (principal, email) in self._impersonators
        if not allowed:
            raise GoogleRefusal(
                403,
                "PERMISSION_DENIED",
                "Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it "
                "may not exist).",
            )
        expires = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"accessToken": TOKEN_PREFIX + email, "expireTime": expires}

    def _test(self, principal: str, resource: str, body: dict[str, Any]) -> dict[str, Any]:
        asked = [str(p) for p in body.get("permissions", [])]
        with self._lock:
            held = self._grants.get((principal, resource), set())
            granted = [p for p in asked if p in held]
        return {"permissions": granted} if granted else {}


def _principal(request: Request) -> str:
    token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    if token.startswith(TOKEN_PREFIX):
        return f"serviceAccount:{token.removeprefix(TOKEN_PREFIX)}"
    return f"user:{token}"


def _oauth_token(assertion: str) -> dict[str, Any]:
    """A JWT-bearer grant's answer: a token for the JWT's issuer (not verified)."""
    try:
        claims = assertion.split(".")[1]
        issuer = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))["iss"]
    except (IndexError, ValueError, KeyError):
        raise GoogleRefusal(400, "invalid_grant", "Invalid JWT assertion") from None
    return {"access_token": TOKEN_PREFIX + str(issuer), "expires_in": 3600, "token_type": "Bearer"}
