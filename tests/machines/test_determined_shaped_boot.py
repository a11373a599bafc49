"""A boot shaped like Determined's own (its ``docker run`` flags and mounts, in the
foreground, settings in agent.yaml): everything it asks of a VM, the machine has."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dynagent.testing.determined.master import AgentRegistration, LocalDetermined
from dynagent.testing.machines.agent_machine import AgentMachine

AGENT_FILES = "/usr/local/determined"


def determined_shaped_boot(master_port: int, pool: str) -> str:
    return f"""#!/bin/bash
mkdir -p {AGENT_FILES}
printf 'master_host: 127.0.0.1\\nmaster_port: {master_port}\\n' > {AGENT_FILES}/agent.yaml
printf '#!/bin/sh\\necho container startup ran\\n' > {AGENT_FILES}/container_startup_script
name=$(curl -s -H 'Metadata-Flavor: Google' \\
    http://metadata.google.internal/computeMetadata/v1/instance/name)
docker run --init --name determined-agent --privileged --restart always \\
    --network default --runtime=runc \\
    -e DET_AGENT_ID="$name" -e DET_RESOURCE_POOL={pool} \\
    -e DET_AGENT_RECONNECT_ATTEMPTS=5 -e DET_AGENT_RECONNECT_BACKOFF=1 \\
    -v /usr/sbin/shutdown:/usr/sbin/shutdown \\
    -v /run/systemd/system:/run/systemd/system \\
    -v /var/run/dbus/system_bus_socket:/var/run/dbus/system_bus_socket \\
    -v /sys/fs/cgroup:/sys/fs/cgroup \\
    -v /var/run/docker.sock:/var/run/docker.sock \\
    -v {AGENT_FILES}/container_startup_script:{AGENT_FILES}/container_startup_script \\
    -v {AGENT_FILES}/agent.yaml:/etc/determined/agent.yaml \\
    --gpus all -e DET_SLOT_TYPE=cuda \\
    determinedai/determined-agent:0.38.0
"""


@pytest.fixture
def eight_gpus(machines_available: None, master: LocalDetermined) -> Iterator[AgentMachine]:
    with AgentMachine("gcp", "det-gpu-3", gpus=8, master=master) as machine:
        yield machine


def test_the_agent_starts_with_every_mount_and_flag(
    eight_gpus: AgentMachine, master: LocalDetermined
) -> None:
    master.add_pool("a100", "GCP", slots_per_agent=8)
    eight_gpus.boot(determined_shaped_boot(master.port, "a100"))
    eight_gpus.wait_for(master.registrations, what="the agent to register")
    assert master.registrations() == [AgentRegistration("det-gpu-3", "a100", 8, "cuda")]
    assert eight_gpus.boot_exit_code is None  # docker run in the foreground
    logs = eight_gpus.agent_logs()
    assert "container startup ran" in logs
    assert "master http://127.0.0.1:" in logs  # from agent.yaml
    eight_gpus.agent_exec(["test", "-S", "/var/run/docker.sock"])
    eight_gpus.agent_exec(["test", "-d", "/run/systemd/system"])
    info = eight_gpus.agent_container()
    assert info is not None
    assert info["HostConfig"]["Privileged"] is True
    assert info["HostConfig"]["Init"] is True


def test_a_machine_without_gpus_has_no_gpu_driver(
    machines_available: None, master: LocalDetermined
) -> None:
    with AgentMachine("aws", "i-cpu", gpus=0, master=master) as machine:
        machine.boot(
            "#!/bin/bash\ndocker run --rm --gpus all determinedai/determined-agent:0.38.0\n"
        )
        assert machine.wait_for_boot() != 0
        assert "could not select device driver" in machine.console
