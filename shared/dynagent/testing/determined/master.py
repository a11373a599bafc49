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
  queues one trial of ``slots_per_trial`` (a searcher's later trials are not modelled);
  a paused one queues none.

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

import yaml
from werkzeug.wrappers import Request, Response

from dynagent.testing.determined.admission import (
    WORKSPACE_ID,
    PoolState,
    Refusal,
    listing_failure,
    resolve_resources,
    tasks_to_prune,
)
from dynagent.testing.determined.master_config import (
    DEFAULT_POOL,
    DEFAULT_PRIORITY,
    MAX_AUX_CONTAINERS_PER_AGENT,
    VERSION,
    MasterConfig,
    ProviderConfig,
    default_resource_manager,
    fitting_policy,
    parse_go_duration,
    pool_fields,
    printable_config,
    provider_for_pool,
    read_master_config,
)
from dynagent.testing.loopback import LOOPBACK, CallLog, LoopbackServer, Service

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

    from dynagent.testing.determined.tls import Certificate

# determined.common.api.authentication.PASSWORD_SALT: the client hashes before sending.
PASSWORD_SALT: Final = "GubPEmmotfiK9TMD6Zdw"
# Complex enough that Determined's CLI does not warn about it on every run.
DEFAULT_PASSWORD: Final = "L0cal-Determined"
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
# What goes through admission: a command, notebook, shell, TensorBoard or an experiment's trial.
LaunchType = Literal["TRIAL", "COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD"]
_LAUNCH_TYPES: Final = frozenset(get_args(LaunchType))
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
    provider: ProviderConfig | None = None  # None for a static pool
    max_aux_containers_per_agent: int = MAX_AUX_CONTAINERS_PER_AGENT
    config_fields: JsonObject = field(default_factory=dict)  # as GET master/config prints it
    fitting_policy: str = "best"  # its scheduler's, else the resource manager's
    # provisioner_launch_error(): the provisioner's launch error, the instances it lists
    launch_error: str | None = None
    listed_instances: int = 0


@dataclass
class _Experiment:
    id: int
    name: str
    config: JsonObject
    original_config: str
    job_id: str
    pool: str
    user: _User
    started: datetime
    active: bool
    trial_ids: list[int] = field(default_factory=list)
    task_ids: list[str] = field(default_factory=list)


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
    job_name: str | None = None  # the job's name when not the allocation's (an experiment's)

    @property
    def placed(self) -> bool:
        return bool(self.resources)


class SubmittedTask(NamedTuple):
    """What submit() made: the task, its allocation and its job (None for checkpoint GC)."""

    task_id: str
    allocation_id: str
    job_id: str | None


class LaunchedTask(NamedTuple):
    """What launch() queued: the task, its allocation, its job, and the launch warnings
    (``LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED`` when admitted with ``launch_error: false``)."""

    task_id: str
    allocation_id: str
    job_id: str | None
    warnings: tuple[str, ...]


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
        self.ended: dict[str, str] = {}  # task id -> FINISHED, KILLED or ERROR
        self.errors: dict[str, str] = {}  # task id -> why its allocation failed
        self.launch_error = True  # master.yaml's launch_error
        self.cluster_name = ""
        self.config: MasterConfig | None = None
        self.records: dict[int, _Experiment] = {}  # experiments made through the API
        self.trials = itertools.count(1)
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


def _go_duration(text: str) -> timedelta:
    """A Go duration string (``720h``, ``1h30m``) as time.ParseDuration reads it."""
    return timedelta(microseconds=parse_go_duration(text) / 1000)


# --------------------------------------------------------------------------------------
# The master
# --------------------------------------------------------------------------------------


class LocalDetermined(Service):
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
        self._cluster_name = cluster_name
        self._initial_config = read_master_config(master_config)
        # HTTPS with a certificate made here, as a master with security.tls serves.
        self.certificate: Certificate | None = None
        if tls:  # cryptography is imported only for a TLS master
            from dynagent.testing.determined.tls import self_signed

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
        """Back to the constructor's master config (its pools, empty), the initial users;
        knobs off."""
        self._restart(self._initial_config, keep_users=False)

    def configure(self, master_config: str | Mapping[str, Any] | None) -> None:
        """The master restarts with this master.yaml (text or mapping): its pools, empty,
        no agents, tasks or knobs; users and their logins kept, as the master's database
        keeps them. MasterConfigError, with the master's message, for a config the master
        refuses; the running master is then left as it was. reset() goes back to the
        constructor's config."""
        self._restart(read_master_config(master_config), keep_users=True)

    def _restart(self, config: MasterConfig, *, keep_users: bool) -> None:
        with self._lock:
            old = self._state
            self._state = _State()
            if keep_users:
                self._state.now, self._state.counter = old.now, old.counter
                self._state.users, self._state.tokens = old.users, old.tokens
                self._state.token_ids = old.token_ids
            self._state.config = config
            self._state.launch_error = config.launch_error
            self._state.cluster_name = config.cluster_name
            for pool in config.pools:
                self._add_configured_pool(pool.name, pool.description, pool.provider)
                added = self._state.pools[pool.name]
                added.max_aux_containers_per_agent = pool.max_aux_containers_per_agent
                added.config_fields = dict(pool.fields)
                added.fitting_policy = fitting_policy(config, pool)
            self._state.default_compute_pool = config.default_compute_pool
            self._state.default_aux_pool = config.default_aux_pool
            if keep_users:
                return
            for index, (name, password) in enumerate(self._initial_users.items()):
                self.add_user(name, password, admin=(name == "admin" or index == 0))

    @property
    def master_config(self) -> MasterConfig | None:
        """The config the master runs with (None until the first reset)."""
        with self._lock:
            return self._state.config

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
        max_agents: int | None = None,
        description: str = "",
        default_compute: bool = False,
        default_aux: bool = False,
    ) -> None:
        """A resource pool, as if master.yaml listed it. A static pool's slotsPerAgent is
        -1; a cloud pool needs it, and gets a provider with it as its slots per instance
        and ``max_agents`` (default 5, Determined's) as its ``max_instances``, the rest
        Determined's defaults, for admission (not validated: a shorthand for tests)."""
        if type not in ("STATIC", "AWS", "GCP"):
            raise ValueError(f"pool type {type!r}: STATIC, AWS or GCP")
        provider = None
        if type == "STATIC":
            if slots_per_agent is not None:
                raise ValueError("a static pool has no slots per agent (the API says -1)")
            if max_agents:
                raise ValueError("a static pool has no max_agents (it has no provider)")
        else:
            if slots_per_agent is None or slots_per_agent < 0:
                raise ValueError(f"a {type} pool needs slots_per_agent >= 0")
            default_location = {"AWS": "us-west-2", "GCP": "us-central1-a"}
            provider = provider_for_pool(
                "aws" if type == "AWS" else "gcp",
                slots_per_instance=slots_per_agent,
                location=location or default_location[type],
                instance_type=instance_type,
                preemptible=preemptible,
                min_instances=min_agents,
                max_instances=5 if max_agents is None else max_agents,
            )
        with self._lock:
            self._add_configured_pool(name, description, provider)
            if default_compute:
                self._state.default_compute_pool = name
            if default_aux:
                self._state.default_aux_pool = name

    def _add_configured_pool(
        self, name: str, description: str, provider: ProviderConfig | None
    ) -> None:
        if name in self._state.pools:
            raise ValueError(f"pool {name!r} exists")
        pool_type: PoolType = "STATIC"
        if provider is not None:
            pool_type = "AWS" if provider.type == "aws" else "GCP"
        self._state.pools[name] = _Pool(
            name=name,
            type=pool_type,
            slots_per_agent=-1 if provider is None else provider.slots_per_instance,
            location="on-prem" if provider is None else provider.location,
            instance_type="" if provider is None else provider.instance_type,
            preemptible=False if provider is None else provider.preemptible,
            min_agents=0 if provider is None else provider.min_instances,
            max_agents=0 if provider is None else provider.max_instances,
            description=description,
            provider=provider,
            config_fields=pool_fields(name, description, provider),
        )
        if self._state.config is not None:  # no scheduler of its own: the manager's
            scheduler = self._state.config.resource_manager["scheduler"]
            self._state.pools[name].fitting_policy = scheduler["fitting_policy"]

    def provisioner_launch_error(
        self, pool: str, message: str | None, *, listed_instances: int = 0
    ) -> None:
        """The pool's provisioner failed to launch (``message``, e.g. an EC2 error) and its
        provider lists ``listed_instances`` instances; None clears the error. From the next
        schedule() on, pending tasks in the pool that want more slots than those instances
        hold fail, as Determined's ``pruneTaskList`` fails them (task_state() ERROR).
        ValueError for a pool with no provider (no provisioner) or one whose provider
        cannot list: Determined's ``Provision`` returns before it ever launches there."""
        if listed_instances < 0:
            raise ValueError("listed_instances must be >= 0")
        with self._lock:
            if pool not in self._state.pools:
                raise ValueError(f"no pool {pool!r}")
            target = self._state.pools[pool]
            if target.provider is None:
                raise ValueError(
                    f"pool {pool!r} has no provider, so Determined runs no provisioner for it "
                    "and it can have no launch error"
                )
            failure = listing_failure(target.provider)
            if failure is not None and message is not None:
                raise ValueError(
                    f"pool {pool!r}: its provider cannot list instances ({failure}); "
                    "Determined's provisioner returns before launching, so it never has a "
                    "launch error"
                )
            target.launch_error, target.listed_instances = message, listed_instances

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
        """Queue a task the master has already admitted (not placed until schedule()): no
        admission here, so a test can set up any queue; launch() and the API's launch
        endpoints admit first. The pool defaults to the default compute pool (the aux
        pool for a zero-slot task)."""
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
            task = self._queue(name, slots, pool, type, priority, owner)
            return SubmittedTask(task.task_id, task.allocation_id, task.job_id)

    def _queue(
        self,
        name: str,
        slots: int,
        pool: str,
        type: str,
        priority: int,
        owner: _User,
        *,
        experiment_id: int | None = None,
        job_id: str | None = None,
    ) -> _Task:
        state = self._state
        seq = next(state.counter)
        if type == "TRIAL":
            experiment = next(state.experiments) if experiment_id is None else experiment_id
            task_id = f"{experiment}.{self._uuid('trial')}"
            entity_id = str(experiment)
        else:
            task_id = self._uuid("task")
            entity_id = task_id
        if job_id is None and type in _JOB_TYPES:
            job_id = self._uuid("job")
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
        return task

    def launch(
        self,
        type: LaunchType,
        slots: int | None = None,
        pool: str | None = None,
        *,
        single_node: bool = False,
        priority: int | None = None,
        user: str | None = None,
    ) -> LaunchedTask:
        """Submit through the master's admission, as the type's endpoint does
        (``POST /api/v1/commands``, ``notebooks``, ``shells``, ``tensorboards``,
        ``experiments``): ApiError with that endpoint's code and message when the master
        refuses; otherwise the task is queued, with the launch warnings the answer would
        carry. ``slots`` defaults as Determined's do (1; a TensorBoard always takes 0); a
        TRIAL is the one trial of a new experiment with ``slots_per_trial: slots``, and
        ``single_node`` is its ``resources.is_single_node`` (the other types are always
        single-node). ``user`` defaults to the first user."""
        if type not in _LAUNCH_TYPES:
            raise ValueError(f"launch type {type!r}: one of {sorted(_LAUNCH_TYPES)}")
        if single_node and type != "TRIAL":
            raise ValueError("single_node is for a TRIAL: other types are always single-node")
        resources: JsonObject = {}
        if slots is not None:
            resources["slots_per_trial" if type == "TRIAL" else "slots"] = slots
        if pool is not None:
            resources["resource_pool"] = pool
        if priority is not None:
            resources["priority"] = priority
        if single_node:
            resources["is_single_node"] = True
        with self._lock:
            owner = self._state.users[user] if user else next(iter(self._state.users.values()))
            if type == "TRIAL":
                config = {"entrypoint": "python3 train.py", "resources": resources}
                experiment, warnings = self._create_experiment(
                    config, yaml.safe_dump(config), owner, activate=True
                )
                task = self._state.tasks[experiment.task_ids[0]]
            else:
                task, warnings = self._launch_task(type, {"resources": resources}, owner)
            return LaunchedTask(task.task_id, task.allocation_id, task.job_id, warnings)

    def schedule(self) -> list[str]:
        """One scheduler tick: first prune the pools whose provisioner has a launch
        error (provisioner_launch_error), then place what fits, in priority then
        submission order; the task ids placed."""
        with self._lock:
            self._prune()
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

    def _prune(self) -> None:
        """resource_pool.go pruneTaskList, for each pool with a launch error."""
        for pool in self._state.pools.values():
            if pool.provider is None or pool.launch_error is None:
                continue
            pending = [
                (t.task_id, t.slots)
                for t in self._state.tasks.values()
                if t.pool == pool.name and not t.placed
            ]
            for task_id in tasks_to_prune(pending, pool.provider, pool.listed_instances):
                # sproto.InvalidResourcesRequestError, which fails the allocation
                self._state.errors[task_id] = f"invalid resources request: {pool.launch_error}"
                self._end(self._state.tasks[task_id], "ERROR")

    def _fit(self, task: _Task) -> list[tuple[_Agent, list[int]]] | None:
        agents = sorted(
            (a for a in self._state.agents.values() if a.pool == task.pool and a.schedulable()),
            key=lambda a: a.id,
        )
        if task.slots == 0:
            for agent in agents:
                limit = self._state.pools[task.pool].max_aux_containers_per_agent
                if len(agent.zero_slot) < limit:
                    return [(agent, [])]
            return None
        fits = [a for a in agents if len(a.free_devices()) >= task.slots]
        if fits:
            chosen = self._shared_fit(fits, self._state.pools[task.pool].fitting_policy)
            return [(chosen, chosen.free_devices()[: task.slots])]
        if any(a.slots >= task.slots for a in self._state.agents.values() if a.pool == task.pool):
            return None  # it fits on one agent, just not now
        idle = [a for a in agents if a.slots and a.used() == 0]
        for size in sorted({a.slots for a in idle}, reverse=True):
            same = [a for a in idle if a.slots == size]
            if task.slots % size == 0 and len(same) >= task.slots // size:
                return [(a, list(range(size))) for a in same[: task.slots // size]]
        return None

    @staticmethod
    def _shared_fit(fits: list[_Agent], policy: str) -> _Agent:
        """``fitting_methods.go``: best fit takes the fewest free slots (``BestFit``,
        1 / (1 + free)), worst fit the largest share free (``WorstFit``, free / slots);
        a tie goes to the lowest id."""
        if policy == "worst":
            return max(fits, key=lambda a: len(a.free_devices()) / a.slots)
        return min(fits, key=lambda a: len(a.free_devices()))

    def finish(self, task_id: str) -> None:
        """The task ends (its task id or allocation id); it leaves every list."""
        with self._lock:
            self._end(self._task(task_id), "FINISHED")

    def task_state(self, task_id: str) -> str:
        """QUEUED, RUNNING, FINISHED, KILLED (by a disable without drain) or ERROR (pruned
        after a launch error: task_error() says why)."""
        with self._lock:
            if task_id in self._state.ended:
                return self._state.ended[task_id]
            return "RUNNING" if self._task(task_id).placed else "QUEUED"

    def task_error(self, task_id: str) -> str | None:
        """Why the task's allocation failed (a task in ERROR), else None."""
        with self._lock:
            return self._state.errors.get(task_id)

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
            "cluster_name": self._cluster_name_now(),
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
                aux_capacity += pool.max_aux_containers_per_agent
        provider = pool.provider
        device_types = {a.slot_type for a in agents if a.slots and (a.enabled or a.draining)}
        if provider is not None:
            slot_type = provider.slot_type
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
            "auxContainerCapacityPerAgent": pool.max_aux_containers_per_agent,
            "schedulerType": "SCHEDULER_TYPE_PRIORITY",
            "schedulerFittingPolicy": f"FITTING_POLICY_{pool.fitting_policy.upper()}",
            "location": pool.location,
            "instanceType": pool.instance_type,
            **_provider_summary(provider),
            "details": {
                "aws": _aws_detail(provider) if provider and provider.type == "aws" else None,
                "gcp": _gcp_detail(provider) if provider and provider.type == "gcp" else None,
                "priorityScheduler": {
                    "preemption": False,
                    "defaultPriority": DEFAULT_PRIORITY,
                    "k8Priorities": [],
                },
            },
            "accelerator": provider.accelerator if provider else "",
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
            "name": task.job_name or task.name,
            "progress": 0,
            "workspaceId": 1,
        }

    # -- the master's config --------------------------------------------------------

    def _get_master_config(self, _: Request, user: _User | None) -> Response:
        # cluster/authz_basic_impl.go CanGetMasterConfig: admins only, the bare status.
        if user is None or not user.admin:
            raise ApiError(7, "user does not have permission")
        return self._json({"config": self._printable_config()})

    def _printable_config(self) -> JsonObject:
        state = self._state
        config = state.config
        manager = dict(config.resource_manager) if config else default_resource_manager()
        manager["default_compute_resource_pool"] = state.default_compute_pool
        manager["default_aux_resource_pool"] = state.default_aux_pool
        return printable_config(
            state.launch_error,
            self._cluster_name_now(),
            manager,
            [p.config_fields for p in state.pools.values()],
        )

    def _cluster_name_now(self) -> str:
        """master.yaml's cluster_name, else the constructor's."""
        return self._state.cluster_name or self._cluster_name

    # -- launching: admission, then a queued task -------------------------------------

    def _pool_states(self) -> dict[str, PoolState]:
        slots: dict[str, list[int]] = {name: [] for name in self._state.pools}
        for agent in self._state.agents.values():
            slots[agent.pool].append(agent.slots)
        return {
            name: PoolState(name, pool.provider, tuple(slots[name]))
            for name, pool in self._state.pools.items()
        }

    def _admit(self, requested: str, slots: int, single_node: bool) -> tuple[str, tuple[str, ...]]:
        """spec_util.go ResolveResources; Refusal as the Go code raises it."""
        state = self._state
        pool, warnings = resolve_resources(
            self._pool_states(),
            requested,
            slots,
            single_node,
            default_compute=state.default_compute_pool,
            default_aux=state.default_aux_pool,
            launch_error=state.launch_error,
        )
        if pool not in state.pools:
            # Only a zero-slot task whose default aux pool names no pool gets here:
            # admission never looks it up, the allocation does (agentrm Allocate).
            raise ApiError(13, f"cannot find resource pool {pool}")
        return pool, warnings

    def _admit_task(
        self, type: str, config: Mapping[str, Any]
    ) -> tuple[str, int, int, tuple[str, ...]]:
        """api_command.go getCommandLaunchParams up to its resources: (pool, slots,
        priority, warnings). Resources as model.ParseJustResources reads them (``slots``
        1 unless given; a TensorBoard's forced to 0), always single-node; a refusal
        wrapped as WrapWithFallbackCode wraps it (its own code, else InvalidArgument)."""
        resources = config.get("resources") or {}
        if not isinstance(resources, Mapping):
            raise ApiError(3, "failed to prepare launch params: resources must be a mapping")
        slots = 0 if type == "TENSORBOARD" else _resource_int(resources, "slots", 1)
        requested = _resource_str(resources, "resource_pool")
        try:
            pool, warnings = self._admit(requested, slots, True)
        except Refusal as refusal:
            raise ApiError(
                refusal.code or 3, f"failed to prepare launch params: {refusal.message}"
            ) from None
        return pool, slots, _resource_int(resources, "priority", DEFAULT_PRIORITY), warnings

    def _launch_task(
        self, type: str, config: Mapping[str, Any], owner: _User
    ) -> tuple[_Task, tuple[str, ...]]:
        """An admitted command, notebook, shell or TensorBoard, queued."""
        pool, slots, priority, warnings = self._admit_task(type, config)
        description = config.get("description") or f"{_LAUNCHED[type][1]} ({self._petname()})"
        return self._queue(str(description), slots, pool, type, priority, owner), warnings

    def _launch_endpoint(self, request: Request, user: _User | None, type: str) -> Response:
        """POST /api/v1/commands|notebooks|shells|tensorboards, as the api_*.go Launch*
        handlers check them, in their order."""
        assert user is not None
        body = _body(request)
        config = _field(body, "config", dict, {})
        workspace_id = _field(body, "workspaceId", int, 0)
        experiment_ids = _field(body, "experimentIds", list, [])
        trial_ids = _field(body, "trialIds", list, [])
        if type == "TENSORBOARD" and not (experiment_ids or trial_ids or body.get("filters")):
            raise ApiError(3, "must set experiment, trial ids, or filters")
        if workspace_id not in (0, WORKSPACE_ID):
            raise _not_found("workspace", str(workspace_id))
        self._admit_task(type, config)
        if type == "NOTEBOOK" and _field(body, "preview", bool, False):
            return self._json({"notebook": _empty_ntsc("NOTEBOOK"), "config": config})
        if type == "TENSORBOARD":
            records = self._state.records.values()
            known = {e.id for e in records} | {t for e in records for t in e.trial_ids}
            if not known & {*experiment_ids, *trial_ids}:
                raise ApiError(3, "no experiments found")
        task, warnings = self._launch_task(type, config, user)
        entity = self._ntsc_json(task, type)
        if type == "TENSORBOARD":
            entity |= {"experimentIds": experiment_ids, "trialIds": trial_ids}
        resources = {**(config.get("resources") or {}), "slots": task.slots}
        resources |= {"resource_pool": task.pool, "priority": task.priority}
        out_config = {**config, "description": task.name, "resources": resources}
        return self._json(
            {_LAUNCHED[type][0]: entity, "config": out_config, "warnings": list(warnings)}
        )

    def _ntsc_json(self, task: _Task, type: str) -> JsonObject:
        """command.go ToV1Command/Notebook/Shell/Tensorboard, for a task not yet placed."""
        out: JsonObject = {
            "id": task.task_id,
            "description": task.name,
            "state": "STATE_RUNNING" if task.placed else "STATE_QUEUED",
            "startTime": timestamp(task.submitted),
            "container": None,
            "displayName": "",
            "userId": task.user_id,
            "username": task.username,
            "resourcePool": task.pool,
            "exitStatus": "",
            "jobId": task.job_id,
            "workspaceId": WORKSPACE_ID,
        }
        if type == "NOTEBOOK":
            out["serviceAddress"] = f"/proxy/{task.task_id}/?token="
        elif type == "TENSORBOARD":
            out["serviceAddress"] = f"/proxy/{task.task_id}/"
        elif type == "SHELL":
            out |= {"privateKey": "", "publicKey": "", "addresses": [], "agentUserGroup": None}
        return out

    def _launch_command(self, request: Request, user: _User | None) -> Response:
        return self._launch_endpoint(request, user, "COMMAND")

    def _launch_notebook(self, request: Request, user: _User | None) -> Response:
        return self._launch_endpoint(request, user, "NOTEBOOK")

    def _launch_shell(self, request: Request, user: _User | None) -> Response:
        return self._launch_endpoint(request, user, "SHELL")

    def _launch_tensorboard(self, request: Request, user: _User | None) -> Response:
        return self._launch_endpoint(request, user, "TENSORBOARD")

    # -- experiments ----------------------------------------------------------------

    def _post_experiment(self, request: Request, user: _User | None) -> Response:
        """POST /api/v1/experiments (CreateExperimentRequest) as api_experiment.go
        CreateExperiment and core_experiment.go parseCreateExperiment check it."""
        assert user is not None
        body = _body(request)
        text = _field(body, "config", str, "")
        activate = _field(body, "activate", bool, False)
        validate_only = _field(body, "validateOnly", bool, False)
        if _field(body, "unmanaged", bool, False):
            raise ApiError(12, "unmanaged experiments are not modelled by LocalDetermined")
        project_id = _field(body, "projectId", int, 0)
        if project_id not in (0, 1):
            raise _not_found("project", str(project_id))
        try:
            config = yaml.safe_load(text) if text.strip() else {}
        except yaml.YAMLError as exc:
            raise ApiError(13, f"invalid experiment configuration: {exc}") from None
        if not isinstance(config, dict):
            raise ApiError(13, "invalid experiment configuration: not a mapping")
        if validate_only:
            self._admit_experiment(config)
            return self._json({"experiment": _empty_experiment(), "config": None, "warnings": []})
        experiment, warnings = self._create_experiment(config, text, user, activate=activate)
        return self._json(
            {
                "experiment": self._experiment_json(experiment),
                "config": experiment.config,
                "warnings": list(warnings),
            }
        )

    def _admit_experiment(self, config: Mapping[str, Any]) -> tuple[str, int, tuple[str, ...]]:
        """parseCreateExperiment up to its resources: (pool, slots per trial, warnings).
        Its errors are plain Go errors (HTTP 500) unless they wrap a status error."""
        resources = config.get("resources") or {}
        if not isinstance(resources, Mapping):
            raise ApiError(13, "invalid experiment configuration: resources must be a mapping")
        if "slots" in resources:
            raise ApiError(13, '<config>.resources: additionalProperties "slots" not allowed')
        slots = _resource_int(resources, "slots_per_trial", 1)
        single_node = resources.get("is_single_node") is True
        try:
            pool, warnings = self._admit(
                _resource_str(resources, "resource_pool"), slots, single_node
            )
        except Refusal as refusal:
            raise ApiError(
                refusal.code or 13, f"invalid resource configuration: {refusal.message}"
            ) from None
        if not config.get("entrypoint"):
            raise ApiError(13, "managed experiments require entrypoint")
        return pool, slots, warnings

    def _create_experiment(
        self, config: JsonObject, text: str, owner: _User, *, activate: bool
    ) -> tuple[_Experiment, tuple[str, ...]]:
        """An admitted experiment; activated, its one trial is queued (a searcher's other
        trials are not modelled: one trial of slots_per_trial is what admission and the
        autoscaler see first)."""
        pool, slots, warnings = self._admit_experiment(config)
        state = self._state
        experiment_id = next(state.experiments)
        resources = config.get("resources") or {}
        priority = _resource_int(resources, "priority", DEFAULT_PRIORITY)
        name = config.get("name") or f"Experiment ({self._petname()})"
        config = {**config, "name": name}
        config["resources"] = {**resources, "resource_pool": pool, "priority": priority}
        experiment = _Experiment(
            id=experiment_id,
            name=str(name),
            config=config,
            original_config=text,
            job_id=self._uuid("job"),
            pool=pool,
            user=owner,
            started=self._tick(),
            active=activate,
        )
        state.records[experiment_id] = experiment
        if activate:
            trial_id = next(state.trials)
            task = self._queue(
                f"Trial {trial_id} (Experiment {experiment_id})",
                slots,
                pool,
                "TRIAL",
                priority,
                owner,
                experiment_id=experiment_id,
                job_id=experiment.job_id,
            )
            task.job_name = experiment.name
            experiment.trial_ids.append(trial_id)
            experiment.task_ids.append(task.task_id)
        return experiment, warnings

    def _experiment_json(self, experiment: _Experiment) -> JsonObject:
        searcher = experiment.config.get("searcher") or {}
        return {
            **_empty_experiment(),
            "id": experiment.id,
            "description": str(experiment.config.get("description") or ""),
            "labels": list(experiment.config.get("labels") or []),
            "startTime": timestamp(experiment.started),
            "state": "STATE_ACTIVE" if experiment.active else "STATE_PAUSED",
            "numTrials": len(experiment.trial_ids),
            "trialIds": list(experiment.trial_ids),
            "userId": experiment.user.id,
            "username": experiment.user.username,
            "resourcePool": experiment.pool,
            "searcherType": str(searcher.get("name") or ""),
            "searcherMetric": str(searcher.get("metric") or ""),
            "hyperparameters": experiment.config.get("hyperparameters"),
            "name": experiment.name,
            "jobId": experiment.job_id,
            "config": experiment.config,
            "originalConfig": experiment.original_config,
        }

    def _petname(self) -> str:
        """A three-word name, as petname.Generate(3, "-") makes; deterministic here."""
        n = next(self._state.counter)
        return "-".join(
            (_ADVERBS[n % len(_ADVERBS)], _ADJECTIVES[n // 3 % len(_ADJECTIVES)], _NAMES[n % 7])
        )


# Task type -> (response key, description prefix), from the api_*.go launchers.
_LAUNCHED: Final = {
    "COMMAND": ("command", "Command"),
    "NOTEBOOK": ("notebook", "JupyterLab"),
    "SHELL": ("shell", "Shell"),
    "TENSORBOARD": ("tensorboard", "TensorBoard"),
}
_ADVERBS: Final = ("quickly", "gladly", "calmly", "boldly", "deeply")
_ADJECTIVES: Final = ("brave", "quiet", "lucky", "rapid", "tidy", "warm")
_NAMES: Final = ("otter", "heron", "lynx", "marmot", "finch", "bison", "gecko")


def _resource_int(resources: Mapping[str, Any], key: str, default: int) -> int:
    value = resources.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ApiError(3, f"resources.{key} must be an integer >= 0, not {value!r}")
    return value


def _resource_str(resources: Mapping[str, Any], key: str) -> str:
    value = resources.get(key) or ""
    if not isinstance(value, str):
        raise ApiError(3, f"resources.{key} must be a string, not {value!r}")
    return value


def _empty_ntsc(type: str) -> JsonObject:
    """A Notebook (or command, shell, TensorBoard) message left unset, as JSONPb writes it."""
    out: JsonObject = {
        "id": "",
        "description": "",
        "state": "STATE_UNSPECIFIED",
        "startTime": None,
        "container": None,
        "displayName": "",
        "userId": 0,
        "username": "",
        "resourcePool": "",
        "exitStatus": "",
        "jobId": "",
        "workspaceId": 0,
    }
    if type in ("NOTEBOOK", "TENSORBOARD"):
        out["serviceAddress"] = ""
    return out


def _empty_experiment() -> JsonObject:
    """experimentv1.Experiment{} as JSONPb writes it (the validate-only answer)."""
    return {
        "id": 0,
        "description": "",
        "labels": [],
        "startTime": None,
        "endTime": None,
        "state": "STATE_UNSPECIFIED",
        "archived": False,
        "numTrials": 0,
        "trialIds": [],
        "displayName": "",
        "userId": 0,
        "username": "",
        "resourcePool": "",
        "searcherType": "",
        "searcherMetric": "",
        "hyperparameters": None,
        "name": "",
        "notes": "",
        "jobId": "",
        "forkedFrom": None,
        "progress": None,
        "projectId": 1,
        "projectName": "Uncategorized",
        "workspaceId": WORKSPACE_ID,
        "workspaceName": "Uncategorized",
        "parentArchived": False,
        "config": None,
        "originalConfig": "",
        "projectOwnerId": 1,
        "checkpointSize": "0",
        "checkpointCount": 0,
        "unmanaged": False,
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


def _seconds(duration: str) -> float:
    return parse_go_duration(duration) / 1e9


def _provider_summary(provider: ProviderConfig | None) -> JsonObject:
    """agent_resource_manager.go createResourcePoolSummary: a pool's provider fields (the
    printable config's: scripts masked); a static pool's are empty."""
    if provider is None:
        fields: JsonObject = {}
    else:
        fields = printable_config(True, "", {}, [pool_fields("", "", provider)])
        fields = fields["resource_pools"][0]["provider"]
    return {
        "imageId": provider.image_id if provider else "",
        "masterUrl": fields.get("master_url", ""),
        "masterCertName": fields.get("master_cert_name", ""),
        "startupScript": fields.get("startup_script", ""),
        "containerStartupScript": fields.get("container_startup_script", ""),
        "agentDockerNetwork": fields.get("agent_docker_network", ""),
        "agentDockerRuntime": fields.get("agent_docker_runtime", ""),
        "agentDockerImage": fields.get("agent_docker_image", ""),
        "agentFluentImage": "",
        "maxIdleAgentPeriod": _seconds(fields.get("max_idle_agent_period", "0s")),
        "maxAgentStartingPeriod": _seconds(fields.get("max_agent_starting_period", "0s")),
    }


def _aws_detail(provider: ProviderConfig) -> JsonObject:
    aws = provider.fields
    network = aws["network_interface"]
    return {
        "region": aws["region"],
        "rootVolumeSize": aws["root_volume_size"],
        "imageId": aws["image_id"],
        "tagKey": aws["tag_key"],
        "tagValue": aws["tag_value"],
        "instanceName": aws["instance_name"],
        "sshKeyName": aws["ssh_key_name"],
        "publicIp": network["public_ip"],
        "subnetId": network["subnet_id"],
        "securityGroupId": network["security_group_id"],
        "iamInstanceProfileArn": aws["iam_instance_profile_arn"],
        "instanceType": aws["instance_type"],
        "logGroup": aws["log_group"],
        "logStream": aws["log_stream"],
        "spotEnabled": aws["spot"],
        "spotMaxPrice": aws["spot_max_price"],
        "customTags": [
            {"key": tag.get("key", ""), "value": tag.get("value", "")}
            for tag in aws["custom_tags"] or []
        ],
    }


def _gcp_detail(provider: ProviderConfig) -> JsonObject:
    gcp = provider.fields
    network, account, kind = gcp["network_interface"], gcp["service_account"], gcp["instance_type"]
    return {
        "project": gcp["project"],
        "zone": gcp["zone"],
        "bootDiskSize": gcp["boot_disk_size"],
        "bootDiskSourceImage": gcp["boot_disk_source_image"],
        "labelKey": gcp["label_key"],
        "labelValue": gcp["label_value"],
        "namePrefix": gcp["name_prefix"],
        "network": network["network"],
        "subnetwork": network["subnetwork"],
        "externalIp": network["external_ip"],
        "networkTags": list(gcp["network_tags"] or []),
        "serviceAccountEmail": account["email"],
        "serviceAccountScopes": list(account["scopes"] or []),
        "machineType": kind["machine_type"],
        "gpuType": kind["gpu_type"],
        "gpuNum": kind["gpu_num"],
        "preemptible": kind["preemptible"],
        "operationTimeoutPeriod": _seconds(gcp["operation_timeout_period"]),
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
    ("GET", r"/api/v1/master/config", LocalDetermined._get_master_config, True),
    ("POST", r"/api/v1/commands", LocalDetermined._launch_command, True),
    ("POST", r"/api/v1/notebooks", LocalDetermined._launch_notebook, True),
    ("POST", r"/api/v1/shells", LocalDetermined._launch_shell, True),
    ("POST", r"/api/v1/tensorboards", LocalDetermined._launch_tensorboard, True),
    ("POST", r"/api/v1/experiments", LocalDetermined._post_experiment, True),
]
_HEARTBEAT: Final = re.compile(r"/agents/([^/]+)/heartbeat")
_ROUTES: Final = [
    (method, re.compile(path), handler, auth) for method, path, handler, auth in _ROUTE_TABLE
]
