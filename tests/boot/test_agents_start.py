"""The boot scripts the functions send start Determined's agent on a real Docker Engine.

Each test launches one machine through a launch path (RunInstances, the offerings'
launch template, Compute Engine), boots what the cloud got on an ``AgentMachine`` (its
own dockerd, metadata at 169.254.169.254, the agent image with Determined's entrypoint
contract) and watches the agent register with the local Determined master and stay up.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from dynagent.testing.determined.master import AgentRegistration, LocalDetermined
from dynagent.testing.machines.agent_machine import AgentMachine

from .launches import PATHS, POOL, Path, Sent, launch

# A task image the machine has before a stop (no registry: loaded with `docker import`).
TASK_IMAGE = "determinedai/pytorch-ngc:task"
# Heartbeats (one a second) an agent must send after registering, unrestarted, to count
# as staying up: a crash-looping entrypoint never gets that far.
STAYS_UP_BEATS = 2


# One launch path of each cloud: the two of EC2 send the same boot script, one as user
# data, one in the offerings' launch template (test_determined_defaults boots through
# every path, which proves they deliver it alike).
BOTH_CLOUDS: tuple[Path, ...] = ("aws-run-instances", "gcp")


@pytest.fixture(params=BOTH_CLOUDS)
def path(request: pytest.FixtureRequest) -> Path:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def clouds(path: Path, request: pytest.FixtureRequest) -> Any:
    """The local cloud of ``path``: only the one it needs is started."""
    if path == "gcp":
        return SimpleNamespace(compute=request.getfixturevalue("compute"))
    return SimpleNamespace(ec2=request.getfixturevalue("ec2"))


@contextmanager
def booted(sent: Sent, master: LocalDetermined, image: str | None = None) -> Iterator[AgentMachine]:
    """The machine ``sent`` describes, its boot started."""
    images = (image,) if image else ("determinedai/determined-agent:0.38.0",)
    with AgentMachine(
        sent.cloud, sent.instance, gpus=sent.gpus, master=master, image_names=images
    ) as machine:
        machine.boot(sent.user_data)
        yield machine


def registered(machine: AgentMachine, master: LocalDetermined, count: int = 1) -> None:
    machine.wait_for(
        lambda: len([r for r in master.registrations() if r.agent_id == machine.instance]) >= count,
        timeout=30,
        what=f"registration {count} of the agent",
    )


def stays_up(machine: AgentMachine, master: LocalDetermined) -> dict[str, Any]:
    """The agent container once its agent sent STAYS_UP_BEATS heartbeats, checked running
    and never restarted."""
    machine.wait_for(
        lambda: master.heartbeats(machine.instance) >= STAYS_UP_BEATS,
        timeout=20,
        what=f"{STAYS_UP_BEATS} heartbeats",
    )
    info = machine.agent_container()
    assert info is not None, machine.console
    assert info["State"]["Running"], machine.agent_logs()
    assert info["RestartCount"] == 0, machine.agent_logs()
    return info


@pytest.fixture
def pool_master(master: LocalDetermined) -> LocalDetermined:
    master.add_pool(POOL, "STATIC")
    return master


@pytest.mark.parametrize("path", PATHS, indirect=True)
def test_determined_defaults(path: Path, clouds: Any, pool_master: LocalDetermined) -> None:
    sent = launch(path, clouds, pool_master.url)
    with booted(sent, pool_master) as machine:
        registered(machine, pool_master)
        assert pool_master.registrations() == [
            AgentRegistration(sent.instance, POOL, sent.gpus, "cuda")
        ]
        info = stays_up(machine, pool_master)
        host = info["HostConfig"]
        assert host["Privileged"] is True and host["Init"] is True
        assert host["RestartPolicy"]["Name"] == "always"
        assert host["NetworkMode"] == "default"
        assert host["DeviceRequests"][0]["Capabilities"] == [["gpu"]]
        env = dict(item.split("=", 1) for item in info["Config"]["Env"])
        assert env["DET_AGENT_ID"] == sent.instance and env["DET_SLOT_TYPE"] == "cuda"
        mounts = {m["Destination"]: m for m in info["Mounts"]}
        script = mounts["/usr/local/determined/container_startup_script"]
        assert script["RW"] is True  # the entrypoint makes it executable
        for place in ("/var/run/docker.sock", "/sys/fs/cgroup", "/etc/determined/agent.yaml"):
            assert place in mounts
        assert "startup_script succeeded" in machine.console
        assert machine.wait_for_boot() == 0


def test_the_admins_startup_and_container_startup_scripts_both_run(
    path: Path, clouds: Any, pool_master: LocalDetermined
) -> None:
    sent = launch(
        path,
        clouds,
        pool_master.url,
        startup_script="#!/bin/bash\necho machine-ready > /var/tmp/startup-ran\n",
        container_startup_script="#!/bin/sh\necho in-container > /tmp/container-startup-ran\n",
    )
    with booted(sent, pool_master) as machine:
        registered(machine, pool_master)
        stays_up(machine, pool_master)
        assert machine.read_file("/var/tmp/startup-ran") == "machine-ready\n"
        ran = machine.agent_exec(["cat", "/tmp/container-startup-ran"])
        assert ran == "in-container\n"


def test_a_gpu_type_with_cpu_slots_allowed_keeps_its_gpus(
    path: Path, clouds: Any, pool_master: LocalDetermined
) -> None:
    sent = launch(path, clouds, pool_master.url, cpu_slots_allowed=True)
    with booted(sent, pool_master) as machine:
        registered(machine, pool_master)
        (registration,) = pool_master.registrations()
        assert (registration.slots, registration.slot_type) == (sent.gpus, "cuda")
        info = stays_up(machine, pool_master)
        assert info["HostConfig"]["DeviceRequests"][0]["Capabilities"] == [["gpu"]]


def test_agent_config_file_contents_become_the_agents_agent_yaml(
    path: Path, clouds: Any, pool_master: LocalDetermined
) -> None:
    contents = {"container_master_host": "10.0.0.5", "fluent": {"image": "fluent/fluent-bit"}}
    sent = launch(path, clouds, pool_master.url, agent_config_file_contents=contents)
    with booted(sent, pool_master) as machine:
        registered(machine, pool_master)
        stays_up(machine, pool_master)
        agent_yaml = machine.agent_exec(["cat", "/etc/determined/agent.yaml"])
        assert json.loads(agent_yaml) == contents


def test_a_user_defined_network_is_created_and_used(
    path: Path, clouds: Any, pool_master: LocalDetermined
) -> None:
    sent = launch(path, clouds, pool_master.url, agent_docker_network="det-agents")
    with booted(sent, pool_master) as machine:
        registered(machine, pool_master)
        info = stays_up(machine, pool_master)
        assert "det-agents" in machine.network_names()
        assert info["HostConfig"]["NetworkMode"] == "det-agents"
        assert list(info["NetworkSettings"]["Networks"]) == ["det-agents"]
        assert "created Docker network det-agents" in machine.console


def test_a_tls_masters_certificate_reaches_the_agent(path: Path, clouds: Any) -> None:
    with LocalDetermined(tls=True) as master:
        master.add_pool(POOL, "STATIC")
        assert master.certificate is not None
        pem = master.certificate.cert_pem
        sent = launch(path, clouds, master.url, master_cert=pem)
        assert master.url.startswith("https://")
        with booted(sent, master) as machine:
            registered(machine, master)
            info = stays_up(machine, master)
            env = dict(item.split("=", 1) for item in info["Config"]["Env"])
            assert env["DET_SECURITY_TLS_ENABLED"] == "true"
            cert_path = env["DET_SECURITY_TLS_MASTER_CERT"]
            assert machine.agent_exec(["cat", cert_path]) == pem


def test_a_failing_startup_script_stops_the_boot_before_the_agent_and_says_so(
    path: Path, clouds: Any, pool_master: LocalDetermined
) -> None:
    sent = launch(path, clouds, pool_master.url, startup_script="#!/bin/bash\nexit 3\n")
    with booted(sent, pool_master) as machine:
        assert machine.wait_for_boot() == 1
        assert "startup_script failed with exit code 3. The agent is not started." in (
            machine.console
        )
        assert machine.agent_container() is None
        assert pool_master.registrations() == []


def test_the_agent_comes_back_once_after_the_engine_restarts_at_a_reboot(
    path: Path, clouds: Any, pool_master: LocalDetermined
) -> None:
    """The Docker Engine restarts (``--restart always`` brings the agent back); GCE also
    runs the startup script again, which starts the agent container that is there and
    no second one."""
    sent = launch(path, clouds, pool_master.url)
    with booted(sent, pool_master) as machine:
        registered(machine, pool_master)
        assert machine.wait_for_boot() == 0
        machine.reboot()
        registered(machine, pool_master, count=2)
        assert machine.wait_for_boot() == 0
        if sent.cloud == "gcp":
            assert "the agent container exists already (a reboot): starting it." in (
                machine.console
            )
        names = machine.docker("ps", "-a", "--format", "{{.Names}}").split()
        assert names == ["determined-agent"]
        assert machine.agent_running()


def a_task_image() -> bytes:
    """A one-file image's tar, for ``docker import``."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        content = b"task\n"
        member = tarfile.TarInfo("task.txt")
        member.size = len(content)
        tar.addfile(member, io.BytesIO(content))
    return data.getvalue()


def image_ids(machine: AgentMachine) -> dict[str, str]:
    """Each image name on the machine -> its image id."""
    out = machine.docker("images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}")
    return dict(line.split() for line in out.splitlines())


def test_the_agent_comes_back_under_its_id_from_a_stop_and_start_with_no_pull(
    path: Path, clouds: Any, pool_master: LocalDetermined
) -> None:
    """A stopped machine keeps its disk (as a warm pool's does): started again, its
    engine brings the agent container back (GCE's startup script starts that one, no
    second), the agent registers again under the same id, no image is pulled, and the
    images it had are still there. dockerd keeps its events in memory, so the images'
    events are read before the stop and again after the start."""
    sent = launch(path, clouds, pool_master.url)
    with booted(sent, pool_master) as machine:
        registered(machine, pool_master)
        assert machine.wait_for_boot() == 0
        machine.engine.docker("import", "-", TASK_IMAGE, input=a_task_image())
        since = time.time()
        images = image_ids(machine)
        assert TASK_IMAGE in images and "determinedai/determined-agent:0.38.0" in images
        agent = machine.agent_container()
        assert agent is not None
        events = machine.engine.events(since, time.time(), "type=image")

        machine.stop()
        assert machine.stopped and not machine.agent_running()
        assert pool_master.agent_state(sent.instance) == (False, True)  # waits for it
        machine.start()
        registered(machine, pool_master, count=2)
        assert machine.wait_for_boot() == 0
        events += machine.engine.events(since, time.time(), "type=image")

        registrations = pool_master.registrations()
        assert [r.agent_id for r in registrations] == [sent.instance, sent.instance]
        assert registrations[1] == registrations[0]
        assert pool_master.agent_state(sent.instance) == (True, False)
        assert [e for e in events if e["Action"] == "pull"] == [], events
        assert image_ids(machine) == images
        again = machine.agent_container()
        assert again is not None and again["Id"] == agent["Id"], "one agent container"
        assert machine.docker("ps", "-a", "--format", "{{.Names}}").split() == ["determined-agent"]
        starts = machine.console.count("the agent container exists already (a reboot)")
        assert starts == (1 if sent.cloud == "gcp" else 0)
