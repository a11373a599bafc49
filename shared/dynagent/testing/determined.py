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

The cluster model, with the master's semantics (``rm/agentrm``):

* Pools (``add_pool``: STATIC, AWS or GCP), agents (``add_agent``) with N CUDA slots.
* ``submit()`` queues a task (an allocation; a job unless it is a checkpoint GC);
  ``schedule()`` places pending tasks in priority then submission order, skipping those
  that do not fit yet, on enabled agents of their pool: a task that fits on one agent
  takes the agent with the fewest free slots that fit (best fit), lowest device ids
  first; one larger than any agent takes whole free agents of one size that divides
  it (multi-agent); a zero-slot task takes no slot, runs on an enabled agent with
  aux capacity (100 per agent), and shows in no slot and in no agent's
  ``containers``: only ``/api/v1/tasks`` says it runs there.
* Disable with ``drain: true``: the agent keeps its running tasks and takes no new
  ones; without drain its tasks (slotted and zero-slot, all of a multi-agent task) are
  killed. Enable clears both. ``reconnecting(agent)``: the agent lost its websocket
  and the master waits for it: listed ``enabled: false, draining: true``, and enable
  or disable answers HTTP 500 ``agent disconnected, wait for recovery``.
* ``finish(task)`` ends a task; ``remove_agent`` ends the agent and kills its tasks.

Agents that connect themselves (``dynagent.testing.agent_machine``'s agent stand-in):
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
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import ssl
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, Self, cast, get_args

from werkzeug.wrappers import Request, Response

from dynagent.testing.loopback import LOOPBACK, CallLog, LoopbackServer, Service

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

    from dynagent.testing.tls import Certificate

VERSION: Final = "0.38.1"
# determined.common.api.authentication.PASSWORD_SALT: the client hashes before sending.
PASSWORD_SALT: Final = "GubPEmmotfiK9TMD6Zdw"
DEFAULT_POOL: Final = "default"
# Complex enough that Determined's CLI does not warn about it on every run.
DEFAULT_PASSWORD: Final = "L0cal-Determined"
DEFAULT_PRIORITY: Final = 42  # the priority scheduler's default
MAX_AUX_CONTAINERS_PER_AGENT: Final = 100  # resource pool config default
DEFAULT_JOBS_LIMIT: Final = 100  # GetJobs/GetJobsV2 when limit is 0
DEFAULT_BRAND: Final = "NVIDIA A100-SXM4-80GB"
DEFAULT_TOKEN_LIFESPAN: Final = timedelta(days=30)
MAX_TOKEN_LIFESPAN: Final = timedelta(days=30)
_EPOCH: Final = datetime(2025, 1, 1, tzinfo=UTC)
_TICK: Final = timedelta(milliseconds=1250)
_CLUSTER_ID: Final = "3c6e3ad7-13e9-4c5d-9a41-7cf0b1a1f0e1"
_MASTER_ID: Final = "0f0e3b1c-7d2a-4a55-8b5e-2b8c6f1a9d10"

JsonObject = dict[str, Any]
SlotType = Literal["cuda", "cpu", "none"]
_SLOT_TYPES: Final = frozenset(get_args(SlotType))
# Determined's device type for a slot type's devices (a none agent has no devices).
_DEVICE_TYPES: Final = {"cuda": "TYPE_CUDA", "cpu": "TYPE_CPU", "none": "TYPE_UNSPECIFIED"}
PoolType = Literal["STATIC", "AWS", "GCP"]
TaskType = Literal[
    "TRIAL", "COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD", "CHECKPOINT_GC", "GENERIC"
]
_TASK_TYPES: Final = frozenset(get_args(TaskType))
# Determined's job type for each user-visible task type; checkpoint GC has no job.
_JOB_TYPES: Final = {
    "TRIAL": "TYPE_EXPERIMENT",
    "COMMAND": "TYPE_COMMAND",
    "NOTEBOOK": "TYPE_NOTEBOOK",
    "SHELL": "TYPE_SHELL",
    "TENSORBOARD": "TYPE_TENSORBOARD",
    "GENERIC": "TYPE_GENERIC",
}


def salt_and_hash(password: str) -> str:
    """What Determined's client sends as a hashed password (an empty one stays empty)."""
    if not password:
        return password
    return hashlib.sha512((PASSWORD_SALT + password).encode()).hexdigest()


def timestamp(when: datetime) -> str:
    """A protobuf Timestamp in JSON: UTC, ``Z``, 0, 3, 6 or 9 fractional digits."""
    when = when.astimezone(UTC)
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    micros = when.microsecond
    if micros:
        text += f".{micros // 1000:03d}" if micros % 1000 == 0 else f".{micros:06d}"
    return text + "Z"


# --------------------------------------------------------------------------------------
# Errors, as grpcutil.errorHandler writes them
# --------------------------------------------------------------------------------------

# gRPC code -> (name as codes.Code.String() spells it, HTTP status per grpc-gateway v1).
_CODES: Final = {
    2: ("Unknown", 500),
    3: ("InvalidArgument", 400),
    5: ("NotFound", 404),
    7: ("PermissionDenied", 403),
    9: ("FailedPrecondition", 400),
    12: ("Unimplemented", 501),
    13: ("Internal", 500),
    14: ("Unavailable", 503),
    16: ("Unauthenticated", 401),
}
_HTTP_TO_CODE: Final = {500: 13, 501: 12, 503: 14, 400: 3, 401: 16, 403: 7, 404: 5}


class ApiError(Exception):
    """An error answer: a gRPC status code and its message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        if code not in _CODES:
            raise ValueError(f"gRPC code {code} is not modelled")
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return _CODES[self.code][1]

    def body(self) -> JsonObject:
        return {"error": {"code": self.code, "reason": _CODES[self.code][0], "error": self.message}}


def _not_found(kind: str, name: str) -> ApiError:
    return ApiError(5, f"{kind} '{name}' not found")


_INVALID_CREDENTIALS: Final = "invalid credentials"
_RECOVERING: Final = "agent disconnected, wait for recovery"


# --------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------


@dataclass
class _User:
    id: int
    username: str
    password_hash: str
    admin: bool
    active: bool
    modified: datetime
    last_auth: datetime | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "id": self.id,
            "username": self.username,
            "admin": self.admin,
            "active": self.active,
            "agentUserGroup": None,
            "displayName": "",
            "modifiedAt": timestamp(self.modified),
            "remote": False,
        }
        if self.last_auth is not None:  # proto3 optional: absent when unset
            out["lastAuthAt"] = timestamp(self.last_auth)
        return out


@dataclass
class _Token:
    user_id: int
    access: bool  # a long-lived access token, not a login session
    expires: datetime | None = None


@dataclass
class _Pool:
    name: str
    type: PoolType
    slots_per_agent: int  # -1 for a static pool
    location: str
    instance_type: str
    preemptible: bool
    min_agents: int
    max_agents: int
    description: str


@dataclass
class _Agent:
    id: str
    pool: str
    brand: str
    address: str
    registered: datetime
    owners: list[str | None]  # the container on each device, by device id
    zero_slot: list[str] = field(default_factory=list)  # containers with no device
    enabled: bool = True
    draining: bool = False
    reconnecting: bool = False
    stashed: tuple[bool, bool] = (True, False)  # (enabled, draining) before reconnecting
    slot_type: SlotType = "cuda"

    @property
    def slots(self) -> int:
        return len(self.owners)

    def free_devices(self) -> list[int]:
        return [d for d, owner in enumerate(self.owners) if owner is None]

    def used(self) -> int:
        return sum(owner is not None for owner in self.owners)

    def schedulable(self) -> bool:
        return self.enabled and not self.draining and not self.reconnecting


@dataclass
class _Resources:
    container_id: str
    agent_id: str
    devices: list[int]


@dataclass
class _Task:
    seq: int
    task_id: str
    allocation_id: str
    job_id: str | None
    entity_id: str
    name: str
    type: str
    slots: int
    pool: str
    priority: int
    user_id: int
    username: str
    submitted: datetime
    resources: list[_Resources] = field(default_factory=list)

    @property
    def placed(self) -> bool:
        return bool(self.resources)


class SubmittedTask(NamedTuple):
    """What submit() made: the task, its allocation and its job (None for checkpoint GC)."""

    task_id: str
    allocation_id: str
    job_id: str | None


class AgentRegistration(NamedTuple):
    """An agent that connected itself (POST /agents): who, where, with what."""

    agent_id: str
    pool: str
    slots: int
    slot_type: SlotType


class ApiCall(NamedTuple):
    """One request the fake answered: method, path, query parameters, HTTP status."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    status: int


class _State:
    """Everything a reset() forgets."""

    def __init__(self) -> None:
        self.now = _EPOCH
        self.counter = itertools.count(1)
        self.users: dict[str, _User] = {}
        self.tokens: dict[str, _Token] = {}
        self.token_ids: dict[str, int] = {}
        self.pools: dict[str, _Pool] = {}
        self.default_compute_pool = DEFAULT_POOL
        self.default_aux_pool = DEFAULT_POOL
        self.agents: dict[str, _Agent] = {}
        self.tasks: dict[str, _Task] = {}  # by task id
        self.ended: dict[str, str] = {}  # task id -> FINISHED or KILLED
        self.registrations: list[AgentRegistration] = []
        self.heartbeats: dict[str, int] = {}
        self.experiments = itertools.count(1)
        # knobs
        self.fail: list[tuple[int, str | None]] = []  # (HTTP status, path prefix)
        self.half_pages = 0
        self.unserved: set[str] = set()  # paths an older master does not have
        self.delay = 0.0
        self.bad_gateway = False


# --------------------------------------------------------------------------------------
# Request parsing, as grpc-gateway v1 does it
# --------------------------------------------------------------------------------------

_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_ORDER_BY: Final = ("ORDER_BY_UNSPECIFIED", "ORDER_BY_ASC", "ORDER_BY_DESC")
_AGENT_SORT_BY: Final = ("SORT_BY_UNSPECIFIED", "SORT_BY_ID", "SORT_BY_TIME")
_JOB_STATES: Final = (
    "STATE_UNSPECIFIED",
    "STATE_QUEUED",
    "STATE_SCHEDULED",
    "STATE_SCHEDULED_BACKFILLED",
)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class _Params:
    """A request's query parameters, read as the gateway reads them into the proto."""

    def __init__(self, request: Request) -> None:
        self._values: dict[str, list[str]] = {}
        for key, values in request.args.lists():
            self._values.setdefault(_camel(key), []).extend(values)

    def _one(self, name: str) -> str | None:
        values = self._values.get(name)
        if not values:
            return None
        if len(values) > 1:
            raise ApiError(3, f"too many values for field {name!r}: {', '.join(values)}")
        return values[0]

    def int32(self, name: str) -> int:
        raw = self._one(name)
        if raw is None:
            return 0
        if not re.fullmatch(r"[+-]?\d+", raw) or not -(2**31) <= int(raw) < 2**31:
            raise ApiError(3, f'strconv.ParseInt: parsing "{raw}": invalid syntax')
        return int(raw)

    def bool(self, name: str) -> bool:
        raw = self._one(name)
        if raw is None:
            return False
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        raise ApiError(3, f'strconv.ParseBool: parsing "{raw}": invalid syntax')

    def string(self, name: str) -> str:
        return self._one(name) or ""

    def enum(self, name: str, names: tuple[str, ...]) -> str:
        raw = self._one(name)
        return names[0] if raw is None else self._enum_value(raw, names)

    def enums(self, name: str, names: tuple[str, ...]) -> list[str]:
        return [self._enum_value(raw, names) for raw in self._values.get(name, [])]

    @staticmethod
    def _enum_value(raw: str, names: tuple[str, ...]) -> str:
        if raw in names:
            return raw
        if raw.isdigit() and int(raw) < len(names):
            return names[int(raw)]
        raise ApiError(3, f"{raw} is not valid")


def _body(request: Request) -> JsonObject:
    """A JSON request body; empty is all defaults. Field names camel or snake."""
    raw = request.get_data()
    if not raw.strip():
        return {}
    try:
        decoded = json.loads(raw)
    except ValueError as exc:
        raise ApiError(3, f"invalid JSON body: {exc}") from None
    if decoded is None:
        return {}
    if not isinstance(decoded, dict):
        raise ApiError(3, "json: cannot unmarshal non-object into the request message")
    return {_camel(key): value for key, value in decoded.items()}


def _field(body: Mapping[str, Any], name: str, kind: type, default: Any) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if kind is int and isinstance(value, str) and re.fullmatch(r"-?\d+", value):
        return int(value)  # jsonpb takes int32 as a number or a string
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ApiError(3, f"bad value for field {name!r}: {json.dumps(value)}")
    return value


def _paginate(items: list[Any], offset: int, limit: int) -> tuple[list[Any], JsonObject]:
    """api.Paginate: limit 0 means all, a negative offset counts from the end."""
    total = len(items)
    start = total + offset if offset < 0 else offset
    end = start + limit
    if limit == 0 or end > total:
        end = total
    if not 0 <= start <= total or end < start:
        raise ApiError(3, "offset out of bounds")
    pagination = {
        "offset": offset,
        "limit": limit,
        "startIndex": start,
        "endIndex": end,
        "total": total,
    }
    return items[start:end], pagination


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s|ms)")
_UNITS: Final = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _go_duration(text: str) -> timedelta:
    """A Go duration string (``720h``, ``1h30m``) as time.ParseDuration reads the common ones."""
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    parts = _DURATION.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        raise ValueError(f'time: invalid duration "{text}"')
    return timedelta(seconds=sign * sum(float(n) * _UNITS[u] for n, u in parts))


# --------------------------------------------------------------------------------------
# The master
# --------------------------------------------------------------------------------------


class LocalDetermined(Service):
    """A fake Determined master on 127.0.0.1, an OS-chosen port; see the module docstring.

    Use it as a context manager, or call start() and stop(). It starts with one static
    pool, ``default`` (the default compute and aux pool), and the given users (by
    default ``admin``, an admin, and ``determined``, both with DEFAULT_PASSWORD; the
    first user is an admin in any case). Everything here is safe to call from any thread.
    """

    def __init__(
        self,
        *,
        cluster_name: str = "local-determined",
        users: Mapping[str, str] | None = None,
        tls: bool = False,
    ) -> None:
        self._cluster_name = cluster_name
        # HTTPS with a certificate made here, as a master with security.tls serves.
        self.certificate: Certificate | None = None
        if tls:  # cryptography is imported only for a TLS master
            from dynagent.testing.tls import self_signed

            self.certificate = self_signed()
        self._initial_users = dict(
            users
            if users is not None
            else {"admin": DEFAULT_PASSWORD, "determined": DEFAULT_PASSWORD}
        )
        self._lock = threading.RLock()
        self._wake = threading.Event()  # cuts slow() short when the server stops
        self._calls = CallLog[ApiCall]()
        self._server: LoopbackServer | None = None
        self._port = 0
        self._state = _State()
        self.reset()

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

    # -- state ----------------------------------------------------------------------

    def reset(self) -> None:
        """Back to one empty ``default`` pool and the initial users; knobs off."""
        with self._lock:
            self._state = _State()
            self.add_pool(DEFAULT_POOL)
            for index, (name, password) in enumerate(self._initial_users.items()):
                self.add_user(name, password, admin=(name == "admin" or index == 0))

    def _tick(self) -> datetime:
        self._state.now += _TICK
        return self._state.now

    def _uuid(self, kind: str) -> str:
        """A UUID4-shaped id, the same on every run."""
        digest = hashlib.sha256(f"{kind}:{next(self._state.counter)}".encode()).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))

    # -- users and tokens -----------------------------------------------------------

    def add_user(
        self, username: str, password: str, *, admin: bool = False, active: bool = True
    ) -> int:
        """Add a user; its id."""
        with self._lock:
            if username in self._state.users:
                raise ValueError(f"user {username!r} exists")
            user = _User(
                id=len(self._state.users) + 1,
                username=username,
                password_hash=salt_and_hash(password),
                admin=admin,
                active=active,
                modified=self._tick(),
            )
            self._state.users[username] = user
            return user.id

    def expire_tokens(self) -> None:
        """Every login session ends, as when sessions expire: their tokens now get 401.
        Access tokens (POST /api/v1/tokens) live on."""
        with self._lock:
            for token in [t for t, info in self._state.tokens.items() if not info.access]:
                del self._state.tokens[token]

    def login(self, username: str) -> str:
        """A session token for the user, without the API (for clients under test)."""
        with self._lock:
            return self._start_session(self._state.users[username])

    def _new_token(self, kind: str) -> str:
        raw = hashlib.sha256(f"{kind}:{next(self._state.counter)}".encode()).digest()
        return "v2.public." + base64.urlsafe_b64encode(raw * 3).decode().rstrip("=")

    def _start_session(self, user: _User) -> str:
        token = self._new_token("session")
        self._state.tokens[token] = _Token(user_id=user.id, access=False)
        user.last_auth = self._tick()
        return token

    def _user_by_id(self, user_id: int) -> _User | None:
        return next((u for u in self._state.users.values() if u.id == user_id), None)

    # -- pools ----------------------------------------------------------------------

    def add_pool(
        self,
        name: str,
        type: PoolType = "STATIC",
        *,
        slots_per_agent: int | None = None,
        location: str | None = None,
        instance_type: str = "",
        preemptible: bool = False,
        min_agents: int = 0,
        max_agents: int = 0,
        description: str = "",
        default_compute: bool = False,
        default_aux: bool = False,
    ) -> None:
        """A resource pool. A static pool's slotsPerAgent is -1; a cloud pool needs it."""
        if type not in ("STATIC", "AWS", "GCP"):
            raise ValueError(f"pool type {type!r}: STATIC, AWS or GCP")
        if type == "STATIC":
            if slots_per_agent is not None:
                raise ValueError("a static pool has no slots per agent (the API says -1)")
            per_agent = -1
        else:
            if slots_per_agent is None or slots_per_agent < 0:
                raise ValueError(f"a {type} pool needs slots_per_agent >= 0")
            per_agent = slots_per_agent
        default_location = {"STATIC": "on-prem", "AWS": "us-west-2", "GCP": "us-central1-a"}
        with self._lock:
            if name in self._state.pools:
                raise ValueError(f"pool {name!r} exists")
            self._state.pools[name] = _Pool(
                name=name,
                type=type,
                slots_per_agent=per_agent,
                location=location or default_location[type],
                instance_type=instance_type,
                preemptible=preemptible,
                min_agents=min_agents,
                max_agents=max_agents,
                description=description,
            )
            if default_compute:
                self._state.default_compute_pool = name
            if default_aux:
                self._state.default_aux_pool = name

    # -- agents ---------------------------------------------------------------------

    def add_agent(
        self,
        agent_id: str,
        pool: str = DEFAULT_POOL,
        slots: int = 8,
        *,
        hostname: str | None = None,
        brand: str = DEFAULT_BRAND,
        slot_type: SlotType = "cuda",
    ) -> None:
        """An agent connects with ``slots`` devices of ``slot_type`` (CUDA by default):
        enabled, not draining. A ``none`` agent has no slots."""
        if not agent_id or "/" in agent_id:
            raise ValueError(f"invalid agent id specified: {agent_id!r}")
        if slots < 0:
            raise ValueError("slots must be >= 0")
        if slot_type not in _SLOT_TYPES:
            raise ValueError(f"slot type {slot_type!r}: cuda, cpu or none")
        if slot_type == "none" and slots:
            raise ValueError("an agent with slot type none has no slots")
        with self._lock:
            if pool not in self._state.pools:
                raise ValueError(f"cannot find specified resource pool {pool} for agent {agent_id}")
            if agent_id in self._state.agents:
                raise ValueError(f"agent {agent_id!r} exists")
            index = len(self._state.agents) + 1
            self._state.agents[agent_id] = _Agent(
                id=agent_id,
                pool=pool,
                brand=brand,
                address=hostname or f"10.0.{index // 250}.{index % 250 + 1}",
                registered=self._tick(),
                owners=[None] * slots,
                slot_type=slot_type,
            )

    def remove_agent(self, agent_id: str) -> None:
        """The agent goes away (or misses its reconnect deadline); its tasks are killed."""
        with self._lock:
            self._kill_tasks_on(self._agent(agent_id))
            del self._state.agents[agent_id]

    def reconnecting(self, agent_id: str, reconnecting: bool = True) -> None:
        """The agent's websocket dropped and the master waits for it to come back
        (True), or it came back (False): while waiting it is listed disabled and
        draining, keeps its tasks, and enable/disable fail with HTTP 500."""
        with self._lock:
            agent = self._agent(agent_id)
            if reconnecting and not agent.reconnecting:
                agent.stashed = (agent.enabled, agent.draining)
                agent.enabled, agent.draining, agent.reconnecting = False, True, True
            elif not reconnecting and agent.reconnecting:
                (agent.enabled, agent.draining), agent.reconnecting = agent.stashed, False

    def agent_state(self, agent_id: str) -> tuple[bool, bool]:
        """(enabled, draining), as the API lists the agent."""
        with self._lock:
            agent = self._agent(agent_id)
            return agent.enabled, agent.draining

    def _agent(self, agent_id: str) -> _Agent:
        try:
            return self._state.agents[agent_id]
        except KeyError:
            raise KeyError(f"no agent {agent_id!r}") from None

    # -- tasks ----------------------------------------------------------------------

    def submit(
        self,
        name: str,
        slots: int,
        pool: str | None = None,
        type: TaskType = "TRIAL",
        *,
        priority: int = DEFAULT_PRIORITY,
        user: str | None = None,
    ) -> SubmittedTask:
        """Queue a task (not placed until schedule()). The pool defaults to the default
        compute pool (the aux pool for a zero-slot task)."""
        if type not in _TASK_TYPES:
            raise ValueError(f"task type {type!r}: one of {sorted(_TASK_TYPES)}")
        if slots < 0:
            raise ValueError("slots must be >= 0")
        with self._lock:
            state = self._state
            if pool is None:
                pool = state.default_aux_pool if slots == 0 else state.default_compute_pool
            if pool not in state.pools:
                raise ValueError(f"no pool {pool!r}")
            owner = state.users[user] if user else next(iter(state.users.values()))
            seq = next(state.counter)
            if type == "TRIAL":
                experiment = next(state.experiments)
                task_id = f"{experiment}.{self._uuid('trial')}"
                entity_id = str(experiment)
            else:
                task_id = self._uuid("task")
                entity_id = task_id
            job_id = self._uuid("job") if type in _JOB_TYPES else None
            task = _Task(
                seq=seq,
                task_id=task_id,
                allocation_id=f"{task_id}.1",
                job_id=job_id,
                entity_id=entity_id,
                name=name,
                type=type,
                slots=slots,
                pool=pool,
                priority=priority,
                user_id=owner.id,
                username=owner.username,
                submitted=self._tick(),
            )
            state.tasks[task_id] = task
            return SubmittedTask(task_id, task.allocation_id, job_id)

    def schedule(self) -> list[str]:
        """Place what fits, in priority then submission order; the task ids placed."""
        with self._lock:
            placed: list[str] = []
            pending = [t for t in self._state.tasks.values() if not t.placed]
            for task in sorted(pending, key=lambda t: (t.priority, t.seq)):
                fit = self._fit(task)
                if fit is None:
                    continue
                for agent, devices in fit:
                    container_id = self._uuid("container")
                    if devices:
                        for device in devices:
                            agent.owners[device] = container_id
                    else:
                        agent.zero_slot.append(container_id)
                    task.resources.append(_Resources(container_id, agent.id, devices))
                placed.append(task.task_id)
            return placed

    def _fit(self, task: _Task) -> list[tuple[_Agent, list[int]]] | None:
        agents = sorted(
            (a for a in self._state.agents.values() if a.pool == task.pool and a.schedulable()),
            key=lambda a: a.id,
        )
        if task.slots == 0:
            for agent in agents:
                if len(agent.zero_slot) < MAX_AUX_CONTAINERS_PER_AGENT:
                    return [(agent, [])]
            return None
        fits = [a for a in agents if len(a.free_devices()) >= task.slots]
        if fits:  # best fit: the fewest free slots left over
            best = min(fits, key=lambda a: len(a.free_devices()))
            return [(best, best.free_devices()[: task.slots])]
        if any(a.slots >= task.slots for a in self._state.agents.values() if a.pool == task.pool):
            return None  # it fits on one agent, just not now
        idle = [a for a in agents if a.slots and a.used() == 0]
        for size in sorted({a.slots for a in idle}, reverse=True):
            same = [a for a in idle if a.slots == size]
            if task.slots % size == 0 and len(same) >= task.slots // size:
                return [(a, list(range(size))) for a in same[: task.slots // size]]
        return None

    def finish(self, task_id: str) -> None:
        """The task ends (its task id or allocation id); it leaves every list."""
        with self._lock:
            self._end(self._task(task_id), "FINISHED")

    def task_state(self, task_id: str) -> str:
        """QUEUED, RUNNING, FINISHED or KILLED (by a disable without drain)."""
        with self._lock:
            if task_id in self._state.ended:
                return self._state.ended[task_id]
            return "RUNNING" if self._task(task_id).placed else "QUEUED"

    def placement(self, task_id: str) -> dict[str, list[int]]:
        """Agent id -> device ids the task runs on ([] for a zero-slot task)."""
        with self._lock:
            return {r.agent_id: list(r.devices) for r in self._task(task_id).resources}

    def _task(self, task_id: str) -> _Task:
        tasks = self._state.tasks
        found = tasks.get(task_id) or next(
            (t for t in tasks.values() if t.allocation_id == task_id), None
        )
        if found is None:
            raise KeyError(f"no task {task_id!r}")
        return found

    def _end(self, task: _Task, how: str) -> None:
        for res in task.resources:
            agent = self._state.agents.get(res.agent_id)
            if agent is None:
                continue
            agent.owners = [None if o == res.container_id else o for o in agent.owners]
            if res.container_id in agent.zero_slot:
                agent.zero_slot.remove(res.container_id)
        del self._state.tasks[task.task_id]
        self._state.ended[task.task_id] = how

    def _kill_tasks_on(self, agent: _Agent) -> None:
        for task in list(self._state.tasks.values()):
            if any(r.agent_id == agent.id for r in task.resources):
                self._end(task, "KILLED")

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

    def registrations(self) -> list[AgentRegistration]:
        """Every POST /agents the master accepted, in order (a returning agent again)."""
        with self._lock:
            return list(self._state.registrations)

    def heartbeats(self, agent_id: str) -> int:
        """How many heartbeats the agent sent since it first registered."""
        with self._lock:
            return self._state.heartbeats.get(agent_id, 0)

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
                _HTTP_TO_CODE[failure],
                "internal server error" if failure == 500 else "service unavailable",
            )
            return self._error(error)
        try:
            return self._route(request)
        except ApiError as error:
            return self._error(error)

    def _take_failure(self, path: str) -> int | None:
        for index, (status, prefix) in enumerate(self._state.fail):
            if prefix is None or path.startswith(prefix):
                del self._state.fail[index]
                return status
        return None

    @staticmethod
    def _error(error: ApiError) -> Response:
        return Response(
            json.dumps(error.body()) + "\n",
            status=error.http_status,
            content_type="application/json",
        )

    @staticmethod
    def _json(body: JsonObject) -> Response:
        return Response(json.dumps(body), status=200, content_type="application/json")

    def _route(self, request: Request) -> Response:
        path = request.path
        if path == "/info":
            if request.method != "GET":
                return Response("Method Not Allowed", status=405)
            return self._json(self._info())
        if path == "/agents" or path.startswith("/agents/"):
            return self._agent_connection(request)
        if not path.startswith("/api/v1/"):
            return Response('{"message":"Not Found"}\n', 404, content_type="application/json")
        allowed: list[str] = []
        if path in self._state.unserved:
            raise ApiError(12, "Not Implemented")
        for method, pattern, handler, needs_auth in _ROUTES:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if method != request.method:
                allowed.append(method)
                continue
            with self._lock:
                user = self._authenticate(request) if needs_auth else None
                return handler(self, request, user, **match.groupdict())
        if allowed:
            raise ApiError(12, "Method Not Allowed")
        raise ApiError(12, "Not Implemented")

    def _authenticate(self, request: Request) -> _User:
        header = request.headers.get("Authorization", "")
        if not header:
            cookie = request.cookies.get("auth")
            if not cookie:
                raise ApiError(16, "token missing")
            header = f"Bearer {cookie}"
        if not header.startswith("Bearer "):
            raise ApiError(16, _INVALID_CREDENTIALS)
        info = self._state.tokens.get(header.removeprefix("Bearer "))
        if info is None or (info.expires is not None and info.expires <= self._state.now):
            raise ApiError(16, _INVALID_CREDENTIALS)
        user = self._user_by_id(info.user_id)
        if user is None:
            raise ApiError(16, _INVALID_CREDENTIALS)
        if not user.active:
            raise ApiError(7, "user does not have permission")
        return user

    def _info(self) -> JsonObject:
        return {
            "version": VERSION,
            "master_id": _MASTER_ID,
            "cluster_id": _CLUSTER_ID,
            "cluster_name": self._cluster_name,
            "telemetry": {"enabled": False, "otel_enabled": False, "otel_endpoint": ""},
            "sso_providers": None,
        }

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
        if slot_type not in _SLOT_TYPES:
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

    # -- auth endpoints -------------------------------------------------------------

    def _login(self, request: Request, _: _User | None) -> Response:
        body = _body(request)
        username = _field(body, "username", str, "")
        password = _field(body, "password", str, "")
        hashed = _field(body, "isHashed", bool, False)
        if not username:
            raise ApiError(3, "missing argument: username")
        user = self._state.users.get(username)
        if user is None:
            raise ApiError(16, _INVALID_CREDENTIALS)
        if (password if hashed else salt_and_hash(password)) != user.password_hash:
            raise ApiError(16, _INVALID_CREDENTIALS)
        if not user.active:
            raise ApiError(7, "user is not active")
        token = self._start_session(user)
        response = self._json({"token": token, "user": user.to_json()})
        response.set_cookie("auth", token, path="/")
        return response

    def _me(self, _: Request, user: _User | None) -> Response:
        assert user is not None
        return self._json({"user": user.to_json()})

    def _logout(self, request: Request, user: _User | None) -> Response:
        header = request.headers.get("Authorization", "") or f"Bearer {request.cookies['auth']}"
        token = header.removeprefix("Bearer ")
        if not self._state.tokens[token].access:  # logging out keeps access tokens
            del self._state.tokens[token]
        response = self._json({})
        response.set_cookie("auth", "", expires=0)
        return response

    def _post_token(self, request: Request, user: _User | None) -> Response:
        assert user is not None
        body = _body(request)
        target = self._user_by_id(_field(body, "userId", int, 0))
        lifespan_text = _field(body, "lifespan", str, None)
        description = _field(body, "description", str, "")
        if target is None:
            raise _not_found("user", str(_field(body, "userId", int, 0)))
        if not user.admin:
            raise ApiError(7, "only admin privileged users can create token for own/other users")
        lifespan = DEFAULT_TOKEN_LIFESPAN
        if lifespan_text == "-1":
            lifespan = MAX_TOKEN_LIFESPAN
        elif lifespan_text is not None:
            try:
                lifespan = _go_duration(lifespan_text)
            except ValueError as exc:
                raise ApiError(3, f"failed to parse lifespan {lifespan_text}: {exc}") from None
            if lifespan < timedelta(0):
                raise ApiError(
                    3, "lifespan must be a Go-formatted duration string with a positive value"
                )
        if lifespan > MAX_TOKEN_LIFESPAN:
            raise ApiError(3, "token Lifespan must be less than max token lifespan")
        del description  # kept by the real master for GET /api/v1/tokens, not modelled
        token = self._new_token("access")
        self._state.tokens[token] = _Token(
            user_id=target.id, access=True, expires=self._tick() + lifespan
        )
        token_id = len(self._state.token_ids) + 1
        self._state.token_ids[token] = token_id
        return self._json({"token": token, "tokenId": token_id})

    # -- agents ---------------------------------------------------------------------

    def _get_agents(self, request: Request, _: _User | None) -> Response:
        params = _Params(request)
        offset, limit = params.int32("offset"), params.int32("limit")
        exclude_slots = params.bool("excludeSlots")
        exclude_containers = params.bool("excludeContainers")
        order_by = params.enum("orderBy", _ORDER_BY)
        sort_by = params.enum("sortBy", _AGENT_SORT_BY)
        agents = list(self._state.agents.values())
        agents.sort(key=lambda a: a.id)
        if sort_by == "SORT_BY_TIME":
            agents.sort(key=lambda a: a.registered)
        if order_by == "ORDER_BY_DESC":
            agents.reverse()
        page, pagination = _paginate(agents, offset, limit)
        page = self._maybe_half(page)
        return self._json(
            {
                "agents": [self._agent_json(a, exclude_slots, exclude_containers) for a in page],
                "pagination": pagination,
            }
        )

    def _maybe_half(self, page: list[Any]) -> list[Any]:
        if self._state.half_pages <= 0:
            return page
        self._state.half_pages -= 1
        return page[: len(page) // 2]

    def _get_agent(self, _: Request, __: _User | None, agent_id: str) -> Response:
        return self._json({"agent": self._agent_json(self._api_agent(agent_id))})

    def _get_slots(self, _: Request, __: _User | None, agent_id: str) -> Response:
        agent = self._api_agent(agent_id)
        slots = sorted(
            (self._slot_json(agent, d) for d in range(agent.slots)), key=lambda s: str(s["id"])
        )
        return self._json({"slots": slots})

    def _enable_agent(self, _: Request, user: _User | None, agent_id: str) -> Response:
        self._require_admin(user)
        agent = self._api_agent(agent_id)
        if agent.reconnecting:
            raise ApiError(13, _RECOVERING)
        agent.enabled, agent.draining = True, False
        return self._json({"agent": self._agent_json(agent)})

    def _disable_agent(self, request: Request, user: _User | None, agent_id: str) -> Response:
        self._require_admin(user)
        drain = _field(_body(request), "drain", bool, False)
        agent = self._api_agent(agent_id)
        if agent.reconnecting:
            raise ApiError(13, _RECOVERING)
        agent.enabled, agent.draining = False, drain
        if not drain:
            self._kill_tasks_on(agent)
        return self._json({"agent": self._agent_json(agent)})

    @staticmethod
    def _require_admin(user: _User | None) -> None:
        if user is None or not user.admin:
            # canUpdateAgents wraps the status error's text in a second status.
            raise ApiError(
                7, "rpc error: code = PermissionDenied desc = user does not have permission"
            )

    def _api_agent(self, agent_id: str) -> _Agent:
        agent = self._state.agents.get(agent_id)
        if agent is None:
            raise _not_found("agent", agent_id)
        return agent

    def _device_json(self, agent: _Agent, device: int) -> JsonObject:
        digest = hashlib.sha256(f"{agent.id}/{device}".encode()).digest()
        return {
            "id": device,
            "brand": agent.brand,
            "uuid": f"GPU-{uuid.UUID(bytes=digest[:16])}",
            "type": _DEVICE_TYPES[agent.slot_type],
        }

    def _container_json(self, agent: _Agent, container_id: str) -> JsonObject:
        devices = [d for d, owner in enumerate(agent.owners) if owner == container_id]
        return {
            "parent": "",
            "id": container_id,
            "state": "STATE_RUNNING",
            "devices": [self._device_json(agent, d) for d in devices],
            "permissionDenied": False,
        }

    def _slot_json(self, agent: _Agent, device: int) -> JsonObject:
        owner = agent.owners[device]
        return {
            "id": str(device),
            "device": self._device_json(agent, device),
            "enabled": agent.enabled,
            "container": None if owner is None else self._container_json(agent, owner),
            "draining": agent.draining,
        }

    def _agent_json(
        self, agent: _Agent, exclude_slots: bool = False, exclude_containers: bool = False
    ) -> JsonObject:
        slots = {
            f"/agents/{agent.id}/slots/{d}": self._slot_json(agent, d) for d in range(agent.slots)
        }
        containers = {
            owner: self._container_json(agent, owner) for owner in agent.owners if owner is not None
        }
        return {
            "id": agent.id,
            "registeredTime": timestamp(agent.registered),
            "slots": {} if exclude_slots else dict(sorted(slots.items())),
            "containers": {} if exclude_containers else dict(sorted(containers.items())),
            "addresses": [agent.address],
            "enabled": agent.enabled,
            "draining": agent.draining,
            "version": VERSION,
            "resourcePools": [agent.pool],
            "slotStats": _slot_stats(list(slots.values())),
        }

    # -- resource pools -------------------------------------------------------------

    def _get_resource_pools(self, request: Request, _: _User | None) -> Response:
        params = _Params(request)
        offset, limit = params.int32("offset"), params.int32("limit")
        pools = sorted(self._state.pools.values(), key=lambda p: p.name)
        page, pagination = _paginate(pools, offset, limit)
        page = self._maybe_half(page)
        return self._json(
            {"resourcePools": [self._pool_json(p) for p in page], "pagination": pagination}
        )

    def _pool_json(self, pool: _Pool) -> JsonObject:
        agents = [a for a in self._state.agents.values() if a.pool == pool.name]
        available = used = aux_capacity = aux_running = 0
        for agent in agents:
            used += agent.used()
            aux_running += len(agent.zero_slot)
            if agent.draining:
                available += agent.used()
                aux_capacity += len(agent.zero_slot)
            elif agent.enabled:
                available += agent.slots
                aux_capacity += MAX_AUX_CONTAINERS_PER_AGENT
        cloud = pool.type != "STATIC"
        device_types = {a.slot_type for a in agents if a.slots and (a.enabled or a.draining)}
        if cloud:
            slot_type = "TYPE_CUDA" if pool.slots_per_agent > 0 else "TYPE_CPU"
        elif device_types:
            slot_type = "TYPE_CUDA" if "cuda" in device_types else "TYPE_CPU"
        else:
            slot_type = "TYPE_UNSPECIFIED"
        queued = scheduled = 0
        for task in self._visible_tasks(pool.name):
            if task.placed:
                scheduled += 1
            else:
                queued += 1
        return {
            "name": pool.name,
            "description": pool.description,
            "type": f"RESOURCE_POOL_TYPE_{pool.type}",
            "numAgents": len(agents),
            "slotsAvailable": available,
            "slotsUsed": used,
            "slotType": slot_type,
            "auxContainerCapacity": aux_capacity,
            "auxContainersRunning": aux_running,
            "defaultComputePool": pool.name == self._state.default_compute_pool,
            "defaultAuxPool": pool.name == self._state.default_aux_pool,
            "preemptible": pool.preemptible,
            "minAgents": pool.min_agents,
            "maxAgents": pool.max_agents,
            "slotsPerAgent": pool.slots_per_agent,
            "auxContainerCapacityPerAgent": MAX_AUX_CONTAINERS_PER_AGENT,
            "schedulerType": "SCHEDULER_TYPE_PRIORITY",
            "schedulerFittingPolicy": "FITTING_POLICY_BEST",
            "location": pool.location,
            "imageId": "",
            "instanceType": pool.instance_type,
            "masterUrl": "",
            "masterCertName": "",
            "startupScript": "",
            "containerStartupScript": "",
            "agentDockerNetwork": "",
            "agentDockerRuntime": "",
            "agentDockerImage": "",
            "agentFluentImage": "",
            "maxIdleAgentPeriod": 300 if cloud else 0,
            "maxAgentStartingPeriod": 300 if cloud else 0,
            "details": {
                "aws": _aws_detail(pool) if pool.type == "AWS" else None,
                "gcp": _gcp_detail(pool) if pool.type == "GCP" else None,
                "priorityScheduler": {
                    "preemption": False,
                    "defaultPriority": DEFAULT_PRIORITY,
                    "k8Priorities": [],
                },
            },
            "accelerator": "",
            "stats": {"queuedCount": queued, "scheduledCount": scheduled},
            "resourceManagerMetadata": {},
            "clusterName": self._cluster_name,
        }

    # -- tasks and jobs -------------------------------------------------------------

    def _get_tasks(self, _: Request, __: _User | None) -> Response:
        summaries = {t.allocation_id: self._allocation_json(t) for t in self._state.tasks.values()}
        return self._json({"allocationIdToSummary": dict(sorted(summaries.items()))})

    def _allocation_json(self, task: _Task) -> JsonObject:
        resources = []
        for res in task.resources:
            agent = self._state.agents[res.agent_id]
            resources.append(
                {
                    "resourcesId": res.container_id,
                    "resourcesType": "docker-container",
                    "allocationId": task.allocation_id,
                    "agentDevices": {
                        res.agent_id: {
                            "devices": [self._device_json(agent, d) for d in res.devices]
                        }
                    },
                    "containerId": res.container_id,
                    "started": {
                        "addresses": [],
                        "nativeResourcesId": hashlib.sha256(res.container_id.encode()).hexdigest(),
                    },
                }
            )
        out: JsonObject = {
            "taskId": task.task_id,
            "allocationId": task.allocation_id,
            "name": task.name,
            "registeredTime": timestamp(task.submitted),
            "resourcePool": task.pool,
            "slotsNeeded": task.slots,
            "resources": resources,
            "schedulerType": "priority",
        }
        if task.job_id is not None:  # proto3 optional: only tasks of a job have one
            out["priority"] = task.priority
        out["proxyPorts"] = []
        return out

    def _visible_tasks(self, pool: str) -> list[_Task]:
        """A pool's user-visible tasks in queue order (priority, then submission)."""
        tasks = [t for t in self._state.tasks.values() if t.pool == pool and t.job_id]
        return sorted(tasks, key=lambda t: (t.priority, t.seq))

    def _jobs(self, request: Request) -> tuple[list[JsonObject], JsonObject]:
        params = _Params(request)
        offset, limit = params.int32("offset"), params.int32("limit")
        pool = params.string("resourcePool") or self._state.default_compute_pool
        order_by = params.enum("orderBy", _ORDER_BY)
        states = params.enums("states", _JOB_STATES)
        if pool not in self._state.pools:
            raise ApiError(13, f"cannot find resource pool {pool}")
        jobs = [self._job_json(t, ahead) for ahead, t in enumerate(self._visible_tasks(pool))]
        if states:
            jobs = [j for j in jobs if j["summary"]["state"] in states]
        jobs.sort(key=lambda j: (j["summary"]["jobsAhead"], j["jobId"]))
        if order_by == "ORDER_BY_DESC":
            jobs.reverse()
        page, pagination = _paginate(jobs, offset, limit or DEFAULT_JOBS_LIMIT)
        return self._maybe_half(page), pagination

    def _get_jobs(self, request: Request, _: _User | None) -> Response:
        page, pagination = self._jobs(request)
        return self._json({"pagination": pagination, "jobs": page})

    def _get_jobs_v2(self, request: Request, _: _User | None) -> Response:
        page, pagination = self._jobs(request)
        return self._json({"pagination": pagination, "jobs": [{"full": j} for j in page]})

    def _job_json(self, task: _Task, jobs_ahead: int) -> JsonObject:
        return {
            "summary": {
                "state": "STATE_SCHEDULED" if task.placed else "STATE_QUEUED",
                "jobsAhead": jobs_ahead,
            },
            "type": _JOB_TYPES[task.type],
            "submissionTime": timestamp(task.submitted),
            "username": task.username,
            "userId": task.user_id,
            "resourcePool": task.pool,
            "isPreemptible": task.type == "TRIAL",
            "priority": task.priority,
            "weight": 1,
            "entityId": task.entity_id,
            "jobId": task.job_id,
            "requestedSlots": task.slots,
            "allocatedSlots": task.slots if task.placed else 0,
            "name": task.name,
            "progress": 0,
            "workspaceId": 1,
        }


def _slot_stats(slots: list[JsonObject]) -> JsonObject:
    """model.SummarizeSlots: per device type and per brand."""
    by_type: dict[str, JsonObject] = {}
    by_brand: dict[str, JsonObject] = {}
    for slot in slots:
        device = slot["device"]
        for stats, key in ((by_type, device["type"]), (by_brand, device["brand"])):
            entry = stats.setdefault(key, {"states": {}, "draining": 0, "disabled": 0, "total": 0})
            entry["total"] += 1
            if not slot["enabled"]:
                entry["disabled"] += 1
            if slot["draining"]:
                entry["draining"] += 1
            if slot["container"] is not None:
                state = slot["container"]["state"]
                entry["states"][state] = entry["states"].get(state, 0) + 1
    return {
        "typeStats": dict(sorted(by_type.items())),
        "brandStats": dict(sorted(by_brand.items())),
    }


def _aws_detail(pool: _Pool) -> JsonObject:
    return {
        "region": pool.location,
        "rootVolumeSize": 200,
        "imageId": "",
        "tagKey": "managed-by",
        "tagValue": "determined",
        "instanceName": "determined-ai-agent",
        "sshKeyName": "",
        "publicIp": False,
        "subnetId": "",
        "securityGroupId": "",
        "iamInstanceProfileArn": "",
        "instanceType": pool.instance_type,
        "logGroup": "",
        "logStream": "",
        "spotEnabled": pool.preemptible,
        "spotMaxPrice": "",
        "customTags": [],
    }


def _gcp_detail(pool: _Pool) -> JsonObject:
    return {
        "project": "local-project",
        "zone": pool.location,
        "bootDiskSize": 200,
        "bootDiskSourceImage": "",
        "labelKey": "managed-by",
        "labelValue": "determined",
        "namePrefix": "det-",
        "network": "projects/local-project/global/networks/default",
        "subnetwork": "",
        "externalIp": False,
        "networkTags": [],
        "serviceAccountEmail": "default",
        "serviceAccountScopes": ["https://www.googleapis.com/auth/cloud-platform"],
        "machineType": pool.instance_type,
        "gpuType": "nvidia-tesla-a100" if pool.slots_per_agent > 0 else "",
        "gpuNum": max(pool.slots_per_agent, 0),
        "preemptible": pool.preemptible,
        "operationTimeoutPeriod": 300,
    }


_Handler = Callable[..., Response]
_AGENT: Final = r"/api/v1/agents/(?P<agent_id>[^/]+)"
# (HTTP method, path, handler, needs a bearer token), from api.proto's http options.
_ROUTE_TABLE: Final[list[tuple[str, str, _Handler, bool]]] = [
    ("POST", r"/api/v1/auth/login", LocalDetermined._login, False),
    ("POST", r"/api/v1/auth/logout", LocalDetermined._logout, True),
    ("GET", r"/api/v1/auth/user", LocalDetermined._me, True),
    ("GET", r"/api/v1/me", LocalDetermined._me, True),
    ("POST", r"/api/v1/tokens", LocalDetermined._post_token, True),
    ("GET", r"/api/v1/agents", LocalDetermined._get_agents, True),
    ("GET", _AGENT, LocalDetermined._get_agent, True),
    ("GET", _AGENT + "/slots", LocalDetermined._get_slots, True),
    ("POST", _AGENT + "/enable", LocalDetermined._enable_agent, True),
    ("POST", _AGENT + "/disable", LocalDetermined._disable_agent, True),
    ("GET", r"/api/v1/resource-pools", LocalDetermined._get_resource_pools, True),
    ("GET", r"/api/v1/tasks", LocalDetermined._get_tasks, True),
    ("GET", r"/api/v1/job-queues", LocalDetermined._get_jobs, True),
    ("GET", r"/api/v1/job-queues-v2", LocalDetermined._get_jobs_v2, True),
]
_HEARTBEAT: Final = re.compile(r"/agents/([^/]+)/heartbeat")
_ROUTES: Final = [
    (method, re.compile(path), handler, auth) for method, path, handler, auth in _ROUTE_TABLE
]
