"""LocalDetermined's endpoint for agents that connect themselves (the agent stand-in's)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import pytest

from dynagent.testing.determined.master import AgentRegistration, LocalDetermined


def post(master: LocalDetermined, path: str) -> tuple[int, str]:
    request = urllib.request.Request(f"{master.url}{path}", data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


def test_a_registration_makes_the_agent_add_agent_makes(master: LocalDetermined) -> None:
    master.add_pool("gpu")
    assert post(master, "/agents?id=i-1&resource_pool=gpu&slots=8&slot_type=cuda")[0] == 200
    master.add_agent("i-2", "gpu", 8)
    listed = master.agent_state("i-1"), master.agent_state("i-2")
    assert listed == ((True, False), (True, False))
    assert master.registrations() == [AgentRegistration("i-1", "gpu", 8, "cuda")]


def test_an_unknown_pool_is_refused(master: LocalDetermined) -> None:
    status, body = post(master, "/agents?id=i-1&resource_pool=nope&slots=8&slot_type=cuda")
    assert status == 400
    assert "cannot find specified resource pool nope" in body
    assert master.registrations() == []


@pytest.mark.parametrize(
    "query",
    [
        "id=i-1&slots=x&slot_type=cuda",
        "id=i-1&slots=1&slot_type=rocm",
        "id=&slots=1&slot_type=cuda",
        "id=i-1&slots=2&slot_type=none",
    ],
)
def test_a_bad_registration_is_refused(master: LocalDetermined, query: str) -> None:
    assert post(master, f"/agents?{query}")[0] == 400


def test_heartbeats_count_and_a_returning_agent_registers_again(master: LocalDetermined) -> None:
    assert post(master, "/agents/i-1/heartbeat")[0] == 404  # unknown: register first
    assert post(master, "/agents?id=i-1&slots=0&slot_type=none")[0] == 200
    assert post(master, "/agents/i-1/heartbeat")[0] == 200
    assert master.heartbeats("i-1") == 1
    master.reconnecting("i-1")
    assert post(master, "/agents?id=i-1&slots=0&slot_type=none")[0] == 200
    assert master.agent_state("i-1") == (True, False)
    assert [r.agent_id for r in master.registrations()] == ["i-1", "i-1"]
    assert post(master, "/agents?id=i-1&resource_pool=other&slots=0&slot_type=none")[0] == 400


def test_a_get_is_not_allowed(master: LocalDetermined) -> None:
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(f"{master.url}/agents", timeout=5)
    assert error.value.code == 405
    error.value.close()


def test_cpu_and_none_agents_in_the_api(master: LocalDetermined) -> None:
    master.add_agent("cpu-1", slots=1, slot_type="cpu")
    master.add_agent("none-1", slots=0, slot_type="none")
    with pytest.raises(ValueError, match="slot type none has no slots"):
        master.add_agent("none-2", slots=1, slot_type="none")
    with pytest.raises(ValueError, match="cuda, cpu or none"):
        master.add_agent("x", slots=1, slot_type="rocm")  # type: ignore[arg-type]
    token = master.login("admin")
    request = urllib.request.Request(
        f"{master.url}/api/v1/resource-pools", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        (pool,) = json.load(response)["resourcePools"]
    assert pool["slotType"] == "TYPE_CPU"
    assert pool["slotsAvailable"] == 1


def test_with_tls_the_master_serves_https_with_its_own_certificate() -> None:
    with LocalDetermined(tls=True) as master:
        assert master.certificate is not None
        assert master.url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cadata=master.certificate.cert_pem)
        with urllib.request.urlopen(f"{master.url}/info", context=context, timeout=5) as answer:
            assert json.load(answer)["version"] == "0.38.1"
        master.down()
        master.up()  # back on the same port, still HTTPS
        with urllib.request.urlopen(f"{master.url}/info", context=context, timeout=5) as answer:
            assert answer.status == 200
