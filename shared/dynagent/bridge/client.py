"""A thin client of the Determined master's REST API: the calls the bridge makes.

Its own, on the standard library: the bridge needs six endpoints, and Determined's
``determined`` package brings some 70 packages (and pins requests below 2.32). The
tests hold this client to the real API through the local master, which Determined's
own bindings and CLI accept (tests/determined).

Credentials as Determined's CLI takes them: a user and password (``DET_USER``,
``DET_PASS``; logged in again when the session token expires) or a long-lived access
token (``POST /api/v1/tokens``, Determined 0.38+). Neither is ever logged.
"""

from __future__ import annotations

import hashlib
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Determined's clients salt and hash the password before sending it (``isHashed``),
# which every master since 0.13 accepts.
_PASSWORD_SALT = "GubPEmmotfiK9TMD6Zdw"
# The job queue pages at 100 when asked for no limit.
JOB_PAGE = 100
JOBS_V2 = "/api/v1/job-queues-v2"
JOBS_V1 = "/api/v1/job-queues"


class MasterUnavailable(Exception):
    """The master could not be read completely: down, slow, an error, or half a page."""


class MasterRefused(Exception):
    """The master answered a write with an error (e.g. an agent reconnecting)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


@dataclass(frozen=True)
class Credentials:
    user: str = ""
    password: str = ""
    token: str = ""  # a long-lived access token; wins over the user's password

    def __repr__(self) -> str:  # never show a password or token in a log or traceback
        return f"Credentials(user={self.user!r}, password=***, token=***)"


def hashed(password: str) -> str:
    return hashlib.sha512((_PASSWORD_SALT + password).encode()).hexdigest() if password else ""


class MasterClient:
    def __init__(
        self,
        url: str,
        credentials: Credentials,
        *,
        timeout: float = 10.0,
        ca_file: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        if "://" not in self.url:
            self.url = f"http://{self.url}"
        self.credentials = credentials
        self.timeout = timeout
        # Verification is on: a custom CA (--cert) is added, never a bypass.
        self._ssl = ssl.create_default_context(cafile=ca_file) if ca_file else None
        self._token = credentials.token
        self._jobs_path = JOBS_V2

    # Reads

    def agents(self) -> list[dict[str, Any]]:
        return _whole(self._get("/api/v1/agents"), "agents")

    def resource_pools(self) -> list[dict[str, Any]]:
        return _whole(self._get("/api/v1/resource-pools"), "resourcePools")

    def master_config(self) -> dict[str, Any] | None:
        """The master's config (``GET /api/v1/master/config``), or None where this user may
        not read it (admins only) or the master has no such call."""
        try:
            answer = self._call("GET", "/api/v1/master/config", None)
        except MasterRefused as error:
            if error.status in (403, 404, 501):
                return None
            raise MasterUnavailable(f"GET /api/v1/master/config: {error}") from None
        config = answer.get("config")
        return config if isinstance(config, dict) else None

    def allocations(self) -> list[dict[str, Any]]:
        summaries = self._get("/api/v1/tasks").get("allocationIdToSummary") or {}
        return [summaries[key] for key in sorted(summaries)]

    def job_queue(self, pool: str) -> list[dict[str, Any]]:
        """Every job queued or running in ``pool``, all pages; a page that disagrees
        with its own pagination is an incomplete read."""
        return list(self._job_pages(pool))

    def _job_pages(self, pool: str) -> Iterator[dict[str, Any]]:
        offset = 0
        while True:
            query = {"resourcePool": pool, "offset": offset, "limit": JOB_PAGE}
            try:
                page = self._call("GET", f"{self._jobs_path}?{urllib.parse.urlencode(query)}", None)
            except MasterRefused as error:
                if error.status not in (404, 501) or self._jobs_path == JOBS_V1:
                    raise MasterUnavailable(f"GET {self._jobs_path}: {error}") from None
                # A master before 0.23.1 has only the first job queue API (plain jobs).
                self._jobs_path = JOBS_V1
                continue
            jobs = page.get("jobs") or []
            total = int((page.get("pagination") or {}).get("total", len(jobs)))
            expected = min(JOB_PAGE, max(0, total - offset))
            if len(jobs) != expected:
                raise MasterUnavailable(
                    f"job queue of {pool!r}: page at {offset} holds {len(jobs)} jobs, "
                    f"its pagination says {expected} (total {total})"
                )
            for item in jobs:
                # v2 wraps each job as {"full": Job} or {"limited": LimitedJob}.
                job = item.get("full") or item.get("limited") or item
                yield job
            offset += len(jobs)
            if offset >= total or not jobs:
                return

    # History (dynagent trace)

    def allocations_csv(self, after: str, before: str) -> str:
        """The allocations CSV of a period (``core.go`` getResourceAllocations, an echo
        route outside /api/v1): one row per allocation that ran in it, with its slots and
        pool. ``after`` and ``before`` as it parses them, ``2006-01-02T15:04:05Z``."""
        query = urllib.parse.urlencode({"timestamp_after": after, "timestamp_before": before})
        path = f"/resources/allocation/allocations-csv?{query}"
        try:
            return self._call_text("GET", path)
        except MasterRefused as error:
            raise MasterUnavailable(f"GET {path.split('?')[0]}: {error}") from None

    def task(self, task_id: str) -> dict[str, Any]:
        """``GET /api/v1/tasks/{taskId}``: its type, submission (startTime), allocations."""
        task = self._get(f"/api/v1/tasks/{urllib.parse.quote(task_id)}").get("task")
        return task if isinstance(task, dict) else {}

    def experiment_config(self, experiment_id: str) -> dict[str, Any]:
        """``GET /api/v1/experiments/{id}``'s ``config``: the experiment's as it stands (a
        priority changed by ``det job update`` is saved there, experiment.go setPriority)."""
        path = f"/api/v1/experiments/{urllib.parse.quote(experiment_id)}"
        config = self._get(path).get("config")
        return config if isinstance(config, dict) else {}

    def raw_allocation(self, after: str, before: str) -> list[dict[str, Any]]:
        """``GET /api/v1/resources/allocation/raw``: trial spans and agents' stays."""
        query = {"timestamp_after": after, "timestamp_before": before}
        return list(
            self._get("/api/v1/resources/allocation/raw", query).get("resourceEntries") or []
        )

    # Writes

    def disable(self, agent_id: str) -> None:
        """Drain the agent: it keeps its tasks and takes no new ones. (An empty body
        would mean drain false: the master would kill its tasks.)"""
        self._post(f"/api/v1/agents/{urllib.parse.quote(agent_id)}/disable", {"drain": True})

    def enable(self, agent_id: str) -> None:
        self._post(f"/api/v1/agents/{urllib.parse.quote(agent_id)}/enable", {})

    # HTTP

    def _get(self, path: str, query: dict[str, Any] | None = None) -> dict[str, Any]:
        if query:
            path += "?" + urllib.parse.urlencode(query)
        try:
            return self._call("GET", path, None)
        except MasterRefused as error:
            raise MasterUnavailable(f"GET {path.split('?')[0]}: {error}") from None

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", path, body)

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        if not self._token:
            self._login()
        try:
            return self._send(method, path, body, self._token)
        except MasterRefused as error:
            if error.status != 401 or self.credentials.token or not self.credentials.user:
                raise
        self._login()  # the session token expired: once more with a new one
        return self._send(method, path, body, self._token)

    def _call_text(self, method: str, path: str) -> str:
        """As _call, for an answer that is text (a CSV), not JSON."""
        if not self._token:
            self._login()
        try:
            return self._fetch(method, path, None, self._token).decode()
        except MasterRefused as error:
            if error.status != 401 or self.credentials.token or not self.credentials.user:
                raise
        self._login()
        return self._fetch(method, path, None, self._token).decode()

    def _login(self) -> None:
        if self.credentials.token:
            self._token = self.credentials.token
            return
        if not self.credentials.user:
            raise MasterUnavailable("no credentials: set DET_USER and DET_PASS, or --token-file")
        body = {
            "username": self.credentials.user,
            "password": hashed(self.credentials.password),
            "isHashed": True,
        }
        try:
            answer = self._send("POST", "/api/v1/auth/login", body, "")
        except MasterRefused as error:
            raise MasterUnavailable(
                f"login as {self.credentials.user!r} refused: {error}"
            ) from None
        self._token = str(answer.get("token") or "")

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None, token: str
    ) -> dict[str, Any]:
        raw = self._fetch(method, path, body, token)
        try:
            answer = json.loads(raw or b"{}")
        except ValueError:
            raise MasterUnavailable(f"{method} {path.split('?')[0]}: not JSON") from None
        if not isinstance(answer, dict):
            raise MasterUnavailable(f"{method} {path.split('?')[0]}: not a JSON object")
        return answer

    def _fetch(self, method: str, path: str, body: dict[str, Any] | None, token: str) -> bytes:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._ssl) as reply:
                raw: bytes = reply.read()
        except urllib.error.HTTPError as error:
            raise MasterRefused(error.code, _error_message(error)) from None
        except (urllib.error.URLError, OSError, TimeoutError) as error:
            reason = getattr(error, "reason", error)
            raise MasterUnavailable(f"{method} {path.split('?')[0]}: {reason}") from None
        return raw


def _whole(page: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """All the items of an unpaged answer (limit 0 is all), or an incomplete read."""
    items = list(page.get(key) or [])
    total = (page.get("pagination") or {}).get("total")
    if total is not None and int(total) != len(items):
        raise MasterUnavailable(f"{key}: {len(items)} listed, the pagination says {total}")
    return items


def _error_message(error: urllib.error.HTTPError) -> str:
    """The master's own words: ``{"error": {"code", "reason", "error"}}``, or an echo
    route's ``{"message": ...}`` (api.JSONErrorHandler)."""
    try:
        document = json.loads(error.read() or b"{}")
        detail = document.get("error") or {}
        said = detail.get("error") or detail.get("reason") or document.get("message")
        return str(said or error.reason)
    except (ValueError, AttributeError, OSError):
        return str(error.reason)
