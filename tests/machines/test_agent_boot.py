"""Boot scripts that start the agent image: the agent registers, as the master sees it."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from dynagent.testing.determined.master import AgentRegistration, LocalDetermined
from dynagent.testing.machines.agent_machine import AgentMachine

from .scripts import AWS_INSTANCE_ID, GCE_INSTANCE_NAME, agent_boot


def api_agents(master: LocalDetermined) -> list[dict[str, Any]]:
    """GET /api/v1/agents, as a client of the master reads it."""
    request = urllib.request.Request(
        f"{master.url}/api/v1/agents",
        headers={"Authorization": f"Bearer {master.login('admin')}"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        agents: list[dict[str, Any]] = json.load(response)["agents"]
    return agents


def test_a_detached_gpu_agent_registers_with_the_machines_gpus(
    aws_machine: AgentMachine, master: LocalDetermined
) -> None:
    aws_machine.boot(agent_boot(master.port))
    assert aws_machine.wait_for_boot() == 0
    aws_machine.wait_for(master.registrations, what="the agent to register")
    assert master.registrations() == [
        AgentRegistration("i-0123456789abcdef0", "default", 4, "cuda")
    ]
    (agent,) = api_agents(master)
    assert agent["id"] == "i-0123456789abcdef0"
    assert agent["resourcePools"] == ["default"]
    assert agent["enabled"] is True
    assert {slot["device"]["type"] for slot in agent["slots"].values()} == {"TYPE_CUDA"}
    assert len(agent["slots"]) == 4

    info = aws_machine.agent_container()
    assert info is not None
    (request,) = info["HostConfig"]["DeviceRequests"]
    assert request["Capabilities"] == [["gpu"]]
    assert request["Count"] == -1  # all
    assert info["HostConfig"]["RestartPolicy"]["Name"] == "always"
    assert info["HostConfig"]["NetworkMode"] == "default"
    assert "GPU 3:" in aws_machine.agent_exec(["nvidia-smi", "-L"])
    aws_machine.wait_for(lambda: master.heartbeats("i-0123456789abcdef0") >= 1)


def test_a_foreground_boot_runs_as_long_as_its_agent(
    gcp_machine: AgentMachine, master: LocalDetermined
) -> None:
    """Determined's own boot ends with ``docker run`` in the foreground: it never returns."""
    foreground = ("--restart", "always", "--gpus", "all")
    gcp_machine.boot(agent_boot(master.port, prelude=GCE_INSTANCE_NAME, flags=foreground))
    gcp_machine.wait_for(master.registrations, what="the agent to register")
    assert gcp_machine.boot_exit_code is None
    assert master.registrations() == [AgentRegistration("det-agent-pool-7-0", "default", 2, "cuda")]
    # The agent says so after the master answered: its line may reach the console a
    # moment after the registration does (found once on a loaded machine).
    gcp_machine.wait_for(
        lambda: "registered with the master" in gcp_machine.console,
        what="the agent's registration in the console",
    )


def test_a_cuda_agent_without_gpus_fails_as_the_real_one_does(
    gcp_machine: AgentMachine, master: LocalDetermined
) -> None:
    gcp_machine.boot(
        agent_boot(master.port, prelude=GCE_INSTANCE_NAME, flags=("-d", "--restart", "no"))
    )
    assert gcp_machine.wait_for_agent_exit() == 1
    assert "no CUDA devices" in gcp_machine.agent_logs()
    assert master.registrations() == []


def test_a_cpu_agent_on_a_user_defined_network_registers_one_slot(
    gcp_machine: AgentMachine, master: LocalDetermined
) -> None:
    """A network the boot makes is the machine's own, and the master is reachable on it."""
    master.add_pool("cpu-pool")
    gcp_machine.boot(
        agent_boot(
            master.port,
            prelude=GCE_INSTANCE_NAME + "docker network create agents\n",
            flags=("-d",),
            network="agents",
            env={"DET_SLOT_TYPE": "cpu", "DET_RESOURCE_POOL": "cpu-pool"},
        )
    )
    gcp_machine.wait_for(master.registrations, what="the agent to register")
    assert master.registrations() == [AgentRegistration("det-agent-pool-7-0", "cpu-pool", 1, "cpu")]
    assert "agents" in gcp_machine.network_names()
    (agent,) = api_agents(master)
    assert [s["device"]["type"] for s in agent["slots"].values()] == ["TYPE_CPU"]


def test_an_unknown_pool_is_refused_and_the_agent_exits(
    aws_machine: AgentMachine, master: LocalDetermined
) -> None:
    aws_machine.boot(
        agent_boot(master.port, flags=("-d", "--gpus", "all"), env={"DET_RESOURCE_POOL": "x"})
    )
    assert aws_machine.wait_for_agent_exit() == 1
    assert "the master refused the agent" in aws_machine.agent_logs()
    assert master.registrations() == []
    assert api_agents(master) == []


def test_with_tls_on_the_agent_wants_the_master_cert(
    aws_machine: AgentMachine, master: LocalDetermined
) -> None:
    aws_machine.boot(
        agent_boot(
            master.port,
            flags=("-d", "--gpus", "all"),
            env={
                "DET_SECURITY_TLS_ENABLED": "true",
                "DET_SECURITY_TLS_MASTER_CERT": "/usr/local/determined/master.crt",
            },
        )
    )
    assert aws_machine.wait_for_agent_exit() == 1
    assert "master cert" in aws_machine.agent_logs()
    assert master.registrations() == []


def test_with_tls_on_the_agent_talks_https_to_the_master(machines_available: None) -> None:
    cert = "/usr/local/determined/master.crt"
    with (
        LocalDetermined(tls=True) as master,
        AgentMachine("aws", "i-tls", gpus=1, master=master) as machine,
    ):
        assert master.certificate is not None
        prelude = (
            AWS_INSTANCE_ID
            + "mkdir -p /usr/local/determined\n"
            + f"cat > {cert} <<'EOF'\n{master.certificate.cert_pem}EOF\n"
        )
        machine.boot(
            agent_boot(
                master.port,
                prelude=prelude,
                flags=("-d", "--gpus", "all", "-v", f"{cert}:{cert}"),
                env={"DET_SECURITY_TLS_ENABLED": "true", "DET_SECURITY_TLS_MASTER_CERT": cert},
            )
        )
        machine.wait_for(master.registrations, what="the agent to register over HTTPS")
        assert "master https://127.0.0.1:" in machine.agent_logs()
