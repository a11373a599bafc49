"""A local Determined master for the tests: the REST API of a stock master, on loopback.

``LocalDetermined`` serves the slice of a Determined 0.38 master's HTTP API that an
autoscaler reads and Determined's own CLI (``det agent|slot|task|job``) calls, on
127.0.0.1 (an OS-chosen port), with the real master's paths, JSON and errors. What it
says about the API comes from Determined's source (proto/src/determined/**, the
master's ``api_*.go``, ``rm/agentrm``, ``grpcutil``), not from memory:

* JSON as the master's grpc-gateway (v1, ``JSONPb{EmitDefaults: true}``) writes it:
  lowerCamelCase names, every field with its default (an unset message is ``null``,
  an empty list ``[]``, an empty map ``{}``), except proto3 ``optional`` fields, which
  are left out when unset; enums by name; timestamps RFC 3339 in UTC; map keys sorted.
* Errors as ``grpcutil.errorHandler`` writes them, with a trailing newline:
  ``{"error": {"code": <gRPC code>, "reason": "<code name>", "error": "<message>"}}``
  and the HTTP status grpc-gateway maps the code to (5 NotFound -> 404, 16
  Unauthenticated -> 401, 13 Internal -> 500...). An error the master raises as a
  plain Go error (``agent disconnected, wait for recovery``, ``cannot find resource
  pool X``) is code 2 Unknown, which the handler turns into 13 Internal (HTTP 500).
* Query parameters as grpc-gateway v1 reads them: lowerCamel or snake_case names,
  ``true``/``false``/``1``/``0``..., enums by name or number, a bad value HTTP 400,
  unknown parameters silently ignored (``label`` included: Determined removed agent
  labels, ``reserved "label"`` in both ``Agent`` and ``GetAgentsRequest``). A request
  body's unknown fields are ignored too; an empty body is the request's defaults.
* A path it does not serve is HTTP 501 ``Not Implemented`` (code 12), as the gateway
  mux answers when it has an error handler; a known path with another method, 501
  ``Method Not Allowed``.

Endpoints:

* ``GET /info`` (echo, not the gateway: snake_case, no auth): version 0.38.1,
  master_id, cluster_id, cluster_name, telemetry, sso_providers.
* ``POST /api/v1/auth/login`` ``{username, password, isHashed}``: the CLI sends the
  password salted and hashed (sha512 of a fixed salt + password, as
  ``determined.common.api.salt_and_hash``); a plain one is hashed here, as the master
  does. ``{token, user}``; a ``Set-Cookie: auth=...`` too. Bad credentials 401
  ``invalid credentials``, no username 400, an inactive user 403.
* ``GET /api/v1/me`` and ``GET /api/v1/auth/user`` -> ``{user}``;
  ``POST /api/v1/auth/logout`` ends the session (an access token survives it).
* ``POST /api/v1/tokens`` ``{userId, lifespan, description}`` -> ``{token, tokenId}``,
  admins only: a long-lived access token, accepted as a bearer token like a session.
* Every other call needs ``Authorization: Bearer TOKEN`` (or the ``auth`` cookie):
  none is 401 ``token missing``, an unknown, expired or logged-out one 401 ``invalid
  credentials``.
* ``GET /api/v1/agents`` (``offset``, ``limit`` with 0 meaning all and a negative
  offset counting from the end, ``orderBy``, ``sortBy``, ``excludeSlots``,
  ``excludeContainers``; ``pagination``), ``GET /api/v1/agents/{id}``,
  ``GET /api/v1/agents/{id}/slots``, ``POST /api/v1/agents/{id}/enable``,
  ``POST /api/v1/agents/{id}/disable`` ``{drain}`` (admins only). Slots are keyed
  ``/agents/{id}/slots/{n}``, their ``id`` is ``"n"``; a free slot's ``container`` is
  ``null``; the agent's ``containers`` are its slots' containers only.
* ``GET /api/v1/resource-pools`` (``offset``, ``limit``; sorted by name): a static
  pool has ``slotsPerAgent`` -1 and location ``on-prem``; ``slotsAvailable`` counts an
  enabled agent's slots, a draining agent's busy ones, a disabled agent's none.
* ``GET /api/v1/tasks`` -> ``allocationIdToSummary``: a placed allocation has one
  ``resources`` entry per agent it runs on, ``agentDevices`` keyed by agent id; a
  pending one has ``resources: []``.
* ``GET /api/v1/job-queues-v2`` and ``GET /api/v1/job-queues`` (``resourcePool``
  defaulting to the default compute pool, ``offset``, ``limit`` defaulting to 100,
  ``orderBy``, ``states``): ``{"full": Job}`` items in v2, ``Job`` in v1, ordered by
  position in the queue (``summary.jobsAhead``), then job id. Checkpoint GC tasks are
  not user-visible: they are in ``/api/v1/tasks`` but in no job queue. An unknown
  pool is HTTP 500 ``cannot find resource pool X``.
* ``GET /api/v1/master/config`` (what ``det master config`` calls; admins only, else
  403 ``user does not have permission``): ``{"config": ...}``, the master.yaml it runs
  with as Determined prints it (``launch_error``, ``cluster_name``,
  ``resource_manager``, ``resource_pools`` with defaults filled in; see
  ``determined_master_config``), pools added by ``add_pool`` included.
* Launching, with the stock master's admission (``determined_admission``): ``POST
  /api/v1/commands``, ``/api/v1/notebooks``, ``/api/v1/shells``, ``/api/v1/tensorboards``
  (``{config, templateName, workspaceId, files}``; a TensorBoard also ``experimentIds``
  or ``trialIds`` of experiments made here, else 400 ``no experiments found``; a notebook
  ``preview``) and ``POST /api/v1/experiments`` (``{config: YAML text, activate,
  validateOnly, projectId, modelDefinition}``), as ``det cmd run``, ``det notebook
  start``, ``det shell start``, ``det tensorboard start`` (each with ``-d``) and ``det
  experiment create`` send them. Resources come from the config: ``resources.slots``
  (default 1; a TensorBoard always 0), ``resources.slots_per_trial`` for an experiment
  (default 1; ``resources.slots`` there is refused, as by the master),
  ``resources.resource_pool`` (default: the default compute pool, the aux pool for 0
  slots), ``resources.priority``, ``resources.is_single_node``. Refused: the task
  launchers answer 400 ``failed to prepare launch params: validating resources: request
  unfulfillable, please try requesting less slots`` (or the pool's error, e.g. ``resource
  pool X does not exist or is not available to workspace id 1``); an experiment 500
  ``invalid resource configuration: slots requested exceeds cluster capacity`` (a plain
  Go error there, so Internal) or 400 for an unknown pool. Accepted: ``{command|notebook
  |shell|tensorboard, config, warnings}`` or ``{experiment, config, warnings}``, the
  entity queued (``STATE_QUEUED``), ``warnings`` ``["LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED"]``
  when admitted over capacity with ``launch_error: false``. An activated experiment
  queues one trial of ``slots_per_trial`` (a searcher's later trials come when a test
  calls ``create_trial(experiment_id)``); a paused one queues none.
* History, what the master's database keeps of the work it ran (``history``; since the
  last reset() or configure()): ``GET /api/v1/experiments`` (``limit``, ``offset`` paged
  as the database pages: limit 0 is 100, -1 all; ``sortBy`` id, description, name, start
  or end time, state, trials, user, pool; ``orderBy``; filters ``states`` (the stored
  state, ACTIVE for one shown QUEUED or RUNNING), ``users``, ``userIds``, ``archived``,
  ``name``, ``description``, ``labels``; ``pagination``; no trial ids in the list, a
  ``duration``), ``GET /api/v1/experiments/{id}`` (``experiment`` with its trial ids,
  ``config``, ``jobSummary`` while active), ``GET /api/v1/experiments/{id}/trials`` (each
  trial's start, end, state, task ids, wall-clock time; ``states``, ``sortBy``,
  ``orderBy``, ``offset``, ``limit``), ``GET /api/v1/tasks/{taskId}`` (the task's type,
  start and end, and its allocation: its run's start and end as PostgreSQL text, QUEUED,
  RUNNING or TERMINATED, ``slots`` 0 as ``get_task.sql`` selects none) and ``GET
  /api/v1/resources/allocation/raw?timestamp_after=&timestamp_before=`` (trial entries and
  each agent's stay, kind ``agent`` with its id as the username, each with the seconds it
  overlaps the period; HTTP 400 ``no start time provided``, ``no end time provided``,
  ``start time cannot be after end time``). A task's allocation starts when it is placed
  and ends with it; an experiment ends with its last trial (COMPLETED if one completed,
  else ERROR); an agent's stay begins when it registers and ends when it is removed.
  Simpler than Determined (see ``history``): a trial's raw allocation is one ``training``
  span, start to end of its allocation; no provisioner ``instance`` entries; no restarts.
* ``GET /resources/allocation/allocations-csv?timestamp_after=&timestamp_before=`` (echo,
  not the gateway; times ``2006-01-02T15:04:05Z`` exactly): every allocation of every kind
  whose run meets the period, as ``core.go getResourceAllocations`` writes it: id, task
  type, owner, workspace, experiment id, slots, start, end, image-pull time (always 0.0
  here), slot-hours within the period, pool; its errors HTTP 500 ``{"message": ...}``, a
  missing token 401 ``Unauthorized``. The one record with every task's slots and pool.

The cluster model, with the master's semantics (``rm/agentrm``):

* The master's config: ``LocalDetermined(master_config=...)`` or ``configure(...)``
  (master.yaml text or mapping), read and refused as the master reads and refuses it:
  its pools (a pool with a ``provider`` is listed as AWS or GCP, with ``slotsPerAgent``
  its slots per instance, ``maxAgents`` its ``max_instances``, ``location`` its region
  or zone and ``details`` from the config), default pools and ``launch_error``.
* Pools (``add_pool``: STATIC, AWS or GCP, a cloud one with a provider made from its
  arguments), agents (``add_agent``) with N CUDA slots.
* ``launch()`` submits through the same admission as the launch endpoints (ApiError when
  refused); ``submit()`` queues a task already admitted (an allocation; a job unless it
  is a checkpoint GC), so a test can build any queue; ``schedule()`` is a scheduler
  tick. It first prunes the pools whose provisioner has a launch error
  (``provisioner_launch_error(pool, message, listed_instances=N)``: pending tasks
  wanting more slots than the N listed instances hold end in ERROR; refused, ValueError,
  for a pool whose provider cannot list, whose provisioner never launches), then places
  pending tasks in priority then submission order, skipping those
  that do not fit yet, on enabled agents of their pool: a task that fits on one agent
  takes, of those with room, the one the pool's ``fitting_policy`` scores highest (its
  scheduler's, else ``resource_manager.scheduler``'s; ``best`` by default: the fewest
  free slots; ``worst``: the largest share free), ties to the lowest id, lowest device
  ids first; one larger than any agent takes whole free agents of one size that divides
  it (multi-agent); a zero-slot task takes no slot, runs on an enabled agent with
  aux capacity (100 per agent), and shows in no slot and in no agent's
  ``containers``: only ``/api/v1/tasks`` says it runs there.
* Disable with ``drain: true``: the agent keeps its running tasks and takes no new
  ones; without drain its tasks (slotted and zero-slot, all of a multi-agent task) are
  killed. Enable clears both. ``reconnecting(agent)``: the agent lost its websocket
  and the master waits for it: listed ``enabled: false, draining: true``, and enable
  or disable answers HTTP 500 ``agent disconnected, wait for recovery``.
* ``finish(task)`` ends a task; ``remove_agent`` ends the agent and kills its tasks.
  ``advance(seconds)`` lets time pass on the fake clock, so that work runs for hours;
  ``now()`` reads it.

Agents that connect themselves (``dynagent.testing.machines.agent_machine``'s agent stand-in):
``POST /agents?id=&resource_pool=&slots=&slot_type=`` (``cuda``, ``cpu`` or ``none``)
registers an agent as ``add_agent`` makes one, in the pool it names (an unknown pool is
refused, HTTP 400, as the master refuses it); a known id registering again is the same
agent coming back. ``POST /agents/{id}/heartbeat`` keeps it (404 for an unknown id, so the
agent registers again). Simpler than the real master, whose agent holds a websocket on
``/agents?id=&resource_pool=&reconnect=`` and sends its devices in an AgentStarted
message: plain HTTP, no auth, and a silent agent is never dropped. ``registrations()``
and ``heartbeats(id)`` show what came.

``LocalDetermined(tls=True)`` serves HTTPS with a self-signed certificate made for the
session (``certificate.cert_pem``, for 127.0.0.1), as a master with ``security.tls``.

Knobs the API has no call for: ``expire_tokens()`` (session tokens then get 401),
``down()``/``up()`` (connections refused, or every answer a proxy's 502),
``fail_next(n, status)`` (500 or 503 with the error shape), ``slow(seconds)``,
``half_page(n)`` (the next paged answers carry half their items while their
``pagination`` still counts all of them), ``calls()``. Ids, tokens and times are
deterministic: a fake clock starts at 2025-01-01T00:00:00Z and ticks 1.25 s per event.

Simpler than Determined, for launching: one workspace (1) and project (1); no templates,
context files or model definitions kept; a launch config is not checked beyond its
resources (the real master decodes it strictly and validates it), an experiment config
beyond ``resources`` and ``entrypoint``; names are made-up three-word pet names; a
zero-slot launch whose default aux pool names no pool is answered 500 ``cannot find
resource pool X`` (the real master fails its allocation, wrapped further). The trial
restart check (``trial.go checkResourcePoolRemainingCapacity``) is not modelled: Determined
runs it only when a trial failed on nodes a log policy blocked.

Where the parts live: the cluster and what a test does to it (``cluster``), the state it
keeps (``state``), the scheduler tick (``scheduler``), launching through admission
(``launching``), the REST routes and their handlers (``routes``), the messages they answer
with (``messages``), the history endpoints (``history``) and the gateway's errors, request
parsing and paging (``gateway``). This
module serves them over HTTP, with the knobs.
"""

from __future__ import annotations

import re
import ssl
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, Self, cast

from werkzeug.wrappers import Request, Response

from dynagent.testing.determined.cluster import Cluster
from dynagent.testing.determined.gateway import (
    HTTP_TO_CODE,
    ApiError,
    error_response,
    json_response,
)
from dynagent.testing.determined.history import ALLOCATIONS_CSV, allocations_csv, echo_error
from dynagent.testing.determined.master_config import DEFAULT_POOL
from dynagent.testing.determined.routes import ROUTES, authenticate, master_info
from dynagent.testing.determined.state import (
    DEFAULT_PASSWORD,
    SLOT_TYPES,
    AgentRegistration,
    LaunchedTask,
    LaunchType,
    PoolType,
    SlotType,
    SubmittedTask,
    TaskType,
    salt_and_hash,
)
from dynagent.testing.loopback import LOOPBACK, CallLog, LoopbackServer, Service

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

    from dynagent.testing.determined.tls import Certificate

__all__ = [
    "DEFAULT_PASSWORD",
    "AgentRegistration",
    "ApiCall",
    "ApiError",
    "LaunchType",
    "LaunchedTask",
    "LocalDetermined",
    "PoolType",
    "SlotType",
    "SubmittedTask",
    "TaskType",
    "salt_and_hash",
]


class ApiCall(NamedTuple):
    """One request the fake answered: method, path, query parameters, HTTP status."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    status: int


class LocalDetermined(Cluster, Service):
    """A fake Determined master on 127.0.0.1, an OS-chosen port; see the module docstring.

    Use it as a context manager, or call start() and stop(). It starts with the pools of
    ``master_config`` (master.yaml's text or its mapping, read as the master reads it:
    dynagent.testing.determined.master_config; MasterConfigError if the master would not
    start with it). Without one: one static pool, ``default`` (the default compute and
    aux pool). And the given users (by default ``admin``, an admin, and ``determined``,
    both with DEFAULT_PASSWORD; the first user is an admin in any case). Everything here
    is safe to call from any thread.
    """

    def __init__(
        self,
        *,
        cluster_name: str = "local-determined",
        users: Mapping[str, str] | None = None,
        tls: bool = False,
        master_config: str | Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(cluster_name=cluster_name, users=users, master_config=master_config)
        # HTTPS with a certificate made here, as a master with security.tls serves.
        self.certificate: Certificate | None = None
        if tls:  # cryptography is imported only for a TLS master
            from dynagent.testing.determined.tls import self_signed

            self.certificate = self_signed()
        self._wake = threading.Event()  # cuts slow() short when the server stops
        self._calls = CallLog[ApiCall]()
        self._server: LoopbackServer | None = None
        self._port = 0

    # -- life cycle -----------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("this LocalDetermined is already running")
        self._wake.clear()
        self._server = LoopbackServer(self._app, "local-determined", ssl_context=self._tls())
        self._port = self._server.port
        return self

    def stop(self) -> None:
        """Stop serving, close the listening socket, join the thread. Safe to repeat."""
        self._wake.set()
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self._port = 0

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("LocalDetermined is not running")
        return self._port

    @property
    def url(self) -> str:
        """The master URL, as DET_MASTER or ``det -m`` take it."""
        scheme = "https" if self.certificate is not None else "http"
        return f"{scheme}://{LOOPBACK}:{self.port}"

    def _tls(self) -> ssl.SSLContext | None:
        return None if self.certificate is None else self.certificate.server_context()

    # -- outages --------------------------------------------------------------------

    def down(self, mode: Literal["refused", "502"] = "refused") -> None:
        """The master goes away: connections refused (the port closes; up() reopens the
        same one), or every request answered 502 by a proxy in front of it."""
        if mode == "502":
            with self._lock:
                self._state.bad_gateway = True
            return
        if mode != "refused":
            raise ValueError(f"mode {mode!r}: refused or 502")
        if self._server is None:
            raise RuntimeError("LocalDetermined is not running")
        self._wake.set()
        self._server.close()
        self._server = None

    def up(self) -> None:
        """Back after down(): on the same port."""
        with self._lock:
            self._state.bad_gateway = False
        if self._server is None:
            if not self._port:
                raise RuntimeError("LocalDetermined was never started")
            self._wake.clear()
            self._server = LoopbackServer(
                self._app, "local-determined", port=self._port, ssl_context=self._tls()
            )

    def fail_next(self, n: int = 1, status: int = 500, path: str | None = None) -> None:
        """The next ``n`` requests (to paths starting with ``path``, if given) fail with
        HTTP ``status`` (500 Internal or 503 Unavailable) in the API's error shape."""
        if status not in (500, 503):
            raise ValueError("status: 500 or 503")
        with self._lock:
            self._state.fail.extend([(status, path)] * n)

    def release(self, version: str) -> None:
        """Answer as an older master: before 0.23.1 there is no ``/api/v1/job-queues-v2``
        (the gateway answers 501 Not Implemented, as for any path it lacks)."""
        parts = tuple(int(p) for p in version.split(".")[:3])
        with self._lock:
            self._state.unserved = {"/api/v1/job-queues-v2"} if parts < (0, 23, 1) else set()

    def slow(self, seconds: float) -> None:
        """Every answer waits this long first (0 to stop); stop() cuts the wait short."""
        with self._lock:
            self._state.delay = max(0.0, seconds)

    def half_page(self, n: int = 1) -> None:
        """The next ``n`` paged answers (agents, resource pools, job queues) carry only
        the first half of their items, their ``pagination`` still counting all: a
        truncated page a careful client must notice."""
        with self._lock:
            self._state.half_pages += n

    # -- calls ----------------------------------------------------------------------

    def calls(self) -> list[ApiCall]:
        return self._calls.snapshot()

    def clear_calls(self) -> None:
        self._calls.clear()

    # -- HTTP -----------------------------------------------------------------------

    def _app(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        request = Request(environ)
        response = self._respond(request)
        self._calls.record(
            ApiCall(
                request.method,
                request.path,
                tuple((k, v) for k, vs in request.args.lists() for v in vs),
                response.status_code,
            )
        )
        return response(environ, start_response)

    def _respond(self, request: Request) -> Response:
        with self._lock:
            delay = self._state.delay
            bad_gateway = self._state.bad_gateway
            failure = None if bad_gateway else self._take_failure(request.path)
        if delay:
            self._wake.wait(delay)
        if bad_gateway:
            return Response(
                "<html><head><title>502 Bad Gateway</title></head>\n<body>\n"
                "<center><h1>502 Bad Gateway</h1></center>\n</body></html>\n",
                status=502,
                content_type="text/html",
            )
        if failure is not None:
            error = ApiError(
                HTTP_TO_CODE[failure],
                "internal server error" if failure == 500 else "service unavailable",
            )
            return error_response(error)
        try:
            return self._route(request)
        except ApiError as error:
            return error_response(error)

    def _take_failure(self, path: str) -> int | None:
        for index, (status, prefix) in enumerate(self._state.fail):
            if prefix is None or path.startswith(prefix):
                del self._state.fail[index]
                return status
        return None

    def _route(self, request: Request) -> Response:
        path = request.path
        if path == "/info":
            if request.method != "GET":
                return Response("Method Not Allowed", status=405)
            return json_response(master_info(self._state))
        if path == "/agents" or path.startswith("/agents/"):
            return self._agent_connection(request)
        if path == ALLOCATIONS_CSV:
            return self._allocations_csv(request)
        if not path.startswith("/api/v1/"):
            return Response('{"message":"Not Found"}\n', 404, content_type="application/json")
        allowed: list[str] = []
        if path in self._state.unserved:
            raise ApiError(12, "Not Implemented")
        for method, pattern, handler, needs_auth in ROUTES:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if method != request.method:
                allowed.append(method)
                continue
            with self._lock:
                user = authenticate(self._state, request) if needs_auth else None
                return handler(self._state, request, user, **match.groupdict())
        if allowed:
            raise ApiError(12, "Method Not Allowed")
        raise ApiError(12, "Not Implemented")

    def _allocations_csv(self, request: Request) -> Response:
        """An echo route: echo's errors (``{"message": ...}``), a token as the API takes."""
        if request.method != "GET":
            return echo_error(405, "Method Not Allowed")
        with self._lock:
            try:
                authenticate(self._state, request)
            except ApiError as error:
                if error.code == 16:  # ProcessAuthentication: echo.ErrUnauthorized
                    return echo_error(401, "Unauthorized")
                return echo_error(error.http_status, error.message)
            return allocations_csv(self._state, request)

    # -- agents that connect themselves ---------------------------------------------

    def _agent_connection(self, request: Request) -> Response:
        if request.method != "POST":
            return Response("Method Not Allowed\n", status=405)
        heartbeat = _HEARTBEAT.fullmatch(request.path)
        with self._lock:
            if heartbeat is not None:
                agent_id = heartbeat.group(1)
                if agent_id not in self._state.agents:
                    return Response(f"agent {agent_id} is not connected\n", status=404)
                self._state.heartbeats[agent_id] = self._state.heartbeats.get(agent_id, 0) + 1
                return Response("", status=200)
            if request.path != "/agents":
                return Response("Not Found\n", status=404)
            try:
                registration = self._register(request.args)
            except ValueError as exc:
                return Response(f"{exc}\n", status=400)
            self._state.registrations.append(registration)
            return Response("", status=200)

    def _register(self, args: Mapping[str, str]) -> AgentRegistration:
        agent_id = args.get("id", "")
        pool = args.get("resource_pool", "") or DEFAULT_POOL
        slot_type = args.get("slot_type", "cuda")
        slots_text = args.get("slots", "0")
        if not slots_text.isdigit():
            raise ValueError(f"slots must be a number, not {slots_text!r}")
        if slot_type not in SLOT_TYPES:
            raise ValueError(f"unknown slot type {slot_type!r}")
        registration = AgentRegistration(agent_id, pool, int(slots_text), cast(SlotType, slot_type))
        known = self._state.agents.get(agent_id)
        if known is None:
            self.add_agent(agent_id, pool, registration.slots, slot_type=registration.slot_type)
        elif known.pool != pool:
            raise ValueError(f"agent {agent_id} is in pool {known.pool}, not {pool}")
        else:
            self.reconnecting(agent_id, False)
        return registration


_HEARTBEAT: Final = re.compile(r"/agents/([^/]+)/heartbeat")
