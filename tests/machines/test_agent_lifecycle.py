"""The agent image's entrypoint contract, an engine restart, and a clean host afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dynagent.testing.determined.master import LocalDetermined
from dynagent.testing.machines.agent_machine import AgentMachine
from dynagent.testing.machines.docker_engine import CGROUP_ROOT

from .scripts import AWS_INSTANCE_ID, agent_boot

STARTUP = "/usr/local/determined/container_startup_script"
WRITE_STARTUP = (
    "mkdir -p /usr/local/determined\n"
    f"printf '#!/bin/sh\\necho container startup ran\\n' > {STARTUP}\n"
    f"chmod 0644 {STARTUP}\n"
)


def startup_boot(master: LocalDetermined, mount: str) -> str:
    flags = ("-d", "--gpus", "all", "-v", f"{STARTUP}:{STARTUP}{mount}")
    return agent_boot(master.port, flags=flags, prelude=WRITE_STARTUP).replace(
        "set -x\n", "set -x\nAGENT_ID=i-startup\n"
    )


def test_a_read_only_startup_script_of_mode_0644_stops_the_agent(
    aws_machine: AgentMachine, master: LocalDetermined
) -> None:
    """chmod +x cannot change a read-only mount: the entrypoint exits 1, no agent."""
    aws_machine.boot(startup_boot(master, ":ro"))
    assert aws_machine.wait_for_agent_exit() == 1
    assert f"cannot make {STARTUP} executable" in aws_machine.agent_logs()
    assert master.registrations() == []


def test_a_writable_startup_script_runs_before_the_agent(
    aws_machine: AgentMachine, master: LocalDetermined
) -> None:
    aws_machine.boot(startup_boot(master, ""))
    aws_machine.wait_for(master.registrations, what="the agent to register")
    logs = aws_machine.agent_logs()
    assert logs.index("container startup ran") < logs.index("registered with the master")
    assert f"{STARTUP} succeeded" in logs


def test_an_engine_restart_brings_the_agent_back(
    aws_machine: AgentMachine, master: LocalDetermined
) -> None:
    aws_machine.boot(agent_boot(master.port))
    aws_machine.wait_for(master.registrations, what="the agent to register")
    first = aws_machine.agent_container()
    assert first is not None

    aws_machine.restart_engine()
    aws_machine.wait_for(
        lambda: len(master.registrations()) == 2, what="the agent to register again"
    )
    again = aws_machine.agent_container()
    assert again is not None and again["State"]["Running"]
    assert again["Id"] == first["Id"]
    assert again["State"]["Pid"] != first["State"]["Pid"]
    assert again["RestartCount"] == 0  # restarted by the engine's start, not by a crash
    assert {r.agent_id for r in master.registrations()} == {"i-0123456789abcdef0"}


WRITTEN = (
    "/tmp/dynagent-written",
    "/var/tmp/dynagent-written",
    "/etc/dynagent-written",
    "/usr/local/bin/dynagent-written",
    "/root/dynagent-written",
)
WRITE_EVERYWHERE = "".join(f"echo machine > {path}\n" for path in WRITTEN)


def host_view() -> tuple[list[str], list[str]]:
    """The host's mounts and network interfaces."""
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    return mounts, sorted(os.listdir("/sys/class/net"))


def test_nothing_is_left_on_the_host(machines_available: None, master: LocalDetermined) -> None:
    before = host_view()
    with AgentMachine("aws", "i-leftovers", gpus=1, master=master) as machine:
        prelude = AWS_INSTANCE_ID + "docker network create agents\n" + WRITE_EVERYWHERE
        machine.boot(agent_boot(master.port, network="agents", prelude=prelude))
        machine.wait_for(master.registrations, what="the agent to register")
        holder = machine.namespace.pid
        mount_ns = machine.namespace.mount_ns
        state = machine.engine.log_path.parent
        cgroup = machine.engine.cgroup_parent
        assert machine.wait_for(machine.routed_containers)
        assert "agents" in machine.network_names()
        assert host_view() == before  # the machine's mounts and bridge are its own
        for path in WRITTEN:
            assert machine.read_file(path) == "machine\n"
            assert not Path(path).exists()  # the machine's writes stay in the machine
    assert host_view() == before
    assert not state.exists()
    assert not Path(f"/proc/{holder}").exists()
    assert not any((h / cgroup).exists() for h in CGROUP_ROOT.iterdir())
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            assert os.stat(f"/proc/{pid}/ns/mnt").st_ino != mount_ns
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (FileNotFoundError, PermissionError):
            continue
        assert str(state).encode() not in command


def test_a_machine_cannot_start_twice_boot(
    aws_machine: AgentMachine,
) -> None:
    aws_machine.boot("#!/bin/bash\ntrue\n")
    with pytest.raises(RuntimeError, match="booted already"):
        aws_machine.boot("#!/bin/bash\ntrue\n")


def test_a_restarted_container_gets_a_new_route_to_the_master(
    aws_machine: AgentMachine, master: LocalDetermined
) -> None:
    """A restart gives the container a new network namespace; the route follows it."""
    aws_machine.boot(agent_boot(master.port))
    aws_machine.wait_for(master.registrations, what="the agent to register")
    aws_machine.docker("restart", "--time", "1", "determined-agent")
    aws_machine.wait_for(
        lambda: len(master.registrations()) == 2, what="the agent to register again"
    )
    assert len(aws_machine.routed_containers()) == 1


def test_the_agent_image_answers_to_every_name_asked_for(
    machines_available: None, master: LocalDetermined
) -> None:
    names = ("determinedai/determined-agent:0.38.0", "registry.example/agent:dev")
    with AgentMachine("gcp", "det-names", master=master, image_names=names) as machine:
        listed = machine.docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}")
        assert sorted(listed.split()) == sorted(names)
        info = json.loads(machine.docker("image", "inspect", names[1]))[0]
        assert info["Config"]["Entrypoint"] == ["/run/determined/workdir/entrypoint.sh"]
        assert info["Config"]["Cmd"] == ["run"]
        assert info["Config"]["WorkingDir"] == "/run/determined/workdir"


CRASHING_TEST = """
import json, sys, time
from dynagent.testing.machines.agent_machine import AgentMachine
from dynagent.testing.determined.master import LocalDetermined

master = LocalDetermined().start()
machine = AgentMachine("aws", "i-crash", gpus=1, master=master).__enter__()
machine.boot(sys.argv[1].replace("@PORT@", str(master.port)))
machine.wait_for(master.registrations)
print(json.dumps({
    "holder": machine.namespace.pid,
    "mount_ns": machine.namespace.mount_ns,
    "state": str(machine.engine.log_path.parent),
    "cgroup": machine.engine.cgroup_parent,
}), flush=True)
time.sleep(60)
"""


def machine_processes(mount_ns: int) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}/ns/mnt").st_ino == mount_ns:
                found.append(pid)
        except (FileNotFoundError, PermissionError):
            continue
    return found


def test_a_killed_test_process_leaves_nothing_behind(
    machines_available: None, tmp_path: Path
) -> None:
    """The holder outlives a test process killed mid-test and ends the machine itself.
    (The killed process's agent image tar is left in its TMPDIR, pytest's to clean.)"""
    boot = agent_boot(0).replace('DET_MASTER_PORT="0"', 'DET_MASTER_PORT="@PORT@"')
    child = subprocess.Popen(
        [sys.executable, "-c", CRASHING_TEST, boot],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(tmp_path)},
    )
    assert child.stdout is not None
    with child.stdout:
        machine = json.loads(child.stdout.readline())
    child.kill()
    child.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        Path(machine["state"]).exists() or machine_processes(machine["mount_ns"])
    ):
        time.sleep(0.1)
    assert not Path(machine["state"]).exists()
    assert machine_processes(machine["mount_ns"]) == []
    assert not any((h / machine["cgroup"]).exists() for h in CGROUP_ROOT.iterdir())
