"""The master's REST API under ``/api/v1``: the route table (``api.proto``'s http options),
authentication by bearer token or cookie, and each route's handler over the master's
state, answering as ``api_*.go`` does (master.py lists the endpoints and dispatches)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final

import yaml
from werkzeug.wrappers import Request, Response

from dynagent.testing.determined.admission import WORKSPACE_ID
from dynagent.testing.determined.gateway import (
    AGENT_SORT_BY,
    JOB_STATES,
    ORDER_BY,
    ApiError,
    JsonObject,
    QueryParams,
    body_field,
    go_duration,
    json_body,
    json_response,
    not_found,
    paginate,
)
from dynagent.testing.determined.history import (
    get_experiment,
    get_experiment_trials,
    get_experiments,
    get_task,
    resource_allocation_raw,
)
from dynagent.testing.determined.launching import (
    LAUNCHED,
    admit_experiment,
    admit_task,
    create_experiment,
    launch_task,
)
from dynagent.testing.determined.master_config import VERSION
from dynagent.testing.determined.messages import (
    agent_json,
    allocation_json,
    empty_experiment,
    empty_ntsc,
    experiment_json,
    job_json,
    ntsc_json,
    pool_json,
    printable_master_config,
    slot_json,
)
from dynagent.testing.determined.scheduler import kill_tasks_on
from dynagent.testing.determined.state import Agent, MasterState, Token, User, salt_and_hash

DEFAULT_JOBS_LIMIT: Final = 100  # GetJobs/GetJobsV2 when limit is 0
DEFAULT_TOKEN_LIFESPAN: Final = timedelta(days=30)
MAX_TOKEN_LIFESPAN: Final = timedelta(days=30)
_CLUSTER_ID: Final = "3c6e3ad7-13e9-4c5d-9a41-7cf0b1a1f0e1"
_MASTER_ID: Final = "0f0e3b1c-7d2a-4a55-8b5e-2b8c6f1a9d10"
_INVALID_CREDENTIALS: Final = "invalid credentials"
_RECOVERING: Final = "agent disconnected, wait for recovery"


def authenticate(state: MasterState, request: Request) -> User:
    header = request.headers.get("Authorization", "")
    if not header:
        cookie = request.cookies.get("auth")
        if not cookie:
            raise ApiError(16, "token missing")
        header = f"Bearer {cookie}"
    if not header.startswith("Bearer "):
        raise ApiError(16, _INVALID_CREDENTIALS)
    info = state.tokens.get(header.removeprefix("Bearer "))
    if info is None or (info.expires is not None and info.expires <= state.now):
        raise ApiError(16, _INVALID_CREDENTIALS)
    user = state.user_by_id(info.user_id)
    if user is None:
        raise ApiError(16, _INVALID_CREDENTIALS)
    if not user.active:
        raise ApiError(7, "user does not have permission")
    return user


def master_info(state: MasterState) -> JsonObject:
    """``GET /info``: echo's, not the gateway's (snake_case names, no auth)."""
    return {
        "version": VERSION,
        "master_id": _MASTER_ID,
        "cluster_id": _CLUSTER_ID,
        "cluster_name": state.cluster_name_now(),
        "telemetry": {"enabled": False, "otel_enabled": False, "otel_endpoint": ""},
        "sso_providers": None,
    }


# -- auth endpoints --------------------------------------------------------------------


def login(state: MasterState, request: Request, _: User | None) -> Response:
    body = json_body(request)
    username = body_field(body, "username", str, "")
    password = body_field(body, "password", str, "")
    hashed = body_field(body, "isHashed", bool, False)
    if not username:
        raise ApiError(3, "missing argument: username")
    user = state.users.get(username)
    if user is None:
        raise ApiError(16, _INVALID_CREDENTIALS)
    if (password if hashed else salt_and_hash(password)) != user.password_hash:
        raise ApiError(16, _INVALID_CREDENTIALS)
    if not user.active:
        raise ApiError(7, "user is not active")
    token = state.start_session(user)
    response = json_response({"token": token, "user": user.to_json()})
    response.set_cookie("auth", token, path="/")
    return response


def me(state: MasterState, _: Request, user: User | None) -> Response:
    assert user is not None
    return json_response({"user": user.to_json()})


def logout(state: MasterState, request: Request, user: User | None) -> Response:
    header = request.headers.get("Authorization", "") or f"Bearer {request.cookies['auth']}"
    token = header.removeprefix("Bearer ")
    if not state.tokens[token].access:  # logging out keeps access tokens
        del state.tokens[token]
    response = json_response({})
    response.set_cookie("auth", "", expires=0)
    return response


def post_token(state: MasterState, request: Request, user: User | None) -> Response:
    assert user is not None
    body = json_body(request)
    target = state.user_by_id(body_field(body, "userId", int, 0))
    lifespan_text = body_field(body, "lifespan", str, None)
    description = body_field(body, "description", str, "")
    if target is None:
        raise not_found("user", str(body_field(body, "userId", int, 0)))
    if not user.admin:
        raise ApiError(7, "only admin privileged users can create token for own/other users")
    lifespan = DEFAULT_TOKEN_LIFESPAN
    if lifespan_text == "-1":
        lifespan = MAX_TOKEN_LIFESPAN
    elif lifespan_text is not None:
        try:
            lifespan = go_duration(lifespan_text)
        except ValueError as exc:
            raise ApiError(3, f"failed to parse lifespan {lifespan_text}: {exc}") from None
        if lifespan < timedelta(0):
            raise ApiError(
                3, "lifespan must be a Go-formatted duration string with a positive value"
            )
    if lifespan > MAX_TOKEN_LIFESPAN:
        raise ApiError(3, "token Lifespan must be less than max token lifespan")
    del description  # kept by the real master for GET /api/v1/tokens, not modelled
    token = state.new_token("access")
    state.tokens[token] = Token(user_id=target.id, access=True, expires=state.tick() + lifespan)
    token_id = len(state.token_ids) + 1
    state.token_ids[token] = token_id
    return json_response({"token": token, "tokenId": token_id})


# -- agents ----------------------------------------------------------------------------


def get_agents(state: MasterState, request: Request, _: User | None) -> Response:
    params = QueryParams(request)
    offset, limit = params.int32("offset"), params.int32("limit")
    exclude_slots = params.bool("excludeSlots")
    exclude_containers = params.bool("excludeContainers")
    order_by = params.enum("orderBy", ORDER_BY)
    sort_by = params.enum("sortBy", AGENT_SORT_BY)
    agents = list(state.agents.values())
    agents.sort(key=lambda a: a.id)
    if sort_by == "SORT_BY_TIME":
        agents.sort(key=lambda a: a.registered)
    if order_by == "ORDER_BY_DESC":
        agents.reverse()
    page, pagination = paginate(agents, offset, limit)
    page = _maybe_half(state, page)
    return json_response(
        {
            "agents": [agent_json(a, exclude_slots, exclude_containers) for a in page],
            "pagination": pagination,
        }
    )


def _maybe_half(state: MasterState, page: list[Any]) -> list[Any]:
    if state.half_pages <= 0:
        return page
    state.half_pages -= 1
    return page[: len(page) // 2]


def get_agent(state: MasterState, _: Request, __: User | None, agent_id: str) -> Response:
    return json_response({"agent": agent_json(_api_agent(state, agent_id))})


def get_slots(state: MasterState, _: Request, __: User | None, agent_id: str) -> Response:
    agent = _api_agent(state, agent_id)
    slots = sorted((slot_json(agent, d) for d in range(agent.slots)), key=lambda s: str(s["id"]))
    return json_response({"slots": slots})


def enable_agent(state: MasterState, _: Request, user: User | None, agent_id: str) -> Response:
    _require_admin(user)
    agent = _api_agent(state, agent_id)
    if agent.reconnecting:
        raise ApiError(13, _RECOVERING)
    agent.enabled, agent.draining = True, False
    return json_response({"agent": agent_json(agent)})


def disable_agent(
    state: MasterState, request: Request, user: User | None, agent_id: str
) -> Response:
    _require_admin(user)
    drain = body_field(json_body(request), "drain", bool, False)
    agent = _api_agent(state, agent_id)
    if agent.reconnecting:
        raise ApiError(13, _RECOVERING)
    agent.enabled, agent.draining = False, drain
    if not drain:
        kill_tasks_on(state, agent)
    return json_response({"agent": agent_json(agent)})


def _require_admin(user: User | None) -> None:
    if user is None or not user.admin:
        # canUpdateAgents wraps the status error's text in a second status.
        raise ApiError(7, "rpc error: code = PermissionDenied desc = user does not have permission")


def _api_agent(state: MasterState, agent_id: str) -> Agent:
    agent = state.agents.get(agent_id)
    if agent is None:
        raise not_found("agent", agent_id)
    return agent


# -- resource pools --------------------------------------------------------------------


def get_resource_pools(state: MasterState, request: Request, _: User | None) -> Response:
    params = QueryParams(request)
    offset, limit = params.int32("offset"), params.int32("limit")
    pools = sorted(state.pools.values(), key=lambda p: p.name)
    page, pagination = paginate(pools, offset, limit)
    page = _maybe_half(state, page)
    return json_response(
        {"resourcePools": [pool_json(state, p) for p in page], "pagination": pagination}
    )


# -- tasks and jobs --------------------------------------------------------------------


def get_tasks(state: MasterState, _: Request, __: User | None) -> Response:
    summaries = {t.allocation_id: allocation_json(state, t) for t in state.tasks.values()}
    return json_response({"allocationIdToSummary": dict(sorted(summaries.items()))})


def _job_page(state: MasterState, request: Request) -> tuple[list[JsonObject], JsonObject]:
    params = QueryParams(request)
    offset, limit = params.int32("offset"), params.int32("limit")
    pool = params.string("resourcePool") or state.default_compute_pool
    order_by = params.enum("orderBy", ORDER_BY)
    states = params.enums("states", JOB_STATES)
    if pool not in state.pools:
        raise ApiError(13, f"cannot find resource pool {pool}")
    jobs = [job_json(t, ahead) for ahead, t in enumerate(state.visible_tasks(pool))]
    if states:
        jobs = [j for j in jobs if j["summary"]["state"] in states]
    jobs.sort(key=lambda j: (j["summary"]["jobsAhead"], j["jobId"]))
    if order_by == "ORDER_BY_DESC":
        jobs.reverse()
    page, pagination = paginate(jobs, offset, limit or DEFAULT_JOBS_LIMIT)
    return _maybe_half(state, page), pagination


def get_jobs(state: MasterState, request: Request, _: User | None) -> Response:
    page, pagination = _job_page(state, request)
    return json_response({"pagination": pagination, "jobs": page})


def get_jobs_v2(state: MasterState, request: Request, _: User | None) -> Response:
    page, pagination = _job_page(state, request)
    return json_response({"pagination": pagination, "jobs": [{"full": j} for j in page]})


# -- the master's config ---------------------------------------------------------------


def get_master_config(state: MasterState, _: Request, user: User | None) -> Response:
    # cluster/authz_basic_impl.go CanGetMasterConfig: admins only, the bare status.
    if user is None or not user.admin:
        raise ApiError(7, "user does not have permission")
    return json_response({"config": printable_master_config(state)})


# -- launching commands, notebooks, shells and TensorBoards ----------------------------


def _launch_endpoint(
    state: MasterState, request: Request, user: User | None, type: str
) -> Response:
    """POST /api/v1/commands|notebooks|shells|tensorboards, as the api_*.go Launch*
    handlers check them, in their order."""
    assert user is not None
    body = json_body(request)
    config = body_field(body, "config", dict, {})
    workspace_id = body_field(body, "workspaceId", int, 0)
    experiment_ids = body_field(body, "experimentIds", list, [])
    trial_ids = body_field(body, "trialIds", list, [])
    if type == "TENSORBOARD" and not (experiment_ids or trial_ids or body.get("filters")):
        raise ApiError(3, "must set experiment, trial ids, or filters")
    if workspace_id not in (0, WORKSPACE_ID):
        raise not_found("workspace", str(workspace_id))
    admit_task(state, type, config)
    if type == "NOTEBOOK" and body_field(body, "preview", bool, False):
        return json_response({"notebook": empty_ntsc("NOTEBOOK"), "config": config})
    if type == "TENSORBOARD":
        records = state.records.values()
        known = {e.id for e in records} | {t for e in records for t in e.trial_ids}
        if not known & {*experiment_ids, *trial_ids}:
            raise ApiError(3, "no experiments found")
    task, warnings = launch_task(state, type, config, user)
    entity = ntsc_json(task, type)
    if type == "TENSORBOARD":
        entity |= {"experimentIds": experiment_ids, "trialIds": trial_ids}
    resources = {**(config.get("resources") or {}), "slots": task.slots}
    resources |= {"resource_pool": task.pool, "priority": task.priority}
    out_config = {**config, "description": task.name, "resources": resources}
    return json_response(
        {LAUNCHED[type][0]: entity, "config": out_config, "warnings": list(warnings)}
    )


def launch_command(state: MasterState, request: Request, user: User | None) -> Response:
    return _launch_endpoint(state, request, user, "COMMAND")


def launch_notebook(state: MasterState, request: Request, user: User | None) -> Response:
    return _launch_endpoint(state, request, user, "NOTEBOOK")


def launch_shell(state: MasterState, request: Request, user: User | None) -> Response:
    return _launch_endpoint(state, request, user, "SHELL")


def launch_tensorboard(state: MasterState, request: Request, user: User | None) -> Response:
    return _launch_endpoint(state, request, user, "TENSORBOARD")


# -- experiments -----------------------------------------------------------------------


def post_experiment(state: MasterState, request: Request, user: User | None) -> Response:
    """POST /api/v1/experiments (CreateExperimentRequest) as api_experiment.go
    CreateExperiment and core_experiment.go parseCreateExperiment check it."""
    assert user is not None
    body = json_body(request)
    text = body_field(body, "config", str, "")
    activate = body_field(body, "activate", bool, False)
    validate_only = body_field(body, "validateOnly", bool, False)
    if body_field(body, "unmanaged", bool, False):
        raise ApiError(12, "unmanaged experiments are not modelled by LocalDetermined")
    project_id = body_field(body, "projectId", int, 0)
    if project_id not in (0, 1):
        raise not_found("project", str(project_id))
    try:
        config = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise ApiError(13, f"invalid experiment configuration: {exc}") from None
    if not isinstance(config, dict):
        raise ApiError(13, "invalid experiment configuration: not a mapping")
    if validate_only:
        admit_experiment(state, config)
        return json_response({"experiment": empty_experiment(), "config": None, "warnings": []})
    experiment, warnings = create_experiment(state, config, text, user, activate=activate)
    return json_response(
        {
            "experiment": experiment_json(experiment),
            "config": experiment.config,
            "warnings": list(warnings),
        }
    )


_Handler = Callable[..., Response]
_AGENT: Final = r"/api/v1/agents/(?P<agent_id>[^/]+)"
_EXPERIMENT: Final = r"/api/v1/experiments/(?P<experiment_id>[^/]+)"
# (HTTP method, path, handler, needs a bearer token), from api.proto's http options.
_ROUTE_TABLE: Final[list[tuple[str, str, _Handler, bool]]] = [
    ("POST", r"/api/v1/auth/login", login, False),
    ("POST", r"/api/v1/auth/logout", logout, True),
    ("GET", r"/api/v1/auth/user", me, True),
    ("GET", r"/api/v1/me", me, True),
    ("POST", r"/api/v1/tokens", post_token, True),
    ("GET", r"/api/v1/agents", get_agents, True),
    ("GET", _AGENT, get_agent, True),
    ("GET", _AGENT + "/slots", get_slots, True),
    ("POST", _AGENT + "/enable", enable_agent, True),
    ("POST", _AGENT + "/disable", disable_agent, True),
    ("GET", r"/api/v1/resource-pools", get_resource_pools, True),
    ("GET", r"/api/v1/tasks", get_tasks, True),
    ("GET", r"/api/v1/job-queues", get_jobs, True),
    ("GET", r"/api/v1/job-queues-v2", get_jobs_v2, True),
    ("GET", r"/api/v1/master/config", get_master_config, True),
    ("POST", r"/api/v1/commands", launch_command, True),
    ("POST", r"/api/v1/notebooks", launch_notebook, True),
    ("POST", r"/api/v1/shells", launch_shell, True),
    ("POST", r"/api/v1/tensorboards", launch_tensorboard, True),
    ("POST", r"/api/v1/experiments", post_experiment, True),
    ("GET", r"/api/v1/experiments", get_experiments, True),
    ("GET", _EXPERIMENT, get_experiment, True),
    ("GET", _EXPERIMENT + "/trials", get_experiment_trials, True),
    ("GET", r"/api/v1/tasks/(?P<task_id>[^/]+)", get_task, True),
    ("GET", r"/api/v1/resources/allocation/raw", resource_allocation_raw, True),
]
ROUTES: Final = [
    (method, re.compile(path), handler, auth) for method, path, handler, auth in _ROUTE_TABLE
]
