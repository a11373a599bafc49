"""The local Determined master, read through Determined's own client and its bindings.

Every answer must parse with the bindings' type for it and come back unchanged from
``to_json(omit_unset=True)``: a field the real API does not have, a missing required
one, a wrong enum or type would fail here.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests

pytest.importorskip("determined", reason="Determined's client: run in .venv-det")
from determined.common import api
from determined.common.api import bindings

from dynagent.testing.determined.master import (
    DEFAULT_PASSWORD,
    LocalDetermined,
    salt_and_hash,
)

# (path, bindings type) of every list the fake serves.
LISTS = [
    ("/api/v1/agents", bindings.v1GetAgentsResponse),
    ("/api/v1/resource-pools", bindings.v1GetResourcePoolsResponse),
    ("/api/v1/tasks", bindings.v1GetTasksResponse),
    ("/api/v1/job-queues-v2", bindings.v1GetJobsV2Response),
    ("/api/v1/job-queues", bindings.v1GetJobsResponse),
    ("/api/v1/me", bindings.v1GetMeResponse),
    ("/api/v1/auth/user", bindings.v1CurrentUserResponse),
]


def busy_cluster(master: LocalDetermined) -> dict[str, str]:
    """Two pools, four agents; a placed, a multi-agent, a zero-slot and a pending task."""
    master.add_pool("aws-a100", "AWS", slots_per_agent=8, instance_type="p4d.24xlarge")
    master.add_agent("gpu-1", slots=4)
    master.add_agent("gpu-2", slots=2)
    master.add_agent("cloud-1", "aws-a100", slots=8)
    master.add_agent("cloud-2", "aws-a100", slots=8)
    ids = {
        "trial": master.submit("Trial 1 (Experiment 1)", 3).task_id,
        "multi": master.submit("Trial 2 (Experiment 2)", 16, "aws-a100").task_id,
        "gc": master.submit("Checkpoint GC", 0, type="CHECKPOINT_GC").task_id,
        "pending": master.submit("Trial 3 (Experiment 3)", 4).task_id,
    }
    assert master.schedule() == [ids["trial"], ids["multi"], ids["gc"]]
    return ids


def get(master: LocalDetermined, session: Any, path: str, **params: Any) -> requests.Response:
    return requests.get(
        master.url + path,
        params=params,
        headers={"Authorization": f"Bearer {session.token}"},
        timeout=10,
    )


def error_of(response: requests.Response) -> tuple[int, int, str, str]:
    body = response.json()["error"]
    assert set(body) == {"code", "reason", "error"}
    return response.status_code, body["code"], body["reason"], body["error"]


@pytest.mark.parametrize(("path", "binding"), LISTS)
def test_every_answer_parses_with_the_bindings_and_round_trips(
    master: LocalDetermined, session: Any, path: str, binding: Any
) -> None:
    busy_cluster(master)
    answer = get(master, session, path)
    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == "application/json"
    body = answer.json()
    assert binding.from_json(body).to_json(omit_unset=True) == body


def test_single_agent_and_slots_parse_and_round_trip(master: LocalDetermined, session: Any) -> None:
    busy_cluster(master)
    agent = bindings.get_GetAgent(session, agentId="gpu-1").agent
    assert (
        agent.to_json(omit_unset=True)
        == get(master, session, "/api/v1/agents/gpu-1").json()["agent"]
    )
    slots = get(master, session, "/api/v1/agents/gpu-1/slots").json()
    assert bindings.v1GetSlotsResponse.from_json(slots).to_json(omit_unset=True) == slots
    assert [s["id"] for s in slots["slots"]] == ["0", "1", "2", "3"]


def test_agents_as_the_master_lists_them(master: LocalDetermined, session: Any) -> None:
    ids = busy_cluster(master)
    agents = {a.id: a for a in bindings.get_GetAgents(session).agents}
    assert sorted(agents) == ["cloud-1", "cloud-2", "gpu-1", "gpu-2"]

    gpu1 = get(master, session, "/api/v1/agents/gpu-1").json()["agent"]
    assert list(gpu1["slots"]) == [f"/agents/gpu-1/slots/{n}" for n in range(4)]
    busy = [s for s in gpu1["slots"].values() if s["container"] is not None]
    assert [s["id"] for s in busy] == ["0", "1", "2"]
    assert gpu1["slots"]["/agents/gpu-1/slots/3"]["container"] is None  # free: null
    assert gpu1["slots"]["/agents/gpu-1/slots/0"]["device"]["type"] == "TYPE_CUDA"
    (container,) = gpu1["containers"].values()
    assert [d["id"] for d in container["devices"]] == [0, 1, 2]
    assert container["state"] == "STATE_RUNNING"
    assert gpu1["slotStats"]["typeStats"]["TYPE_CUDA"] == {
        "states": {"STATE_RUNNING": 3},
        "draining": 0,
        "disabled": 0,
        "total": 4,
    }
    assert gpu1["resourcePools"] == ["default"] and gpu1["version"] == "0.38.1"
    assert gpu1["registeredTime"].endswith("Z")
    # The multi-agent task fills both cloud agents, one container on each.
    for name in ("cloud-1", "cloud-2"):
        assert len(agents[name].containers or {}) == 1
        assert all(s.container is not None for s in (agents[name].slots or {}).values())
    assert master.placement(ids["multi"]) == {"cloud-1": list(range(8)), "cloud-2": list(range(8))}


def test_a_zero_slot_task_shows_only_in_tasks(master: LocalDetermined, session: Any) -> None:
    master.add_agent("solo", slots=2)
    gc = master.submit("Checkpoint GC", 0, type="CHECKPOINT_GC")
    master.schedule()

    (agent,) = bindings.get_GetAgents(session).agents
    assert agent.containers == {}
    assert all(s.container is None for s in (agent.slots or {}).values())
    assert agent.slotStats.typeStats["TYPE_CUDA"].states == {}  # idle, as far as agents say

    summary = bindings.get_GetTasks(session).allocationIdToSummary or {}
    (resources,) = summary[gc.allocation_id].resources or []
    assert resources.agentDevices is not None
    assert list(resources.agentDevices) == ["solo"]
    assert resources.agentDevices["solo"].devices == []
    # Not user-visible: no job for it, though the pool counts it as a running aux container.
    assert bindings.get_GetJobsV2(session).jobs == []
    (pool,) = bindings.get_GetResourcePools(session).resourcePools or []
    assert (pool.auxContainersRunning, pool.slotsUsed) == (1, 0)


def test_a_pending_task_has_no_resources(master: LocalDetermined, session: Any) -> None:
    ids = busy_cluster(master)
    raw = get(master, session, "/api/v1/tasks").json()["allocationIdToSummary"]
    pending = raw[f"{ids['pending']}.1"]
    assert pending["resources"] == []
    assert pending["slotsNeeded"] == 4 and pending["priority"] == 42
    assert "priority" not in raw[f"{ids['gc']}.1"]  # optional, and GC has no job
    multi = raw[f"{ids['multi']}.1"]
    assert sorted(a for r in multi["resources"] for a in r["agentDevices"]) == [
        "cloud-1",
        "cloud-2",
    ]


def test_agent_paging_and_flags(master: LocalDetermined, session: Any) -> None:
    for n in range(5):
        master.add_agent(f"agent-{n}", slots=1)
    page = bindings.get_GetAgents(session, offset=1, limit=2)
    assert [a.id for a in page.agents] == ["agent-1", "agent-2"]
    assert page.pagination is not None
    assert page.pagination.to_json() == {
        "offset": 1,
        "limit": 2,
        "startIndex": 1,
        "endIndex": 3,
        "total": 5,
    }
    last = bindings.get_GetAgents(session, offset=-2)  # negative: from the end; limit 0: all
    assert [a.id for a in last.agents] == ["agent-3", "agent-4"]
    desc = bindings.get_GetAgents(session, orderBy=bindings.v1OrderBy.DESC, limit=1)
    assert [a.id for a in desc.agents] == ["agent-4"]

    bare = get(master, session, "/api/v1/agents", excludeSlots="true", exclude_containers="1")
    assert {(len(a["slots"]), len(a["containers"])) for a in bare.json()["agents"]} == {(0, 0)}
    assert bare.json()["agents"][0]["slotStats"]["typeStats"]["TYPE_CUDA"]["total"] == 1
    # `label` is no field of GetAgentsRequest any more: the gateway ignores it.
    assert len(get(master, session, "/api/v1/agents", label="x").json()["agents"]) == 5

    assert error_of(get(master, session, "/api/v1/agents", offset=9)) == (
        400,
        3,
        "InvalidArgument",
        "offset out of bounds",
    )
    assert error_of(get(master, session, "/api/v1/agents", limit="many"))[:2] == (400, 3)


def test_resource_pools_count_slots_as_the_master_does(
    master: LocalDetermined, session: Any
) -> None:
    master.add_pool("gcp-t4", "GCP", slots_per_agent=4, instance_type="n1-standard-16")
    master.add_agent("on", slots=4)
    master.add_agent("drain", slots=4)
    master.add_agent("off", slots=4)
    master.submit("Trial 1 (Experiment 1)", 4)
    master.schedule()  # best fit, lowest id: "drain" takes it
    bindings.post_DisableAgent(
        session, agentId="drain", body=bindings.v1DisableAgentRequest(agentId="drain", drain=True)
    )
    bindings.post_DisableAgent(
        session, agentId="off", body=bindings.v1DisableAgentRequest(agentId="off")
    )
    pools = {p.name: p for p in bindings.get_GetResourcePools(session).resourcePools or []}
    static, gcp = pools["default"], pools["gcp-t4"]
    assert static.type == bindings.v1ResourcePoolType.STATIC and static.slotsPerAgent == -1
    assert static.location == "on-prem" and static.defaultComputePool
    # enabled: all 4; draining: its 4 busy ones; disabled: none.
    assert (static.numAgents, static.slotsAvailable, static.slotsUsed) == (3, 8, 4)
    assert static.slotType == bindings.devicev1Type.CUDA
    assert gcp.type == bindings.v1ResourcePoolType.GCP and gcp.slotsPerAgent == 4
    assert gcp.details.gcp is not None and gcp.details.aws is None
    assert (gcp.numAgents, gcp.slotsAvailable) == (0, 0)
    assert static.schedulerType == bindings.v1SchedulerType.PRIORITY


def test_worst_fit_spreads_tasks_and_the_pool_says_so(
    master: LocalDetermined, session: Any
) -> None:
    master.configure(
        {
            "resource_pools": [
                {"pool_name": "spread", "scheduler": {"fitting_policy": "worst"}},
                {"pool_name": "packed"},
            ]
        }
    )
    for pool in ("spread", "packed"):
        master.add_agent(f"{pool}-a", pool, slots=8)
        master.add_agent(f"{pool}-b", pool, slots=4)
    pools = ("spread", "packed")
    tasks = {p: [master.submit(f"cmd {p} {n}", 1, p, "COMMAND") for n in range(3)] for p in pools}
    master.schedule()
    # Worst fit: the largest share free (8/8, then 4/4 over 7/8, then 7/8 over 3/4);
    # best fit: the fewest free slots that fit, all three on the 4-slot agent.
    where = {p: [next(iter(master.placement(t.task_id))) for t in ts] for p, ts in tasks.items()}
    assert where == {
        "spread": ["spread-a", "spread-b", "spread-a"],
        "packed": ["packed-b"] * 3,
    }
    listed = {p.name: p for p in bindings.get_GetResourcePools(session).resourcePools or []}
    assert listed["spread"].schedulerFittingPolicy == bindings.v1FittingPolicy.WORST
    assert listed["packed"].schedulerFittingPolicy == bindings.v1FittingPolicy.BEST


def test_job_queue_pages_past_one_hundred(master: LocalDetermined, session: Any) -> None:
    master.add_agent("gpu", slots=1)
    submitted = [master.submit(f"cmd-{n:03d}", 1, type="COMMAND") for n in range(130)]
    master.schedule()

    first = get(master, session, "/api/v1/job-queues-v2", resourcePool="default", foo="bar")
    assert first.status_code == 200
    assert len(first.json()["jobs"]) == 100
    assert first.json()["pagination"] == {
        "offset": 0,
        "limit": 100,
        "startIndex": 0,
        "endIndex": 100,
        "total": 130,
    }
    pages = list(api.read_paginated(lambda offset: bindings.get_GetJobsV2(session, offset=offset)))
    jobs = [j.full for page in pages for j in page.jobs]
    assert len(pages) == 2
    assert [j.jobId for j in jobs if j] == [s.job_id for s in submitted]
    assert [j.summary.jobsAhead for j in jobs if j and j.summary] == list(range(130))
    head = jobs[0]
    assert head is not None and head.summary is not None
    assert head.summary.state == bindings.jobv1State.SCHEDULED and head.allocatedSlots == 1
    queued = bindings.get_GetJobsV2(session, states=[bindings.jobv1State.QUEUED])
    assert queued.pagination is not None and queued.pagination.total == 129

    missing = get(master, session, "/api/v1/job-queues-v2", resourcePool="nope")
    assert error_of(missing) == (500, 13, "Internal", "cannot find resource pool nope")


def test_login_hashed_or_plain_and_tokens(master: LocalDetermined) -> None:
    url = master.url
    plain = requests.post(
        f"{url}/api/v1/auth/login",
        json={"username": "determined", "password": DEFAULT_PASSWORD},
        timeout=10,
    )
    hashed = requests.post(
        f"{url}/api/v1/auth/login",
        json={
            "username": "determined",
            "password": salt_and_hash(DEFAULT_PASSWORD),
            "isHashed": True,
        },
        timeout=10,
    )
    for answer in (plain, hashed):
        assert answer.status_code == 200
        login = bindings.v1LoginResponse.from_json(answer.json())
        assert login.to_json(omit_unset=True) == answer.json()
        assert login.user.username == "determined" and not login.user.admin
        assert answer.cookies["auth"] == login.token
    # The hashed password sent as a plain one is wrong, and so is a wrong one.
    for body in (
        {"username": "determined", "password": salt_and_hash(DEFAULT_PASSWORD)},
        {"username": "determined", "password": "nope", "isHashed": False},
        {"username": "ghost", "password": DEFAULT_PASSWORD},
    ):
        denied = requests.post(f"{url}/api/v1/auth/login", json=body, timeout=10)
        assert error_of(denied) == (401, 16, "Unauthenticated", "invalid credentials")
    no_name = requests.post(f"{url}/api/v1/auth/login", json={"password": "x"}, timeout=10)
    assert error_of(no_name)[:2] == (400, 3)
    anonymous = requests.get(f"{url}/api/v1/agents", timeout=10)
    assert error_of(anonymous) == (401, 16, "Unauthenticated", "token missing")


def test_expired_tokens_get_401_until_the_client_logs_in_again(
    master: LocalDetermined, session: Any
) -> None:
    access = bindings.post_PostAccessToken(
        session, body=bindings.v1PostAccessTokenRequest(userId=2, lifespan="720h")
    )
    assert access.tokenId == 1
    bindings.get_GetAgents(session)

    master.expire_tokens()
    with pytest.raises(api.errors.UnauthenticatedException):
        bindings.get_GetAgents(session)
    assert error_of(get(master, session, "/api/v1/agents"))[:2] == (401, 16)

    from determined.common.api import authentication

    again = authentication.login(master.url, "admin", DEFAULT_PASSWORD)
    assert bindings.get_GetAgents(again).agents == []
    # The access token outlived the sessions, and is determined's, not admin's.
    as_access = api.Session(master.url, "determined", access.token, None, max_retries=0)
    assert bindings.get_GetMe(as_access).user.username == "determined"

    bindings.post_Logout(again)
    with pytest.raises(api.errors.UnauthenticatedException):
        bindings.get_GetMe(again)


def test_only_admins_change_agents_or_mint_tokens(master: LocalDetermined) -> None:
    from determined.common.api import authentication

    master.add_agent("gpu", slots=1)
    user = authentication.login(master.url, "determined", DEFAULT_PASSWORD)
    with pytest.raises(api.errors.ForbiddenException, match="user does not have permission"):
        bindings.post_EnableAgent(user, agentId="gpu")
    with pytest.raises(api.errors.ForbiddenException, match="only admin"):
        bindings.post_PostAccessToken(user, body=bindings.v1PostAccessTokenRequest(userId=2))
    assert master.agent_state("gpu") == (True, False)


def test_drain_keeps_tasks_disable_kills_them(master: LocalDetermined, session: Any) -> None:
    master.add_agent("a", slots=4)
    master.add_agent("b", slots=4)
    on_a = master.submit("Trial 1 (Experiment 1)", 3)
    aux_on_a = master.submit("Checkpoint GC", 0, type="CHECKPOINT_GC")
    on_b = master.submit("Trial 2 (Experiment 2)", 4)
    master.schedule()
    assert master.placement(on_a.task_id) == {"a": [0, 1, 2]}
    assert master.placement(aux_on_a.task_id) == {"a": []}

    drained = bindings.post_DisableAgent(
        session, agentId="a", body=bindings.v1DisableAgentRequest(agentId="a", drain=True)
    ).agent
    assert drained is not None and (drained.enabled, drained.draining) == (False, True)
    assert all(s.draining and not s.enabled for s in (drained.slots or {}).values())
    assert master.task_state(on_a.task_id) == "RUNNING"
    late = master.submit("Trial 3 (Experiment 3)", 1)
    assert master.schedule() == []  # a drains, b is full

    # An empty body is drain false: the agent's tasks, zero-slot ones too, are killed.
    killed = requests.post(
        f"{master.url}/api/v1/agents/a/disable",
        headers={"Authorization": f"Bearer {session.token}"},
        timeout=10,
    )
    assert killed.status_code == 200
    assert (killed.json()["agent"]["enabled"], killed.json()["agent"]["draining"]) == (False, False)
    assert master.task_state(on_a.task_id) == "KILLED"
    assert master.task_state(aux_on_a.task_id) == "KILLED"
    assert master.task_state(on_b.task_id) == "RUNNING"
    assert master.schedule() == []

    enabled = bindings.post_EnableAgent(session, agentId="a").agent
    assert enabled is not None and (enabled.enabled, enabled.draining) == (True, False)
    assert master.schedule() == [late.task_id]

    missing = requests.post(
        f"{master.url}/api/v1/agents/zz/enable",
        headers={"Authorization": f"Bearer {session.token}"},
        timeout=10,
    )
    assert error_of(missing) == (404, 5, "NotFound", "agent 'zz' not found")


def test_a_reconnecting_agent_refuses_changes(master: LocalDetermined, session: Any) -> None:
    master.add_agent("flaky", slots=2)
    task = master.submit("Trial 1 (Experiment 1)", 2)
    master.schedule()
    master.reconnecting("flaky")

    listed = get(master, session, "/api/v1/agents/flaky").json()["agent"]
    assert (listed["enabled"], listed["draining"]) == (False, True)
    for action, body in (("disable", {"drain": True}), ("enable", None)):
        refused = requests.post(
            f"{master.url}/api/v1/agents/flaky/{action}",
            json=body,
            headers={"Authorization": f"Bearer {session.token}"},
            timeout=10,
        )
        assert error_of(refused) == (500, 13, "Internal", "agent disconnected, wait for recovery")
    assert master.task_state(task.task_id) == "RUNNING"

    master.reconnecting("flaky", False)
    assert master.agent_state("flaky") == (True, False)
    assert bindings.post_DisableAgent(
        session, agentId="flaky", body=bindings.v1DisableAgentRequest(agentId="flaky", drain=True)
    ).agent


def test_an_agent_that_does_not_reconnect_in_time_is_removed(
    master: LocalDetermined, session: Any
) -> None:
    # agentrm/agent.go: agent_reconnect_wait (25s by default), then the agent is gone and
    # its tasks with it; a machine stopped for longer comes back as a new agent.
    master.add_agent("stopped", slots=2)
    task = master.submit("Trial 1 (Experiment 1)", 2)
    master.schedule()
    master.reconnecting("stopped")
    master.advance(20)
    assert [a.id for a in bindings.get_GetAgents(session).agents or []] == ["stopped"]
    master.advance(10)
    assert not bindings.get_GetAgents(session).agents
    assert master.task_state(task.task_id) != "RUNNING"
    master.add_agent("stopped", slots=2)
    assert master.agent_state("stopped") == (True, False)


def test_injected_errors_and_outages(master: LocalDetermined, session: Any) -> None:
    master.fail_next(1, status=503)
    master.fail_next(1, status=500, path="/api/v1/tasks")
    assert error_of(get(master, session, "/api/v1/agents")) == (
        503,
        14,
        "Unavailable",
        "service unavailable",
    )
    assert get(master, session, "/api/v1/agents").status_code == 200  # the path did not match
    assert error_of(get(master, session, "/api/v1/tasks"))[:3] == (500, 13, "Internal")
    assert get(master, session, "/api/v1/tasks").status_code == 200

    master.down("502")
    assert get(master, session, "/api/v1/agents").status_code == 502
    master.up()

    port = master.port
    master.down()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{master.url}/info", timeout=5)
    master.up()
    assert master.port == port
    assert get(master, session, "/api/v1/agents").status_code == 200
    statuses = [c.status for c in master.calls() if c.path != "/api/v1/auth/login"]
    assert statuses == [503, 200, 500, 200, 502, 200]


def test_a_half_page_says_more_than_it_holds(master: LocalDetermined, session: Any) -> None:
    for n in range(4):
        master.add_agent(f"agent-{n}", slots=1)
    master.half_page()
    short = get(master, session, "/api/v1/agents").json()
    assert [a["id"] for a in short["agents"]] == ["agent-0", "agent-1"]
    assert short["pagination"]["endIndex"] == short["pagination"]["total"] == 4
    assert len(get(master, session, "/api/v1/agents").json()["agents"]) == 4  # once only


def test_a_slow_master_times_clients_out() -> None:
    with LocalDetermined() as master:
        master.slow(30)
        with pytest.raises(requests.Timeout):
            requests.get(f"{master.url}/info", timeout=0.2)
        master.slow(0)
        assert requests.get(f"{master.url}/info", timeout=10).status_code == 200
    assert not master.running


def test_info_and_unknown_routes(master: LocalDetermined, session: Any) -> None:
    info = requests.get(f"{master.url}/info", timeout=10).json()
    assert info["version"] == "0.38.1"
    assert {"master_id", "cluster_id", "cluster_name"} <= set(info)
    assert error_of(get(master, session, "/api/v1/nothing-here")) == (
        501,
        12,
        "Unimplemented",
        "Not Implemented",
    )
    wrong_method = requests.delete(
        f"{master.url}/api/v1/agents",
        headers={"Authorization": f"Bearer {session.token}"},
        timeout=10,
    )
    assert error_of(wrong_method)[3] == "Method Not Allowed"


def test_the_same_story_gives_the_same_answers() -> None:
    answers = []
    for _ in range(2):
        with LocalDetermined() as master:
            busy_cluster(master)
            token = master.login("admin")
            answers.append(
                [
                    requests.get(
                        master.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=10
                    ).json()
                    for path, _ in LISTS[:5]
                ]
            )
    assert answers[0] == answers[1]
